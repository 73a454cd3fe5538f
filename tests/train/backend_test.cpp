// tests/train/backend_test.cpp — the trainer on the guarded backend, whose memory the host cannot
// touch (a stray host access anywhere in the training loop, the checkpoint path or the final save
// would crash the test): the same losses and bit-identical weights as the CPU backend it wraps,
// and bit-exact resume. The same checks run on a GPU where there is one (CudaTrainer).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/train/trainer.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

using GuardedTrainer = TinyRunTest;

// The guarded backend runs the CPU kernels on translated addresses: every number is the same.
TEST_F(GuardedTrainer, SameRunAsTheCpuBackend) {
    cfg_.recompute = "1";
    run_training(cfg_, (dir_ / "cpu").string());
    RunConfig g = cfg_;
    g.backend = "guarded";
    run_training(g, (dir_ / "guarded").string());
    EXPECT_EQ(metric_column(dir_ / "guarded" / "metrics.jsonl", "loss"),
              metric_column(dir_ / "cpu" / "metrics.jsonl", "loss"));
    EXPECT_EQ(metric_column(dir_ / "guarded" / "metrics.jsonl", "grad_norm"),
              metric_column(dir_ / "cpu" / "metrics.jsonl", "grad_norm"));
    EXPECT_EQ(read_file((dir_ / "guarded" / "final" / "model.safetensors").string()),
              read_file((dir_ / "cpu" / "final" / "model.safetensors").string()));
}

// A run straight through equals one stopped at step 4 and resumed from its checkpoint, bit for bit.
void expect_resume_bit_exact(const RunConfig& cfg, const fs::path& dir) {
    run_training(cfg, (dir / "straight").string());
    RunConfig half = cfg;
    half.checkpoint_every = 4;
    run_training(half, (dir / "a").string());
    fs::create_directories(dir / "b");
    fs::copy(dir / "a" / "metrics.jsonl", dir / "b" / "metrics.jsonl");
    run_training(half, (dir / "b").string(),
                 {(dir / "a" / "checkpoints" / "step_00000004").string(), {}});
    EXPECT_EQ(metric_column(dir / "b" / "metrics.jsonl", "loss"),
              metric_column(dir / "straight" / "metrics.jsonl", "loss"));
    EXPECT_EQ(read_file((dir / "straight" / "final" / "model.safetensors").string()),
              read_file((dir / "b" / "final" / "model.safetensors").string()));
}

TEST_F(GuardedTrainer, ResumeIsBitExact) {
    cfg_.backend = "guarded";
    expect_resume_bit_exact(cfg_, dir_);
}

// The trainer on a GPU (tools/gpu_check.sh; skipped where there is none): bit-exact resume on the
// same GPU, and the CPU backend's losses within float rounding (other summation orders, other
// exp and tanh), in fp32 and bf16.
class CudaTrainer : public TinyRunTest {
  protected:
    void SetUp() override {
        TinyRunTest::SetUp();
        if (!cuda_unavailable_reason().empty()) GTEST_SKIP() << cuda_unavailable_reason();
    }
};

TEST_F(CudaTrainer, ResumeIsBitExact) {
    cfg_.backend = "cuda";
    expect_resume_bit_exact(cfg_, dir_);
    cfg_.precision = "bf16";
    expect_resume_bit_exact(cfg_, dir_ / "bf16");
}

TEST_F(CudaTrainer, LossesFollowTheCpuRun) {
    for (const char* precision : {"fp32", "bf16"}) {
        RunConfig c = cfg_;
        c.precision = precision;
        run_training(c, (dir_ / precision / "cpu").string());
        c.backend = "cuda";
        run_training(c, (dir_ / precision / "cuda").string());
        const auto want = metric_column(dir_ / precision / "cpu" / "metrics.jsonl", "loss");
        const auto got = metric_column(dir_ / precision / "cuda" / "metrics.jsonl", "loss");
        ASSERT_EQ(got.size(), want.size()) << precision;
        // fp32: the same products in other orders, exp and tanh within a few ulp: run_tolerance
        // (tiny_run.h), 1.8e-5 on the first loss. bf16: not a rounding bound but a closeness one,
        // by training dynamics: two bf16 runs whose gradients each carry ~1% of 16-bit noise,
        // within 1e-2; a GPU path that lost the fp32 masters or the bf16 rounding drifts further.
        const RunTolerance fp32 = run_tolerance(c, c.model);
        for (size_t i = 0; i < want.size(); ++i) {
            const double tol =
                std::string(precision) == "fp32" ? fp32.loss(want[0], want[i]) : 1e-2;
            EXPECT_NEAR(got[i], want[i], tol * std::fabs(want[i])) << precision << " step " << i;
        }
    }
}

}  // namespace
}  // namespace ete
