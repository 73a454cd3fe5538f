// tests/train/trainer_test.cpp — end to end on a tiny model: the same seed gives the same run,
// metrics.jsonl has one object per step, and the saved HF dir reloads with the same loss.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/train/trainer.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> read_metrics(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

class TrainerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_trainer_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        // A learnable stream: a repeating pattern with some noise, vocabulary 50.
        std::vector<int32_t> ids;
        for (int i = 0; i < 6000; ++i) ids.push_back((i * 7 + (i / 13) % 3) % 50);
        write_token_shard((dir_ / "toks.bin").string(), ids, 50);
        cfg_ = default_run_config();
        cfg_.model.vocab_size = 50;
        cfg_.model.hidden_size = 32;
        cfg_.model.intermediate_size = 40;
        cfg_.model.num_layers = 2;
        cfg_.model.num_heads = 4;
        cfg_.model.num_kv_heads = 2;
        cfg_.model.max_position_embeddings = 64;
        cfg_.steps = 6;
        cfg_.micro_batch = 2;
        cfg_.seq_len = 16;
        cfg_.grad_accum = 2;
        cfg_.warmup_steps = 2;
        cfg_.eval_every = 3;
        cfg_.eval_batches = 2;
        cfg_.data_train = (dir_ / "toks.bin").string();
        cfg_.data_tokenizer = "";
    }
    void TearDown() override { fs::remove_all(dir_); }

    fs::path dir_;
    RunConfig cfg_;
};

TEST_F(TrainerTest, SameSeedSameRunAndLossDecreases) {
    run_training(cfg_, (dir_ / "a").string());
    run_training(cfg_, (dir_ / "b").string());
    auto a = read_metrics((dir_ / "a" / "metrics.jsonl").string());
    auto b = read_metrics((dir_ / "b" / "metrics.jsonl").string());
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i]["step"], int(i) + 1);
        EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
        EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>());
        for (const char* k : {"lr", "tokens_per_s", "step_ms", "tokens"})
            EXPECT_TRUE(a[i].contains(k));
    }
    EXPECT_EQ(a[0]["tokens"], 2 * 2 * 16);
    EXPECT_TRUE(a[2].contains("val_loss"));
    EXPECT_TRUE(a[5].contains("val_loss"));
    EXPECT_LT(a[5]["loss"].get<double>(), a[0]["loss"].get<double>());
    // Another seed gives another run.
    cfg_.seed = 7;
    run_training(cfg_, (dir_ / "c").string());
    auto c = read_metrics((dir_ / "c" / "metrics.jsonl").string());
    EXPECT_NE(c[0]["loss"].get<double>(), a[0]["loss"].get<double>());
}

TEST_F(TrainerTest, SavedModelReloadsWithSameWeightsAndLoss) {
    run_training(cfg_, (dir_ / "run").string());
    std::string final_dir = (dir_ / "run" / "final").string();
    ASSERT_TRUE(fs::exists(final_dir + "/config.json"));
    ASSERT_TRUE(fs::exists(final_dir + "/model.safetensors"));
    ModelConfig mc = load_hf_config(final_dir);
    EXPECT_EQ(mc.vocab_size, 50);
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

}  // namespace
}  // namespace ete
