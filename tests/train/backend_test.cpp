// tests/train/backend_test.cpp — the trainer on the guarded backend, whose memory the host cannot
// touch (a stray host access anywhere in the training loop, the checkpoint path or the final save
// would crash the test): the same losses and bit-identical weights as the CPU backend it wraps,
// and bit-exact resume.
#include <gtest/gtest.h>

#include <filesystem>

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

TEST_F(GuardedTrainer, ResumeIsBitExact) {
    cfg_.backend = "guarded";
    run_training(cfg_, (dir_ / "straight").string());
    RunConfig half = cfg_;
    half.checkpoint_every = 4;
    run_training(half, (dir_ / "a").string());
    fs::create_directories(dir_ / "b");
    fs::copy(dir_ / "a" / "metrics.jsonl", dir_ / "b" / "metrics.jsonl");
    run_training(half, (dir_ / "b").string(),
                 {(dir_ / "a" / "checkpoints" / "step_00000004").string(), {}});
    EXPECT_EQ(metric_column(dir_ / "b" / "metrics.jsonl", "loss"),
              metric_column(dir_ / "straight" / "metrics.jsonl", "loss"));
    EXPECT_EQ(read_file((dir_ / "straight" / "final" / "model.safetensors").string()),
              read_file((dir_ / "b" / "final" / "model.safetensors").string()));
}

}  // namespace
}  // namespace ete
