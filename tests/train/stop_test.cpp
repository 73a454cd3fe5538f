// The trainer under a scheduler (train/trainer_job.cpp): the checkpoint ahead of a Slurm time
// limit, the attempt record that refuses a job failing the same step forever, and a stop that
// arrives before the first step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <ctime>
#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/signals.h"
#include "ete/io/checkpoint.h"
#include "ete/train/job_limits.h"
#include "ete/train/trainer.h"
#include "test_util.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

class StopTest : public TinyRunTest {};

std::vector<std::string> checkpoint_names(const fs::path& run) {
    std::vector<std::string> names;
    if (!fs::exists(run / "checkpoints")) return names;
    for (const auto& e : fs::directory_iterator(run / "checkpoints"))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// SLURM_JOB_END_TIME 100 s away with train.checkpoint_before_end_s = 1000: one checkpoint after
// the first step, not one per step; then the run goes on and finishes.
TEST_F(StopTest, CheckpointsOnceAheadOfTheJobsEndTime) {
    setenv("SLURM_JOB_END_TIME", std::to_string(std::time(nullptr) + 100).c_str(), 1);
    cfg_.steps = 4;
    cfg_.checkpoint_before_end_s = 1000;
    const TrainSummary s = run_training(cfg_, (dir_ / "end").string());
    unsetenv("SLURM_JOB_END_TIME");
    EXPECT_EQ(s.steps, 4);
    EXPECT_FALSE(s.interrupted);
    EXPECT_EQ(checkpoint_names(dir_ / "end"), (std::vector<std::string>{"step_00000001"}));
    // Off (0), or an end time further away than the margin: no checkpoint.
    setenv("SLURM_JOB_END_TIME", std::to_string(std::time(nullptr) + 100000).c_str(), 1);
    run_training(cfg_, (dir_ / "far").string());
    cfg_.checkpoint_before_end_s = 0;
    setenv("SLURM_JOB_END_TIME", std::to_string(std::time(nullptr) + 10).c_str(), 1);
    run_training(cfg_, (dir_ / "off").string());
    unsetenv("SLURM_JOB_END_TIME");
    EXPECT_TRUE(checkpoint_names(dir_ / "far").empty());
    EXPECT_TRUE(checkpoint_names(dir_ / "off").empty());
}

// A job that fails at step 3 every time it resumes from step 2 (a requeue loop): the fourth
// attempt is refused with the reason, and a clean run record does not count.
TEST_F(StopTest, RefusesTheAttemptAfterThreeFailuresFromTheSameStep) {
    cfg_.steps = 6;
    cfg_.checkpoint_every = 2;
    const std::string out = (dir_ / "loop").string();
    setenv("ETE_FAULT", "error@step=3", 1);
    EXPECT_THROW(run_training(cfg_, out), Error);  // from step 0: checkpoint 2, fails at 3
    for (int i = 0; i < 3; ++i) EXPECT_THROW(run_training(cfg_, out, {"auto", {}}), Error);
    const std::vector<Attempt> a = read_attempts(out);
    ASSERT_EQ(a.size(), 4u);
    EXPECT_EQ(a[0].start_step, 0);
    EXPECT_EQ(a[3].start_step, 2);
    EXPECT_EQ(a[3].end, "running");
    const std::string msg = error_of([&] { run_training(cfg_, out, {"auto", {}}); });
    EXPECT_NE(msg.find("no progress in 3 attempts: each started from step 2"), std::string::npos)
        << msg;
    EXPECT_EQ(read_attempts(out).size(), 4u);  // the refused one is not recorded
    unsetenv("ETE_FAULT");
    // The guard off: the run resumes and finishes; its record ends "done".
    cfg_.max_attempts_without_progress = 0;
    EXPECT_EQ(run_training(cfg_, out, {"auto", {}}).steps, 6);
    EXPECT_EQ(read_attempts(out).back().end, "done");
    EXPECT_EQ(read_attempts(out).back().end_step, 6);
}

// Resuming a run that already finished trained nothing and printed "final loss 0.0000 | median
// 0 tok/s" as if it had: now it says there was nothing left, and final/ is there.
TEST_F(StopTest, ResumingAFinishedRunSaysThereIsNothingLeft) {
    cfg_.steps = 4;
    cfg_.checkpoint_every = 4;
    const std::string out = (dir_ / "finished").string();
    run_training(cfg_, out);
    ::testing::internal::CaptureStderr();
    const TrainSummary s = run_training(cfg_, out, {"auto", {}});
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(s.start_step, 4);
    EXPECT_NE(log.find("done: nothing left to train (4 of 4 steps were done before)"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("final loss 0.0000"), std::string::npos) << log;
    EXPECT_TRUE(std::filesystem::exists(out + "/final/model.safetensors"));
}

// A stop requested while the run was starting (before the first step): no step is trained, no
// checkpoint written, the run reports a clean stop (exit 4), and --resume auto then trains it all.
TEST_F(StopTest, AStopBeforeTheFirstStepSavesNothing) {
    ASSERT_TRUE(install_signal_handlers(SignalMode::Deferred));
    reset_signal_requests();
    ASSERT_EQ(std::raise(SIGTERM), 0);
    const std::string out = (dir_ / "early").string();
    const TrainSummary s = run_training(cfg_, out);
    uninstall_signal_handlers();
    reset_signal_requests();
    EXPECT_TRUE(s.interrupted);
    EXPECT_EQ(s.steps, 0);
    EXPECT_TRUE(checkpoint_names(out).empty());
    EXPECT_EQ(read_attempts(out).back().end, "stopped");
    EXPECT_EQ(run_training(cfg_, out, {"auto", {}}).steps, cfg_.steps);
}

}  // namespace
}  // namespace ete
