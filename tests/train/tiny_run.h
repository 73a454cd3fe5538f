// tests/train/tiny_run.h — a tiny Llama training job on a synthetic shard, shared by the trainer
// and resume tests: a temporary run directory, the config, and metrics.jsonl reading.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/data/token_shard.h"
#include "ete/train/config.h"
#include "numerics.h"

namespace ete {

// Sets an environment variable for the scope of a test.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() { unsetenv(name_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    const char* name_;
};

inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
    std::ifstream in(path);
    std::vector<nlohmann::json> out;
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

// One key of every step in metrics.jsonl as numbers (booleans as 0/1; -1 where a step lacks it).
inline std::vector<double> metric_column(const std::filesystem::path& metrics, const char* key) {
    std::vector<double> out;
    for (const auto& j : read_metrics(metrics.string())) {
        if (!j.contains(key) || j[key].is_null()) {
            out.push_back(-1.0);
        } else {
            out.push_back(j[key].is_boolean() ? double(j[key].get<bool>()) : j[key].get<double>());
        }
    }
    return out;
}

// How far two runs of a job may be apart when they compute the same products in other summation
// orders (another packing, another backend's kernels), step by step (numerics.h; the AdamW
// argument of tests/model/golden_test.cpp):
//  - a loss: its own rounding, two orders along the forward chain and the log-sum-exp,
//    reorder_prob(n_fwd + V); and the earlier steps' weights: a step moves a weight by
//    lr·m̂/(√v̂ + ε), which a gradient's relative noise ρ moves by at most 2ρ of itself, so the
//    loss's fall since step 0 is off by at most 2ρ of itself, ρ = reorder_prob(n)·√N (decoder_chain
//    over the N tokens of a step, whose per-token terms cancel to ~1/√N of their magnitudes);
//  - a final weight: 2ρ·lr a step, Σ lr <= steps·lr, plus each run's rounding of w - lr·step,
//    u·|w| a step.
// Steps computed from wrong data (a leak across packed documents, a dropped row) move a loss by
// 1e-3 or more.
struct RunTolerance {
    double loss0, rho, weight_abs;
    int64_t steps;
    double loss(double l0, double ls) const { return loss0 + 2 * rho * std::abs(l0 - ls) / ls; }
    double weight(double w) const {
        return weight_abs + 2.0 * double(steps) * testing::kUnitF32 * std::abs(w);
    }
};
inline RunTolerance run_tolerance(const RunConfig& c, const ModelConfig& m) {
    const int64_t T = c.seq_len, N = int64_t(c.micro_batch) * c.grad_accum * T;
    const double rho = testing::reorder_prob(testing::model_chain(m, T, N)) * std::sqrt(double(N));
    return {testing::reorder_prob(testing::model_forward_chain(m, T) + double(m.vocab_size)), rho,
            2 * rho * double(c.steps) * c.lr, c.steps};
}

// Fixture: dir_ holds toks.bin, a learnable stream (a repeating pattern with some noise) over
// kVocab ids; cfg_ trains a 2-layer GQA Llama on it, 2 micro-batches of 2 x 16 tokens per step.
class TinyRunTest : public ::testing::Test {
  protected:
    static constexpr int kVocab = 61;

    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
                std::to_string(::getpid()));
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
        std::vector<int32_t> ids;
        for (int i = 0; i < 8000; ++i) ids.push_back((i * 11 + (i / 7) % 5) % kVocab);
        write_token_shard((dir_ / "toks.bin").string(), ids, kVocab);
        cfg_ = default_run_config();
        cfg_.model.vocab_size = kVocab;
        cfg_.model.hidden_size = 32;
        cfg_.model.intermediate_size = 48;
        cfg_.model.num_layers = 2;
        cfg_.model.num_heads = 4;
        cfg_.model.num_kv_heads = 2;
        cfg_.model.max_position_embeddings = 64;
        cfg_.steps = 8;
        cfg_.micro_batch = 2;
        cfg_.seq_len = 16;
        cfg_.grad_accum = 2;
        cfg_.warmup_steps = 2;
        cfg_.eval_every = 4;
        cfg_.eval_batches = 1;
        cfg_.data_train = (dir_ / "toks.bin").string();
        cfg_.data_tokenizer = "";
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::filesystem::path dir_;
    RunConfig cfg_;
};

}  // namespace ete
