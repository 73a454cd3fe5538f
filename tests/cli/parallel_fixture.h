// tests/cli/parallel_fixture.h — what the multi-process training tests share
// (parallel_train_test.cpp, qat_train_test.cpp): a tiny Llama job (GQA, an untied head, a
// vocabulary of 61 and an MLP width of 45, neither divisible by 2, so tensor parallelism pads; 4
// layers, so pipeline stages get 2 each) trained by the real `ete` binary on one process or on a
// dp x tp x pp mesh of MPI processes (`ete launch -n N -- train ...`), and the comparison of two
// runs' per-step losses and final weights.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "ete/io/safetensors.h"
#include "numerics.h"
#include "shell.h"

namespace ete::parallel_test {

namespace fs = std::filesystem;

// In sanitizer builds: Open MPI never frees what MPI_Init allocates (and unloads the plugins that
// did, so the reports cannot even be attributed), so leak checking is off for processes that
// start MPI. Single-process runs of the same trainer code keep it on.
inline const std::string kMpiEnv = "ASAN_OPTIONS=detect_leaks=0 ";

struct RunResult {
    std::vector<int64_t> steps;
    std::vector<double> losses;
    std::map<std::string, std::vector<float>> weights;
    std::string log;
};

// How far two runs of the job (5 steps of 128 tokens, lr 1e-2) may be apart when they compute the
// same products and differ only in summation order — another layout's reductions, another BLAS
// kernel (numerics.h):
//  - a loss: two orders along the model's chain of reductions (decoder_chain of the job's
//    4 layers, C = hidden, head dim hidden/4, T = 16, F = intermediate, V = 61, 128 tokens):
//    ltol = reorder_prob(n), 3.5e-5 for the default job;
//  - a weight: AdamW's step m̂/(√v̂ + ε) moves by at most lr·δg/(|g| + ε) when its gradient
//    moves by δg, i.e. by lr·ρ for a gradient of relative noise ρ = reorder_prob(n) — times √128
//    where the gradient's 128 per-token terms cancel — per step, with |g| ≫ ε (tests whose
//    gradients come near ε raise train.adam_eps and say why): watol = 5·lr·ρ·√128, 2e-5 for the
//    default job; and each run rounds w − lr·step once a step: wtol = 2·5·u relative.
struct Parity {
    float wtol;
    double ltol;
    float watol;
};
inline Parity parity_tolerance(int64_t hidden = 32, int64_t intermediate = 45) {
    constexpr int kSteps = 5, kTokens = 128, kSeq = 16, kVocab = 61, kLayers = 4;
    constexpr double kLr = 1e-2;
    const double rho = testing::reorder_prob(
        testing::decoder_chain(kLayers, hidden, hidden / 4, kSeq, intermediate, kVocab, kTokens));
    return {float(2 * kSteps * testing::kUnitF32), rho,
            float(kSteps * kLr * rho * std::sqrt(double(kTokens)))};
}

class ParallelTrain : public ::testing::Test {
  protected:
    void SetUp() override {
        if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0)
            GTEST_SKIP() << "mpirun not installed (Debian package openmpi-bin)";
        dir_ = fs::temp_directory_path() / ("ete_par_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::vector<int32_t> ids;
        for (int i = 0; i < 6000; ++i) ids.push_back((i * 13 + (i / 5) % 7) % 61);
        write_token_shard((dir_ / "toks.bin").string(), ids, 61);
        write_file_atomic((dir_ / "job.toml").string(), config());
    }
    void TearDown() override { fs::remove_all(dir_); }

    std::string config() const {
        return "[model]\narch = \"llama\"\nvocab_size = 61\nhidden_size = 32\n"
               "intermediate_size = 45\nnum_layers = 4\nnum_heads = 4\nnum_kv_heads = 2\n"
               "max_position_embeddings = 32\ntie_word_embeddings = false\n"
               "[train]\nsteps = 5\nmicro_batch = 4\nseq_len = 16\ngrad_accum = 2\nlr = 1e-2\n"
               "warmup_steps = 1\neval_every = 0\nlog_every = 1\n"
               "[data]\ntrain = \"" +
               (dir_ / "toks.bin").string() + "\"\ntokenizer = \"\"\nval_fraction = 0.0\n";
    }

    // Trains the job on `ranks` processes (1: plain, no MPI) with extra arguments (and `ete
    // launch` options), into dir_/run<k> (last_out_).
    RunResult train(int ranks, const std::string& sets, const std::string& launch = "") {
        const std::string out = (dir_ / ("run" + std::to_string(runs_++))).string();
        last_out_ = out;
        const std::string args =
            "train " + (dir_ / "job.toml").string() + " --out " + out + " " + sets;
        const std::string cmd =
            "OMP_NUM_THREADS=1 " +
            (ranks == 1 ? ete_cmd(args)
                        : kMpiEnv + ete_cmd("launch -n " + std::to_string(ranks) + " " + launch +
                                            " -- " + args)) +
            " 2>&1";
        ShellResult r = run_shell(cmd);
        RunResult res;
        res.log = r.out;
        EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
        if (r.code != 0) return res;
        std::ifstream in(out + "/metrics.jsonl");
        for (std::string line; std::getline(in, line);) {
            nlohmann::json j = nlohmann::json::parse(line);
            res.steps.push_back(j["step"].get<int64_t>());
            res.losses.push_back(j["loss"].get<double>());
        }
        // A LoRA run's final/ is a PEFT adapter dir.
        const bool lora = fs::exists(out + "/final/adapter_model.safetensors");
        auto f = SafetensorsFile::open(
            out + (lora ? "/final/adapter_model.safetensors" : "/final/model.safetensors"));
        for (const std::string& n : f.names()) {
            Tensor t = f.to_f32(n);
            res.weights[n].assign(t.f32(), t.f32() + t.numel());
        }
        return res;
    }

    // wtol, ltol: the weights' and the losses' relative tolerances; watol: the weights' absolute
    // one. The defaults are parity_tolerance() of the job.
    static void expect_same(const RunResult& want, const RunResult& got, const std::string& what,
                            float wtol = parity_tolerance().wtol,
                            double ltol = parity_tolerance().ltol,
                            float watol = parity_tolerance().watol) {
        // got may be a resumed run that logged only the last steps.
        ASSERT_FALSE(got.steps.empty()) << what << "\n" << got.log;
        ASSERT_EQ(got.steps.back(), int64_t(want.losses.size())) << what;
        for (size_t i = 0; i < got.losses.size(); ++i) {
            const double w = want.losses[size_t(got.steps[i] - 1)];
            EXPECT_NEAR(got.losses[i], w, ltol * w) << what << " step " << got.steps[i];
        }
        ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
        for (const auto& [name, w] : want.weights) {
            const auto& g = got.weights.at(name);
            ASSERT_EQ(g.size(), w.size()) << what << " " << name;
            for (size_t i = 0; i < w.size(); ++i)
                ASSERT_NEAR(g[i], w[i], watol + wtol * std::fabs(w[i]))
                    << what << " " << name << "[" << i << "]";
        }
    }

    fs::path dir_;
    std::string last_out_;
    int runs_ = 0;
};

// "--set parallel.dp=D --set parallel.tp=T --set parallel.pp=P"
inline std::string mesh(int dp, int tp, int pp) {
    return "--set parallel.dp=" + std::to_string(dp) + " --set parallel.tp=" + std::to_string(tp) +
           " --set parallel.pp=" + std::to_string(pp);
}

using Layout = std::array<int, 3>;  // dp, tp, pp

// Every (dp, tp, pp) in {1,2}^3 but one process.
inline const std::vector<Layout> kLayouts = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1},
                                             {2, 1, 2}, {1, 2, 2}, {2, 2, 2}};

// The layouts a sweep runs: all of them, except under the sanitizers (run.sh's ASan pass), where
// only the last, the sweep's largest mesh, runs. There each rank's start costs ~0.5 CPU-s of
// relocations and shadow memory (a 2-rank launch 1.4 s, 8 ranks 4 s, against 0.7 and 1.4 s in
// the Release build), and the largest mesh runs every code path of the smaller ones — the dp
// buckets, the tp all-reduces and padding, the pp send/recv — while the one-process run beside it
// takes the branches of a size of 1. The Release pass and the numerics profile compare every
// layout's numbers; under the AVX2 kernels (the profile the sanitizer pass runs) the largest
// mesh, whose sums are reordered along every axis at once, stands for the others: the bounds come
// from an estimate that no layout changes (parity_tolerance).
inline std::vector<Layout> sweep(const std::vector<Layout>& all) {
    if (testing::under_sanitizers()) return {all.back()};
    return all;
}

}  // namespace ete::parallel_test
