// tests/train/config_test.cpp — the key table: TOML, --set and --dump-config agree; bad keys and
// values give errors that name the key and the expected form.
#include <gtest/gtest.h>

#include "test_util.h"

#include "ete/core/error.h"
#include "ete/model/lora_spec.h"
#include "ete/optim/adamw.h"
#include "ete/optim/optimizer.h"
#include "ete/train/config.h"

namespace ete {
namespace {

TEST(Config, TomlAndOverridesSetFields) {
    RunConfig c = default_run_config();
    apply_toml(c, "[train]\nsteps = 7\nlr = 1\n[model]\nhidden_size = 64\narch = \"gpt2\"\n",
               "t.toml");
    EXPECT_EQ(c.steps, 7);
    EXPECT_DOUBLE_EQ(c.lr, 1.0);  // an integer is accepted for a float key
    EXPECT_EQ(c.model.hidden_size, 64);
    EXPECT_EQ(c.model.arch, Arch::GPT2);
    apply_override(c, "train.lr=2.5e-4");
    apply_override(c, "data.train=\"x.bin\"");
    apply_override(c, "model.tie_word_embeddings=false");
    EXPECT_DOUBLE_EQ(c.lr, 2.5e-4);
    EXPECT_EQ(c.data_train, "x.bin");
    EXPECT_FALSE(c.model.tie_word_embeddings);
}

// GPT-2 has no grouped-query attention: model.num_kv_heads follows model.num_heads unless given,
// and a given one that differs is an error naming both.
TEST(Config, Gpt2TakesItsKvHeadsFromItsHeads) {
    RunConfig c = default_run_config();
    ASSERT_NE(c.model.num_kv_heads, 8);
    c.model.vocab_size = 100;  // else taken from the tokenizer
    apply_override(c, "model.arch=gpt2");
    apply_override(c, "model.num_heads=8");
    EXPECT_EQ(c.model.num_kv_heads, 8);
    EXPECT_NO_THROW(c.model.validate());
    RunConfig l = default_run_config();  // Llama keeps its GQA default
    apply_override(l, "model.num_heads=8");
    EXPECT_EQ(l.model.num_kv_heads, 2);
    apply_override(c, "model.num_kv_heads=2");  // given: kept, and refused
    EXPECT_EQ(c.model.num_kv_heads, 2);
    EXPECT_EQ(error_of([&] { c.model.validate(); }),
              "gpt2: model.num_kv_heads = 2 with model.num_heads = 8: GPT-2 has no grouped-query "
              "attention (leave num_kv_heads unset, or equal to num_heads)");
}

TEST(Config, DumpReloadsToTheSameConfig) {
    RunConfig a = default_run_config();
    apply_override(a, "train.seed=99");
    apply_override(a, "train.lr_schedule=linear");
    RunConfig b;  // starts from other values on purpose
    apply_toml(b, dump_toml(a), "dump");
    EXPECT_EQ(dump_toml(a), dump_toml(b));
    EXPECT_EQ(b.seed, 99u);
    EXPECT_EQ(b.lr_schedule, "linear");
    EXPECT_EQ(b.model.num_kv_heads, a.model.num_kv_heads);
}

TEST(Config, ErrorsNameTheKeyAndExpectation) {
    RunConfig c = default_run_config();
    auto e1 = error_of([&] { apply_toml(c, "[train]\nstepz = 3\n", "f.toml"); });
    EXPECT_NE(e1.find("unknown config key 'train.stepz'"), std::string::npos) << e1;
    EXPECT_NE(e1.find("train.steps"), std::string::npos) << e1;  // lists the known keys
    auto e2 = error_of([&] { apply_toml(c, "[train]\nsteps = \"many\"\n", "f.toml"); });
    EXPECT_NE(e2.find("'train.steps': expected an integer"), std::string::npos) << e2;
    auto e3 = error_of([&] { apply_override(c, "train.lr=fast"); });
    EXPECT_NE(e3.find("train.lr=fast: expected a number"), std::string::npos) << e3;
    auto e4 = error_of([&] { apply_override(c, "steps"); });
    EXPECT_NE(e4.find("expected section.key=value"), std::string::npos) << e4;
    auto e5 = error_of([&] { apply_toml(c, "[train\n", "broken.toml"); });
    EXPECT_NE(e5.find("broken.toml:1"), std::string::npos) << e5;
    RunConfig bad = default_run_config();
    apply_override(bad, "train.micro_batch=0");
    auto e6 = error_of([&] { validate(bad); });
    EXPECT_NE(e6.find("train.micro_batch = 0: expected > 0"), std::string::npos) << e6;
    auto e7 = error_of([&] { apply_override(c, "train.seq_len=99999999999"); });
    EXPECT_NE(e7.find("out of range"), std::string::npos) << e7;
}

// Non-finite and absurd numbers are refused as they are read or validated, naming the key
// (before the fix lr = inf, 1e30 or initializer_range = 1e30 trained on and wrote NaN weights).
TEST(Config, NonFiniteAndAbsurdNumbersAreRefused) {
    RunConfig c = default_run_config();
    for (const char* v : {"inf", "-inf", "nan"}) {
        for (const char* k : {"train.lr", "train.weight_decay", "model.initializer_range",
                              "parallel.timeout_s", "anomaly.spike_zscore"}) {
            auto e = error_of([&] { apply_override(c, fmt::format("{}={}", k, v)); });
            EXPECT_NE(e.find(fmt::format("config key '{}' = ", k)), std::string::npos) << e;
            EXPECT_NE(e.find("expected a finite number"), std::string::npos) << e;
        }
    }
    auto toml = error_of([&] { apply_toml(c, "[train]\nlr = inf\n", "f.toml"); });
    EXPECT_NE(toml.find("'train.lr' = inf: expected a finite number"), std::string::npos) << toml;
    for (const auto& [assign, want] : std::vector<std::pair<std::string, std::string>>{
             {"train.lr=1e30", "train.lr = 1e+30: expected in (0, 10]"},
             {"train.weight_decay=1e30", "train.weight_decay = 1e+30: expected in [0, 10]"},
             {"model.initializer_range=1e30",
              "model.initializer_range = 1e+30: expected in (0, 10]"},
             {"anomaly.on_repeated=retry", "anomaly.on_repeated = 'retry'"},
             {"train.checkpoint_minutes=-1", "train.checkpoint_minutes = -1: expected >= 0"}}) {
        RunConfig b = default_run_config();
        apply_override(b, assign);
        auto e = error_of([&] { validate(b); });
        EXPECT_NE(e.find(want), std::string::npos) << e;
    }
}

// lora.targets at its default on a family without q_proj/v_proj is PEFT's default for it; a
// value the user gave is kept (and checked) as given.
TEST(Config, DefaultLoraTargetsFollowPeftsPerFamily) {
    RunConfig c;
    EXPECT_EQ(lora_spec(c).targets, (std::vector<std::string>{"q_proj", "v_proj"}));
    c.model.arch = Arch::Phi3;
    EXPECT_EQ(lora_spec(c).targets,
              (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
    c.model.arch = Arch::GPT2;
    EXPECT_EQ(lora_spec(c).targets, (std::vector<std::string>{"c_attn"}));
    c.lora_targets = "c_fc";
    EXPECT_EQ(lora_spec(c).targets, (std::vector<std::string>{"c_fc"}));
    c.model.arch = Arch::Phi3;
    c.lora_enabled = true;
    c.lora_targets = "q_proj,v_proj ";  // given (not the default text): checked as given
    EXPECT_NE(error_of([&] {
                  check_lora_spec(lora_spec(c), c.model);
              }).find("'q_proj' is not a linear of a phi3 model"),
              std::string::npos);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
    // 10 warmup steps to 1.0, then cosine to 0.1 at the last of 110 steps.
    EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Cosine, 0, 110, 10, 1.0, 0.1), 0.1);
    EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Cosine, 9, 110, 10, 1.0, 0.1), 1.0);
    EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Cosine, 10, 110, 10, 1.0, 0.1), 1.0);
    // 1e-12: a few double roundings (~1e-16 each) of the schedule's formula.
    EXPECT_NEAR(lr_at(LrSchedule::Cosine, 109, 110, 10, 1.0, 0.1), 0.1, 1e-12);
    EXPECT_NEAR(lr_at(LrSchedule::Cosine, 59, 110, 10, 1.0, 0.1),
                0.55 + 0.45 * std::cos(M_PI * 49 / 99), 1e-12);
    EXPECT_NEAR(lr_at(LrSchedule::Linear, 59, 110, 10, 1.0, 0.0), 1.0 - 49.0 / 99.0, 1e-12);
    EXPECT_DOUBLE_EQ(lr_at(LrSchedule::Constant, 100, 110, 10, 1.0, 0.1), 1.0);
    EXPECT_THROW(lr_schedule_from_name("exp"), Error);
}

TEST(RunConfigTest, OptimizerIsAdamwOrAdamw8bit) {
    RunConfig c = default_run_config();
    EXPECT_EQ(c.optimizer, "adamw");
    apply_override(c, "train.optimizer=adamw8bit");
    EXPECT_NO_THROW(validate(c));
    apply_override(c, "train.optimizer=sgd");
    EXPECT_EQ(error_of([&] { validate(c); }),
              "train.optimizer = 'sgd': expected adamw or adamw8bit");
    apply_override(c, "train.optimizer=adamw8bit");
    apply_override(c, "train.backend=cuda");
    EXPECT_NE(error_of([&] { validate(c); }).find("8-bit AdamW has no CUDA kernel yet"),
              std::string::npos);
    EXPECT_EQ(error_of([] { optimizer_kind_from_name("lion"); }),
              "train.optimizer = 'lion': expected adamw or adamw8bit");
}

TEST(RunConfigTest, ZeroStageIsZeroToThreeAndZero1MeansOne) {
    RunConfig c = default_run_config();
    EXPECT_EQ(zero_stage(c), 0);
    apply_override(c, "parallel.zero1=true");
    EXPECT_EQ(zero_stage(c), 1);
    apply_override(c, "parallel.zero_stage=2");
    EXPECT_EQ(zero_stage(c), 2);  // the larger wins
    EXPECT_NO_THROW(validate(c));
    apply_override(c, "parallel.zero_stage=3");
    EXPECT_EQ(zero_stage(c), 3);
    EXPECT_NO_THROW(validate(c));
    apply_override(c, "parallel.zero_stage=4");
    EXPECT_EQ(error_of([&] { validate(c); }), "parallel.zero_stage = 4: expected 0, 1, 2 or 3");
    // Stage 3 shards a LoRA/QLoRA base too, and trains QAT with its range scales; learned
    // scales are refused (their gradient reads whole weight gradients).
    apply_override(c, "parallel.zero_stage=3");
    apply_override(c, "lora.enabled=true");
    EXPECT_NO_THROW(validate(c));
    apply_override(c, "lora.enabled=false");
    apply_override(c, "qat.enabled=true");
    EXPECT_NO_THROW(validate(c));
    apply_override(c, "qat.learnable_scale=true");
    EXPECT_NE(
        error_of([&] { validate(c); }).find("parallel.zero_stage = 3 with qat.learnable_scale"),
        std::string::npos);
    apply_override(c, "qat.learnable_scale=false");
    apply_override(c, "qat.enabled=false");
    apply_override(c, "parallel.zero_stage=2");
    apply_override(c, "lora.enabled=true");
    apply_override(c, "lora.dynamic_rank=true");
    EXPECT_NE(error_of([&] { validate(c); }).find("parallel.zero_stage = 2 with lora.dynamic_rank"),
              std::string::npos);
    c = default_run_config();
    apply_override(c, "parallel.zero_stage=2");
    apply_override(c, "qat.enabled=true");
    apply_override(c, "qat.learnable_scale=true");
    EXPECT_NE(
        error_of([&] { validate(c); }).find("parallel.zero_stage = 2 with qat.learnable_scale"),
        std::string::npos);
    apply_override(c, "parallel.zero_stage=1");
    EXPECT_NO_THROW(validate(c));
}

}  // namespace
}  // namespace ete
