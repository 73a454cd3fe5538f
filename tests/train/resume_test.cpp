// tests/train/resume_test.cpp — checkpoints and resume: N steps + resume + N steps equals 2N
// straight (same losses, bit-identical weights); SIGTERM stops cleanly with a checkpoint; a torn
// (uncommitted) checkpoint directory is never loaded; changed settings are refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "ete/io/checkpoint.h"
#include "ete/train/trainer.h"
#include "test_build.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

std::vector<double> losses(const fs::path& metrics) {
    std::vector<double> out;
    for (const auto& j : read_metrics(metrics.string())) out.push_back(j["loss"].get<double>());
    return out;
}

using ResumeTest = TinyRunTest;

// 8 steps straight, and 4 + a resume from the checkpoint at 4: the same losses and bit-identical
// final weights.
void expect_resume_equals_straight(const RunConfig& cfg, const fs::path& dir_) {
    run_training(cfg, (dir_ / "straight").string());
    RunConfig half = cfg;
    half.checkpoint_every = 4;
    // Train 8 steps with a checkpoint at 4 into "a", then resume "b" from that checkpoint.
    run_training(half, (dir_ / "a").string());
    fs::create_directories(dir_ / "b");
    fs::copy(dir_ / "a" / "metrics.jsonl", dir_ / "b" / "metrics.jsonl");
    TrainSummary s = run_training(half, (dir_ / "b").string(),
                                  {(dir_ / "a" / "checkpoints" / "step_00000004").string(), {}});
    EXPECT_EQ(s.start_step, 4);
    EXPECT_EQ(s.steps, 8);
    auto straight = losses(dir_ / "straight" / "metrics.jsonl");
    auto resumed = losses(dir_ / "b" / "metrics.jsonl");
    ASSERT_EQ(straight.size(), 8u);
    EXPECT_EQ(resumed, straight);  // the first 4 kept, the last 4 recomputed identically
    EXPECT_EQ(read_file((dir_ / "straight" / "final" / "model.safetensors").string()),
              read_file((dir_ / "b" / "final" / "model.safetensors").string()));
}

TEST_F(ResumeTest, HalfThenResumeEqualsStraightBitForBit) {
    expect_resume_equals_straight(cfg_, dir_);
}

// 8-bit AdamW: the checkpoint holds the dequantized moments, and requantizing them restores the
// same codes (core/dynamic_map.h), so a resume is still bit for bit. A wider model, so that its
// matrices (64 x 128 and more) keep 8-bit moments and its norms F32 ones.
TEST_F(ResumeTest, Adamw8bitHalfThenResumeEqualsStraightBitForBit) {
    RunConfig c = cfg_;
    c.optimizer = "adamw8bit";
    c.model.hidden_size = 64;
    c.model.intermediate_size = 128;
    expect_resume_equals_straight(c, dir_);
    const nlohmann::json st = nlohmann::json::parse(
        read_file((dir_ / "a" / "checkpoints" / "step_00000004" / "state.json").string()));
    EXPECT_EQ(st["run"]["train.optimizer"], "adamw8bit");
}

TEST_F(ResumeTest, ChangedSettingsAreRefusedUnlessForced) {
    cfg_.checkpoint_every = 4;
    run_training(cfg_, (dir_ / "r").string());
    RunConfig changed = cfg_;
    changed.seed = 99;
    try {
        run_training(changed, (dir_ / "r").string(), {"auto", {}});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("train.seed changed (1337 -> 99)"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("--resume-force train.seed"), std::string::npos);
    }
    changed = cfg_;
    changed.steps = 12;
    TrainSummary s = run_training(changed, (dir_ / "r").string(), {"auto", {"train.steps"}});
    EXPECT_EQ(s.start_step, 8);
    EXPECT_EQ(s.steps, 12);
    EXPECT_EQ(losses(dir_ / "r" / "metrics.jsonl").size(), 12u);
}

TEST_F(ResumeTest, FreshRunRefusesADirectoryWithCheckpoints) {
    cfg_.checkpoint_every = 4;
    run_training(cfg_, (dir_ / "r").string());
    try {
        run_training(cfg_, (dir_ / "r").string());
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("already holds checkpoints"), std::string::npos)
            << e.what();
    }
    // --resume auto on a finished run: resumes at its last checkpoint and finishes identically.
    TrainSummary s = run_training(cfg_, (dir_ / "r").string(), {"auto", {}});
    EXPECT_EQ(s.start_step, 8);
    EXPECT_EQ(s.steps, 8);
}

TEST_F(ResumeTest, TornCheckpointIsIgnoredAndOldOnesPruned) {
    cfg_.checkpoint_every = 2;
    cfg_.keep_checkpoints = 2;
    run_training(cfg_, (dir_ / "r").string());
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "r" / "checkpoints"))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"step_00000006", "step_00000008"}));
    // A save killed half-way leaves only a temporary directory: never picked up.
    fs::path torn = dir_ / "r" / "checkpoints" / "step_00000009.tmp.4242";
    fs::create_directories(torn);
    std::ofstream(torn / "model.safetensors") << "partial";
    EXPECT_EQ(latest_checkpoint((dir_ / "r").string()),
              (dir_ / "r" / "checkpoints" / "step_00000008").string());
    EXPECT_THROW(run_training(cfg_, (dir_ / "x").string(), {torn.string(), {}}), Error);
}

// The real binary: SIGTERM finishes the step, saves a checkpoint, exits 4 (stopped, resumable);
// a second SIGTERM right after it (Slurm sends two at a time limit, mpirun one more) changes
// nothing; --resume auto then completes the run with the same final weights as an uninterrupted
// one.
TEST_F(ResumeTest, SigtermSavesAndResumeCompletes) {
    cfg_.steps = 20;  // the signal comes after step 3
    cfg_.eval_every = 0;
    std::string cfg_path = (dir_ / "cfg.toml").string();
    write_file_atomic(cfg_path, dump_toml(cfg_));
    std::string out = (dir_ / "sig").string();
    std::string ete = ::ete::testing::binary_dir() + "/ete";
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // 40 ms more a step: the 17 steps after the third take >= 0.68 s, so the signal lands
        // mid-run however fast the machine and however slow the sanitizers (the size of the model
        // decided that before, and 100 steps of a 4x wider one cost 37 s under ASan).
        setenv("ETE_FAULT", "slow@ms=40", 1);
        execl(ete.c_str(), ete.c_str(), "train", cfg_path.c_str(), "--out", out.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    fs::path metrics = fs::path(out) / "metrics.jsonl";
    for (int i = 0; i < 3000 && losses(metrics).size() < 3; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), kExitStopped);
    auto ckpt = latest_checkpoint(out);
    ASSERT_TRUE(ckpt.has_value()) << "no checkpoint after SIGTERM";
    size_t done = losses(metrics).size();
    EXPECT_LT(done, 20u) << "the run finished before the signal; make steps slower";
    EXPECT_EQ(fs::path(*ckpt).filename().string(), fmt::format("step_{:08d}", done));
    EXPECT_FALSE(fs::exists(fs::path(out) / "final"));
    std::string cmd = ete + " train " + cfg_path + " --out " + out + " --resume auto 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    run_training(cfg_, (dir_ / "straight").string());
    EXPECT_EQ(losses(metrics), losses(dir_ / "straight" / "metrics.jsonl"));
    EXPECT_EQ(read_file(out + "/final/model.safetensors"),
              read_file((dir_ / "straight" / "final" / "model.safetensors").string()));
}

// Slurm's `--signal=USR1@T` can land while a rank is still starting up (before the trainer
// exists): the request is kept, not the default action that killed rank 0 with exit 138; the run
// checkpoints after its first step and finishes.
TEST_F(ResumeTest, ACheckpointRequestDuringStartUpIsKept) {
    cfg_.steps = 6;
    cfg_.eval_every = 0;
    const std::string cfg_path = (dir_ / "cfg.toml").string(), out = (dir_ / "usr1").string();
    write_file_atomic(cfg_path, dump_toml(cfg_));
    const std::string ete = ::ete::testing::binary_dir() + "/ete";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // A 1-second pause in the first step keeps the signal ahead of the first step boundary.
        setenv("ETE_FAULT", "slow@ms=1000,step=1", 1);
        execl(ete.c_str(), ete.c_str(), "train", cfg_path.c_str(), "--out", out.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    // ete.lock is taken while the trainer is being built, long after main's first instruction.
    for (int i = 0; i < 3000 && !fs::exists(fs::path(out) / "ete.lock"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(::kill(pid, SIGUSR1), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_TRUE(fs::exists(fs::path(out) / "checkpoints" / "step_00000001" / "state.json"));
    EXPECT_TRUE(fs::exists(fs::path(out) / "final"));
}

// kill -9 at arbitrary moments of a run that checkpoints every step (saves dominate the step
// time: a 3M-parameter embedding, a tiny batch): whatever was interrupted, --resume auto loads
// the newest committed checkpoint and finishes with the same weights as an uninterrupted run.
TEST_F(ResumeTest, KillDashNineDuringCheckpointWritesNeverCorrupts) {
    cfg_.model.vocab_size = 50000;
    cfg_.model.hidden_size = 64;
    cfg_.model.intermediate_size = 64;
    cfg_.micro_batch = 1;
    cfg_.seq_len = 8;
    cfg_.grad_accum = 1;
    cfg_.steps = 12;
    cfg_.eval_every = 0;
    cfg_.checkpoint_every = 1;
    cfg_.keep_checkpoints = 2;
    // Kills that land during start-up leave attempts that resumed from the same step and never
    // ended: three in a row would (rightly) stop a requeue loop; here they are the test's doing.
    cfg_.max_attempts_without_progress = 0;
    std::string cfg_path = (dir_ / "cfg.toml").string();
    write_file_atomic(cfg_path, dump_toml(cfg_));
    std::string out = (dir_ / "k").string(), ete = ::ete::testing::binary_dir() + "/ete";
    for (int delay_ms : {150, 260, 370}) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 2);
            execl(ete.c_str(), ete.c_str(), "train", cfg_path.c_str(), "--out", out.c_str(),
                  "--resume", "auto", static_cast<char*>(nullptr));
            _exit(127);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        ::kill(pid, SIGKILL);
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
    }
    std::string cmd = ete + " train " + cfg_path + " --out " + out + " --resume auto 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    for (const auto& e : fs::directory_iterator(fs::path(out) / "checkpoints"))  // torn saves gone
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
    run_training(cfg_, (dir_ / "straight").string());
    EXPECT_EQ(losses(fs::path(out) / "metrics.jsonl"), losses(dir_ / "straight" / "metrics.jsonl"));
    EXPECT_EQ(read_file(out + "/final/model.safetensors"),
              read_file((dir_ / "straight" / "final" / "model.safetensors").string()));
}

}  // namespace
}  // namespace ete
