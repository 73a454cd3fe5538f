// tests/train/trainer_test.cpp — end to end on a tiny model: the same seed gives the same run,
// metrics.jsonl has one object per step, and the saved HF dir reloads with the same loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/data/sft.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/train/trainer.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

using TrainerTest = TinyRunTest;

TEST_F(TrainerTest, SameSeedSameRunAndLossDecreases) {
    run_training(cfg_, (dir_ / "a").string());
    run_training(cfg_, (dir_ / "b").string());
    auto a = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    auto b = read_metrics((dir_ / "b" / "metrics.jsonl").string());
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(b.size(), 8u);
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i]["step"], int(i) + 1);
        EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
        EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>());
        for (const char* k : {"lr", "tokens_per_s", "step_ms", "tokens"})
            EXPECT_TRUE(a[i].contains(k));
    }
    EXPECT_EQ(a[0]["tokens"], 2 * 2 * 16);
    EXPECT_TRUE(a[3].contains("val_loss"));  // eval_every = 4
    EXPECT_FALSE(a[4].contains("val_loss"));
    EXPECT_TRUE(a[7].contains("val_loss"));
    EXPECT_LT(a[7]["loss"].get<double>(), a[0]["loss"].get<double>());
    // Another seed gives another run.
    cfg_.seed = 7;
    run_training(cfg_, (dir_ / "c").string());
    auto c = read_metrics((dir_ / "c" / "metrics.jsonl").string());
    EXPECT_NE(c[0]["loss"].get<double>(), a[0]["loss"].get<double>());
}

// train.optimizer = adamw8bit trains like AdamW: over 300 steps of a model whose matrices keep
// 8-bit moments, the mean loss of the last 20 steps within 2% of AdamW's (the issue's bar; the
// quantization noise of the moments is ~1% of their block's absmax, and the loss itself falls
// by more than half, so a broken 8-bit path — stale moments, a wrong map — lands far outside).
TEST_F(TrainerTest, Adamw8bitTrainsLikeAdamW) {
    RunConfig c = cfg_;
    c.model.hidden_size = 64;
    c.model.intermediate_size = 128;
    c.steps = 300;
    c.grad_accum = 1;
    c.warmup_steps = 20;
    c.eval_every = 0;
    c.log_every = 100;
    auto tail_loss = [&](const std::string& optimizer) {
        c.optimizer = optimizer;
        run_training(c, (dir_ / optimizer).string());
        const std::vector<double> l = metric_column(dir_ / optimizer / "metrics.jsonl", "loss");
        EXPECT_LT(l.back(), 0.5 * l.front()) << optimizer;
        double sum = 0;
        for (size_t i = l.size() - 20; i < l.size(); ++i) sum += l[i];
        return sum / 20;
    };
    const double adamw = tail_loss("adamw"), eight = tail_loss("adamw8bit");
    EXPECT_NEAR(eight, adamw, 0.02 * adamw);
    RecordProperty("relative_difference", std::to_string((eight - adamw) / adamw));
}

TEST_F(TrainerTest, SavedModelReloadsWithSameWeightsAndLoss) {
    run_training(cfg_, (dir_ / "run").string());
    std::string final_dir = (dir_ / "run" / "final").string();
    ASSERT_TRUE(fs::exists(final_dir + "/config.json"));
    ASSERT_TRUE(fs::exists(final_dir + "/model.safetensors"));
    ModelConfig mc = load_hf_config(final_dir);
    EXPECT_EQ(mc.vocab_size, kVocab);
    EXPECT_EQ(mc.num_kv_heads, 2);
    auto be = make_cpu_backend();
    Transformer m(mc, *be);
    load_hf_weights(final_dir, m.params());
    // Continuing from the saved model: the first step's loss is lower than a fresh init's.
    RunConfig cont = cfg_;
    cont.model_init_from = final_dir;
    cont.steps = 1;
    cont.warmup_steps = 0;
    run_training(cont, (dir_ / "cont").string());
    auto fresh = read_metrics((dir_ / "run" / "metrics.jsonl").string());
    auto more = read_metrics((dir_ / "cont" / "metrics.jsonl").string());
    EXPECT_LT(more[0]["loss"].get<double>(), fresh[0]["loss"].get<double>() - 0.05);
}

// data.format = sft: the loss covers only response tokens, so a step counts fewer target tokens
// than B·T, and the run trains (loss falls) on a repetitive instruction set.
TEST_F(TrainerTest, SftFormatTrainsOnResponsesOnly) {
    std::string jsonl;
    for (int i = 0; i < 60; ++i) {
        jsonl += "{\"instruction\": \"repeat\", \"input\": \"ab\", \"output\": \"abab\"}\n";
        jsonl += "{\"prompt\": \"x\", \"completion\": \"yy\"}\n";
    }
    write_file_atomic((dir_ / "sft.jsonl").string(), jsonl);
    Tokenizer tok =
        Tokenizer::train("abxy repeat ### Instruction Input Response", 280, {"<|endoftext|>"});
    tok.save((dir_ / "tok.json").string());
    cfg_.data_format = "sft";
    cfg_.data_train = (dir_ / "sft.jsonl").string();
    cfg_.data_tokenizer = (dir_ / "tok.json").string();
    cfg_.model.vocab_size = 0;  // from the tokenizer
    cfg_.seq_len = 32;
    cfg_.steps = 12;
    cfg_.lr = 1e-2;
    run_training(cfg_, (dir_ / "sft").string());
    auto m = read_metrics((dir_ / "sft" / "metrics.jsonl").string());
    ASSERT_EQ(m.size(), 12u);
    for (const auto& j : m) {
        EXPECT_GT(j["tokens"].get<int>(), 0);
        EXPECT_LT(j["tokens"].get<int>(), 2 * 2 * 32 / 2);  // responses are a small share
    }
    EXPECT_LT(m.back()["loss"].get<double>(), 0.5 * m.front()["loss"].get<double>());
}

// data.sft_chat_template = "model": chat records rendered with the chat_template of the
// tokenizer_config.json beside the tokenizer (a ChatML template here, eos <|im_end|>); only the
// assistant turns ("abab<|im_end|>": 5 tokens or fewer) carry targets, and the run trains.
TEST_F(TrainerTest, SftWithTheModelsChatTemplateTrainsOnAssistantTurns) {
    std::string jsonl;
    for (int i = 0; i < 60; ++i)
        jsonl += R"({"messages": [{"role": "user", "content": "repeat ab"}, )"
                 R"({"role": "assistant", "content": "abab"}]})"
                 "\n";
    write_file_atomic((dir_ / "chat.jsonl").string(), jsonl);
    Tokenizer tok = Tokenizer::train("abxy repeat user assistant", 280,
                                     {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    tok.save((dir_ / "tokenizer.json").string());
    const nlohmann::json config = {
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
    write_file_atomic((dir_ / "tokenizer_config.json").string(), config.dump());
    cfg_.data_format = "sft";
    cfg_.data_sft_chat_template = "model";
    cfg_.data_train = (dir_ / "chat.jsonl").string();
    cfg_.data_tokenizer = (dir_ / "tokenizer.json").string();
    cfg_.model.vocab_size = 0;
    cfg_.seq_len = 32;
    cfg_.steps = 12;
    cfg_.lr = 1e-2;
    run_training(cfg_, (dir_ / "chat").string());
    auto m = read_metrics((dir_ / "chat" / "metrics.jsonl").string());
    ASSERT_EQ(m.size(), 12u);
    for (const auto& j : m) {
        EXPECT_GT(j["tokens"].get<int>(), 0);
        EXPECT_LE(j["tokens"].get<int>(), 2 * 2 * 5);  // 4 records a step, 5 targets at most
    }
    EXPECT_LT(m.back()["loss"].get<double>(), 0.5 * m.front()["loss"].get<double>());
}

// data.sft_pack: when every step covers the whole dataset once, packed rows (attention and
// positions kept inside each example) must train exactly like one example per row: the same
// losses and the same weights, up to float summation order.
TEST_F(TrainerTest, SftPackingTrainsLikeOneExamplePerRow) {
    std::string jsonl;
    for (int i = 0; i < 9; ++i)
        jsonl += fmt::format(R"({{"prompt": "{}", "completion": "{}"}})",
                             std::string(size_t(1 + i % 4), 'x'),
                             std::string(size_t(2 + i % 3), 'a' + char(i % 2))) +
                 "\n";
    write_file_atomic((dir_ / "sft.jsonl").string(), jsonl);
    Tokenizer tok = Tokenizer::train("xxab", 260, {"<|endoftext|>"});
    tok.save((dir_ / "tok.json").string());
    cfg_.data_format = "sft";
    cfg_.data_train = (dir_ / "sft.jsonl").string();
    cfg_.data_tokenizer = (dir_ / "tok.json").string();
    cfg_.data_val_fraction = 0.0;
    cfg_.eval_every = 0;
    cfg_.model.vocab_size = 0;
    cfg_.seq_len = 16;
    cfg_.grad_accum = 1;
    cfg_.steps = 3;
    RunConfig flat = cfg_, packed = cfg_;
    flat.micro_batch = 9;  // one step = one epoch of single-example rows
    SftOptions opt;
    opt.pack = true;
    const uint64_t rows = SftDataset(cfg_.data_train, tok, 16, opt, 1, 0.0).num_train_samples();
    ASSERT_LT(rows, 9u);
    packed.micro_batch = int(rows);
    packed.data_sft_pack = true;
    run_training(flat, (dir_ / "flat").string());
    run_training(packed, (dir_ / "packed").string());
    auto a = read_metrics((dir_ / "flat" / "metrics.jsonl").string());
    auto b = read_metrics((dir_ / "packed" / "metrics.jsonl").string());
    ASSERT_EQ(a.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    // The same products in other GEMM blockings (run_tolerance, tiny_run.h: 2.1e-5 on the first
    // loss, 6.5e-6 on a weight); attention leaking across packed examples moves a loss by about
    // 1e-2 (tests/model/packing_test.cpp).
    auto be = make_cpu_backend();
    ModelConfig mc = load_hf_config((dir_ / "flat" / "final").string());
    const RunTolerance tol = run_tolerance(flat, mc);
    const double l0 = a[0]["loss"].get<double>();
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(a[i]["tokens"], b[i]["tokens"]);
        const double want = a[i]["loss"].get<double>();
        EXPECT_NEAR(b[i]["loss"].get<double>(), want, tol.loss(l0, want) * want);
    }
    Transformer ma(mc, *be), mb(mc, *be);
    load_hf_weights((dir_ / "flat" / "final").string(), ma.params());
    load_hf_weights((dir_ / "packed" / "final").string(), mb.params());
    HostParams ha = ma.params().to_host(), hb = mb.params().to_host();
    const float* wa = ha.data();
    const float* wb = hb.data();
    for (int64_t i = 0; i < ha.numel(); ++i) ASSERT_NEAR(wa[i], wb[i], tol.weight(wa[i])) << i;
}

}  // namespace
}  // namespace ete
