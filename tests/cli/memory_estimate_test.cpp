// tests/cli/memory_estimate_test.cpp — the memory estimate a run prints at start against the peak
// RSS it measures after its first steps (train/memory_estimate.h), through the real binary, for
// tiny and bench-sized Llamas in fp32 and bf16, full training, LoRA over an f32 base and QLoRA.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

// "41.0 MiB", "1.21 GiB" (format_bytes) in bytes.
double parse_bytes(const std::string& number, const std::string& unit) {
    const double v = std::stod(number);
    if (unit == "GiB") return v * double(1 << 30);
    if (unit == "MiB") return v * double(1 << 20);
    if (unit == "KiB") return v * 1024.0;
    return v;
}

struct Peak {
    double measured = 0, estimated = 0;
};

class MemoryEstimate : public ::testing::Test {
  protected:
    void SetUp() override {
        if (testing::under_sanitizers())
            GTEST_SKIP() << "AddressSanitizer's shadow memory is outside the estimate";
        dir_ = fs::temp_directory_path() / ("ete_memest_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::vector<int32_t> ids(200000);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + i / 3) % 8192);
        write_token_shard((dir_ / "toks.bin").string(), ids, 8192);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // The run's printed pair (2 steps: the measurement follows the last, whose AdamW moments and
    // activations are all touched).
    Peak run(const std::string& sets) {
        const std::string cmd =
            "OMP_NUM_THREADS=2 " +
            ete_cmd("train --out " + (dir_ / "run").string() +
                    " --set train.steps=2 --set train.eval_every=0 --set train.warmup_steps=1 "
                    "--set data.tokenizer=\"\" --set data.val_fraction=0 --set data.train=" +
                    (dir_ / "toks.bin").string() + sets) +
            " 2>&1";
        const ShellResult r = run_shell(cmd);
        EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
        static const std::regex line(
            R"(measured peak RSS ([0-9.]+) (B|KiB|MiB|GiB) against the estimated peak ([0-9.]+) (B|KiB|MiB|GiB))");
        std::smatch m;
        EXPECT_TRUE(std::regex_search(r.out, m, line)) << r.out;
        if (m.empty()) return {};
        fs::remove_all(dir_ / "run");
        return {parse_bytes(m[1], m[2]), parse_bytes(m[3], m[4])};
    }

    fs::path dir_;
};

// LoRA's dense frozen base is held in the compute dtype (f32 with fp32, bf16 with bf16).
std::string mode_sets(const std::string& mode, const std::string& precision) {
    const std::string lora =
        " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=8";
    if (mode == "lora")
        return lora + " --set lora.base_format=" + (precision == "fp32" ? "f32" : "bf16");
    if (mode == "qlora") return lora + " --set lora.base_format=nf4";
    return "";
}

// The estimate counts every buffer ETE allocates exactly; what it models coarsely is the rest of
// the process: the runtime measured before the model is built, the GEMM engines' buffers
// (Backend::gemm_workspace_bytes: 8 MiB per thread, plus the bf16 fallback's fp32 staging where
// it runs), the allocator's arenas and the threads' stacks. On the bench Llama (~32M parameters,
// 0.3-0.8 GiB) that is within 10% either way (measured on Zen 4 over the twelve runs of the
// default kernels, ONEDNN_MAX_CPU_ISA=AVX2 and ETE_GEMM16=sgemm: -5.2% to +3.6%). On a tiny model
// (~0.6M parameters, a 30-50 MiB process) the estimate counts the GEMM buffers in full while its
// products touch a fraction of them: the measured peak may lie up to that whole term below it
// (16 MiB for 2 threads, plus up to 6 MiB of bf16 staging at this shape) and 2 MiB more, so 24
// MiB (measured: 3.4 to 15.9 MiB below), and at most 8 MiB above (the estimate errs high, which
// check_memory's refusal of runs that cannot fit needs).
TEST_F(MemoryEstimate, BoundsTheMeasuredPeak) {
    struct Shape {
        const char* name;
        std::string sets;
        double below, above;  // allowed measured - estimated, bytes (negative: below)
    };
    const double MiB = double(1 << 20);
    const Shape shapes[] = {
        {"tiny",
         " --set model.vocab_size=8192 --set model.hidden_size=64 --set model.num_layers=2 "
         "--set model.num_heads=4 --set model.num_kv_heads=2 --set model.intermediate_size=128 "
         "--set model.max_position_embeddings=64 --set train.seq_len=32 "
         "--set train.micro_batch=2",
         -24 * MiB, 8 * MiB},
        {"bench",
         " --set model.vocab_size=8192 --set model.hidden_size=512 --set model.num_layers=8 "
         "--set model.num_heads=8 --set model.num_kv_heads=4 --set model.intermediate_size=1408 "
         "--set model.max_position_embeddings=256 --set train.seq_len=256 "
         "--set train.micro_batch=4",
         0, 0},
    };
    for (const Shape& s : shapes) {
        for (const std::string precision : {"fp32", "bf16"}) {
            for (const std::string mode : {"full", "lora", "qlora"}) {
                const std::string what = fmt::format("{} {} {}", s.name, precision, mode);
                const Peak p = run(s.sets + " --set train.precision=" + precision +
                                   mode_sets(mode, precision));
                ASSERT_GT(p.estimated, 0) << what;
                const double d = p.measured - p.estimated;
                const double below = s.below != 0 ? s.below : -0.10 * p.estimated;
                const double above = s.above != 0 ? s.above : 0.10 * p.estimated;
                EXPECT_GE(d, below) << what << ": measured " << p.measured / MiB
                                    << " MiB, estimated " << p.estimated / MiB << " MiB";
                EXPECT_LE(d, above) << what << ": measured " << p.measured / MiB
                                    << " MiB, estimated " << p.estimated / MiB << " MiB";
            }
        }
    }
}

}  // namespace
}  // namespace ete
