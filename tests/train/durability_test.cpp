// tests/train/durability_test.cpp — a run never loses or corrupts work it has done: one run per
// directory, whole lines in metrics.jsonl on a full disk, no partial checkpoint left behind, no
// non-finite weights on disk, SIGUSR1 / SIGHUP, and a closed stderr that does not kill training.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ete/core/dir_lock.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/io/checkpoint.h"
#include "ete/train/progress.h"
#include "ete/train/trainer.h"
#include "test_build.h"
#include "test_util.h"
#include "tiny_run.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

using Durability = TinyRunTest;

// Files this process writes are cut at `bytes` while it lives (EFBIG instead of SIGXFSZ): a disk
// that is full for larger writes.
class FileSizeLimit {
  public:
    explicit FileSizeLimit(rlim_t bytes) {
        old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
        getrlimit(RLIMIT_FSIZE, &old_);
        rlimit r = old_;
        r.rlim_cur = bytes;
        setrlimit(RLIMIT_FSIZE, &r);
    }
    ~FileSizeLimit() {
        setrlimit(RLIMIT_FSIZE, &old_);
        std::signal(SIGXFSZ, old_handler_);
    }

  private:
    rlimit old_{};
    void (*old_handler_)(int) = nullptr;
};

// Two runs on one --out would destroy each other's metrics and checkpoints: the second is refused
// with the holder's host and pid. A lock left by a process that died is free and taken over.
TEST_F(Durability, ARunOwnsItsDirectory) {
    const fs::path out = dir_ / "run";
    fs::create_directories(out);
    {
        DirLock held(out.string());
        const std::string e = error_of([&] { run_training(cfg_, out.string()); });
        EXPECT_NE(e.find("--out '" + out.string() + "' is in use by another run (host "),
                  std::string::npos)
            << e;
        EXPECT_NE(e.find(fmt::format("pid {}", ::getpid())), std::string::npos) << e;
        EXPECT_FALSE(fs::exists(out / "metrics.jsonl"));  // nothing touched
    }
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        new DirLock(out.string());  // never released by a destructor: the process just dies
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_NE(read_file((out / "ete.lock").string()).find(fmt::format("pid {}", child)),
              std::string::npos);
    run_training(cfg_, out.string());  // the dead holder's lock is free
    EXPECT_TRUE(fs::exists(out / "final" / "model.safetensors"));
}

// A planted ete.lock that links elsewhere would have its target truncated and overwritten with the
// holder's line: a symbolic link, a hard link and a FIFO are each refused by name, the target
// untouched.
TEST_F(Durability, TheRunLockNeverWritesThroughALink) {
    const fs::path out = dir_ / "run";
    const fs::path victim = dir_ / "victim.txt";
    fs::create_directories(out);
    write_file_atomic(victim.string(), "precious\n");
    fs::create_symlink(victim, out / "ete.lock");
    std::string e = error_of([&] { DirLock lock(out.string()); });
    EXPECT_NE(e.find("is a symbolic link; ETE never writes through one"), std::string::npos) << e;
    fs::remove(out / "ete.lock");
    fs::create_hard_link(victim, out / "ete.lock");
    e = error_of([&] { DirLock lock(out.string()); });
    EXPECT_NE(e.find("is a file with other hard links"), std::string::npos) << e;
    EXPECT_EQ(read_file(victim.string()), "precious\n");
    fs::remove(out / "ete.lock");
    ASSERT_EQ(::mkfifo((out / "ete.lock").c_str(), 0644), 0);
    e = error_of([&] { DirLock lock(out.string()); });
    EXPECT_NE(e.find("is not a regular file"), std::string::npos) << e;
    fs::remove(out / "ete.lock");
    DirLock lock(out.string());  // a plain lock is fine again
    EXPECT_NE(read_file((out / "ete.lock").string()).find("pid "), std::string::npos);
}

// A full disk mid-line: the partial line is cut off again (the file stays whole JSON lines), the
// loss is counted and training would go on; writes succeed again once there is room.
TEST(DurabilityProgress, AFailedAppendLeavesNoHalfLine) {
    const fs::path p = fs::temp_directory_path() / fmt::format("ete_metrics_{}.jsonl", ::getpid());
    fs::remove(p);
    Progress prog(p.string(), 10, 1);
    StepMetrics m;
    m.step = 1;
    prog.record(m, 0.1, 1);
    const uintmax_t one = fs::file_size(p);
    {
        FileSizeLimit limit(one + 20);  // room for 20 bytes of the next line only
        m.step = 2;
        prog.record(m, 0.2, 2);
    }
    EXPECT_EQ(prog.lost_lines(), 1);
    EXPECT_EQ(fs::file_size(p), one);
    m.step = 3;
    prog.record(m, 0.3, 3);
    const auto lines = read_metrics(p.string());
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[1]["step"], 3);
    fs::remove(p);
}

// metrics.jsonl planted as a symbolic link or a hard link to another file is refused (one line
// naming it), and the file it points at is left as it was.
TEST(DurabilityProgress, APlantedLinkIsNeverWrittenThrough) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("ete_metrics_link_{}", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path target = dir / "precious.txt", metrics = dir / "metrics.jsonl";
    write_file_atomic(target.string(), "keep me\n");
    fs::create_symlink(target, metrics);
    EXPECT_EQ(error_of([&] { Progress p(metrics.string(), 10, 1); }),
              fmt::format("metrics file '{}': cannot open for writing (a symbolic link: ETE never "
                          "writes through one, remove it)",
                          metrics.string()));
    fs::remove(metrics);
    fs::create_hard_link(target, metrics);
    EXPECT_NE(error_of([&] {
                  Progress p(metrics.string(), 10, 1);
              }).find("expected a regular file of its own"),
              std::string::npos);
    EXPECT_EQ(read_file(target.string()), "keep me\n");
    fs::remove_all(dir);
}

// A checkpoint that cannot be written (file too large for the disk) removes its partial directory
// — before the fix it stayed and filled the disk for every retry — and training goes on; the
// final save's failure is an error that names the newest checkpoint.
TEST_F(Durability, AFailedCheckpointIsRemovedAndTrainingGoesOn) {
    cfg_.checkpoint_every = 2;
    const fs::path out = dir_ / "full";
    std::string e;
    {
        FileSizeLimit limit(16 << 10);  // the tiny model's safetensors are ~90 KB
        e = error_of([&] { run_training(cfg_, out.string()); });
    }
    EXPECT_NE(e.find("saving model dir '" + out.string() + "/final'"), std::string::npos) << e;
    EXPECT_NE(e.find("final/ was not saved, the newest checkpoint is (none)"), std::string::npos)
        << e;
    EXPECT_EQ(read_metrics((out / "metrics.jsonl").string()).size(), 8u);  // every step ran
    ASSERT_TRUE(fs::exists(out / "checkpoints"));
    EXPECT_TRUE(fs::is_empty(out / "checkpoints")) << "a partial checkpoint was left behind";
}

// Weights that are not finite never reach a checkpoint: the save fails, naming the parameter,
// and leaves nothing behind; the previous checkpoint stays the newest.
TEST_F(Durability, NonFiniteWeightsAreNeverSaved) {
    ParamSpec w;
    w.name = "w";
    w.shape = {2, 3};
    HostParams p({w});
    std::vector<float> m(6, 0.0f), v(6, 0.0f);
    const CheckpointState st{1, 1, 0, nlohmann::json::object(), nlohmann::json::object()};
    const std::string run = (dir_ / "r").string();
    save_checkpoint(run, st, p, {{"exp_avg", m.data()}, {"exp_avg_sq", v.data()}}, "");
    p.param(0)[4] = std::numeric_limits<float>::quiet_NaN();
    const CheckpointState st2{2, 2, 0, nlohmann::json::object(), nlohmann::json::object()};
    const std::string e = error_of([&] {
        save_checkpoint(run, st2, p, {{"exp_avg", m.data()}, {"exp_avg_sq", v.data()}}, "");
    });
    EXPECT_NE(e.find("parameter 'w' holds a non-finite value (nan at element 4)"),
              std::string::npos)
        << e;
    size_t entries = 0;
    for (const auto& d : fs::directory_iterator(fs::path(run) / "checkpoints")) {
        ++entries;
        EXPECT_EQ(d.path().filename(), "step_00000001");
    }
    EXPECT_EQ(entries, 1u);
}

// Checkpoints carry content hashes: a flipped byte, a file swapped in from another checkpoint or
// an edited state.json is refused when named, and --resume auto falls back to the newest one that
// verifies, saying so, and finishes exactly like an uninterrupted run (before the fix all three
// resumed silently).
TEST_F(Durability, CorruptCheckpointsAreRefusedAndAutoFallsBack) {
    cfg_.checkpoint_every = 2;
    cfg_.keep_checkpoints = 0;
    const fs::path out = dir_ / "run", ck = out / "checkpoints";
    run_training(cfg_, out.string());
    const std::string straight = read_file((out / "final" / "model.safetensors").string());
    auto flip = [](const fs::path& f, size_t at) {
        std::string b = read_file(f.string());
        b[at] = char(b[at] ^ 0x10);
        std::ofstream(f, std::ios::binary | std::ios::trunc) << b;
    };
    flip(ck / "step_00000008" / "model.safetensors",
         fs::file_size(ck / "step_00000008" / "model.safetensors") - 5);
    fs::copy_file(ck / "step_00000004" / "optimizer.safetensors",
                  ck / "step_00000006" / "optimizer.safetensors",
                  fs::copy_options::overwrite_existing);
    std::string state = read_file((ck / "step_00000004" / "state.json").string());
    state.replace(state.find("\"step\": 4"), 10, "\"step\": 5");
    std::ofstream(ck / "step_00000004" / "state.json", std::ios::trunc) << state;
    for (const auto& [step, want] : std::vector<std::pair<std::string, std::string>>{
             {"step_00000008", "model.safetensors does not match its content hash"},
             {"step_00000006", "optimizer.safetensors does not match its content hash"},
             {"step_00000004", "state.json was changed after it was saved"}}) {
        const std::string e = error_of([&] {
            run_training(cfg_, (dir_ / ("x" + step)).string(), {(ck / step).string(), {}});
        });
        EXPECT_NE(e.find(fmt::format("checkpoint '{}': {}", (ck / step).string(), want)),
                  std::string::npos)
            << e;
    }
    fs::remove_all(out / "final");
    const TrainSummary s = run_training(cfg_, out.string(), {"auto", {}});
    EXPECT_EQ(s.start_step, 2);  // 8, 6 and 4 do not verify
    EXPECT_EQ(read_file((out / "final" / "model.safetensors").string()), straight);
    // An unknown --resume-force key is an error, not ignored.
    const std::string e = error_of([&] {
        run_training(cfg_, out.string(), {(ck / "step_00000002").string(), {"train.stepz"}});
    });
    EXPECT_NE(e.find("--resume-force train.stepz: not a setting a resume checks"),
              std::string::npos)
        << e;
}

// Removing the file hashes from state.json (keeping its checksum) turned verification off with
// only a warning; an older ETE's checkpoint has neither, and that still resumes with the warning.
TEST_F(Durability, RemovedHashesAreAnEditNotAnOlderCheckpoint) {
    cfg_.checkpoint_every = 4;
    cfg_.keep_checkpoints = 0;
    const fs::path out = dir_ / "run", ck = out / "checkpoints" / "step_00000004";
    run_training(cfg_, out.string());
    const std::string state_path = (ck / "state.json").string();
    nlohmann::json st = nlohmann::json::parse(read_file(state_path));
    st.erase("files");
    write_file_atomic(state_path, st.dump(2));
    EXPECT_EQ(checkpoint_problem(ck.string()),
              "state.json was changed after it was saved (its file hashes were removed)");
    st.erase("checksum");
    write_file_atomic(state_path, st.dump(2));
    EXPECT_EQ(checkpoint_problem(ck.string()), "");  // an older ETE's: not verified, a warning
}

// A save killed while replacing a checkpoint of the same step on a file system without
// RENAME_EXCHANGE leaves the old copy set aside as step_N.tmp.old.PID: the next run puts it back
// and resumes from it (it was deleted before, with the half-written new copy); what a killed
// final save left (final.tmp.PID) is removed.
TEST_F(Durability, AKilledReplaceKeepsTheOnlyCopyOfItsStep) {
    cfg_.checkpoint_every = 4;
    cfg_.keep_checkpoints = 0;
    const fs::path out = dir_ / "run", ck = out / "checkpoints";
    run_training(cfg_, out.string());
    fs::rename(ck / "step_00000008", ck / "step_00000008.tmp.old.999999");
    fs::create_directories(ck / "step_00000008.tmp.999999");
    write_file_atomic((ck / "step_00000008.tmp.999999" / "model.safetensors").string(), "half");
    fs::create_directories(out / "final.tmp.999998");
    cfg_.steps = 10;
    const TrainSummary s = run_training(cfg_, out.string(), {"auto", {"train.steps"}});
    EXPECT_EQ(s.start_step, 8);
    EXPECT_TRUE(fs::exists(ck / "step_00000008" / "state.json"));
    EXPECT_FALSE(fs::exists(ck / "step_00000008.tmp.999999"));
    EXPECT_FALSE(fs::exists(ck / "step_00000008.tmp.old.999999"));
    EXPECT_FALSE(fs::exists(out / "final.tmp.999998"));
}

// No memory check before: train.micro_batch = 100000000 grew for minutes and ended in
// std::bad_alloc or the OOM killer. Now the estimate is checked against what is free before any
// batch-sized allocation, and the error names the keys.
TEST_F(Durability, ARunThatCannotFitSaysSoBeforeAllocating) {
    cfg_.micro_batch = 100000000;
    const auto t0 = std::chrono::steady_clock::now();
    std::string e = error_of([&] { run_training(cfg_, (dir_ / "huge").string()); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    EXPECT_NE(e.find("memory: this rank needs about "), std::string::npos) << e;
    EXPECT_NE(e.find("lower train.micro_batch (100000000) or train.seq_len (16)"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    // Under a (simulated) limit of 20 MB the small model does not fit either, unless the check
    // is turned off.
    cfg_.micro_batch = 2;
    ScopedEnv limit("ETE_MEMORY_AVAILABLE", "1000000");
    e = error_of([&] { run_training(cfg_, (dir_ / "limited").string()); });
    EXPECT_NE(e.find("but 1.0 MiB is available (ETE_MEMORY_AVAILABLE"), std::string::npos) << e;
    cfg_.memory_check = false;
    run_training(cfg_, (dir_ / "unchecked").string());
    EXPECT_TRUE(fs::exists(dir_ / "unchecked" / "final" / "model.safetensors"));
}

// The token shard of a running job truncated by another process: the next read of a lost page
// ends the run with one line naming the shard (before: SIGBUS, no message). The real binary (a
// forked copy of this multi-threaded test would deadlock in OpenMP).
TEST_F(Durability, ADataFileTruncatedUnderARunningJobIsNamed) {
    cfg_.steps = 400;
    cfg_.eval_every = 0;
    const std::string shard = (dir_ / "toks.bin").string(), out = (dir_ / "run").string();
    const std::string cfg_path = (dir_ / "cfg.toml").string(), log = (dir_ / "err.txt").string();
    write_file_atomic(cfg_path, dump_toml(cfg_));
    const std::string ete = ::ete::testing::binary_dir() + "/ete";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(fd, STDERR_FILENO);
        ::setenv("ETE_FAULT", "slow@ms=5", 1);
        execl(ete.c_str(), ete.c_str(), "train", cfg_path.c_str(), "--out", out.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
    }
    for (int i = 0; i < 4000 && !(fs::exists(out + "/metrics.jsonl") &&
                                  read_metrics(out + "/metrics.jsonl").size() >= 2);
         ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ASSERT_EQ(::truncate(shard.c_str(), 24), 0);
    int status = 0;
    for (int i = 0; i < 2000 && waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (waitpid(pid, &status, WNOHANG) == 0 && !WIFEXITED(status)) {
        ::kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FAIL() << "the run went on after its data file was truncated";
    }
    const std::string err = read_file(log);
    ASSERT_TRUE(WIFEXITED(status)) << err;
    EXPECT_EQ(WEXITSTATUS(status), 1) << err;
    EXPECT_NE(err.find("ete: error: the file '" + shard + "' was truncated"), std::string::npos)
        << err;
}

// Sends `sig` to this process once the run has written `lines` metrics lines.
std::thread signal_after(const fs::path& metrics, size_t lines, int sig) {
    return std::thread([metrics, lines, sig] {
        for (int i = 0; i < 4000; ++i) {
            if (fs::exists(metrics) && read_metrics(metrics.string()).size() >= lines) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        ::kill(::getpid(), sig);
    });
}

// SIGUSR1 (Slurm's pre-emption warning): a checkpoint after the current step, and training goes
// on to the end. SIGHUP stops like SIGTERM: a checkpoint, interrupted, resumable.
TEST_F(Durability, Sigusr1CheckpointsAndGoesOnSighupStops) {
    cfg_.steps = 40;
    cfg_.eval_every = 0;
    ScopedEnv slow("ETE_FAULT", "slow@ms=15");
    const fs::path a = dir_ / "usr1";
    std::thread t = signal_after(a / "metrics.jsonl", 3, SIGUSR1);
    TrainSummary s = run_training(cfg_, a.string());
    t.join();
    EXPECT_FALSE(s.interrupted);
    EXPECT_EQ(s.steps, 40);
    const auto ck = latest_checkpoint(a.string());
    ASSERT_TRUE(ck) << "SIGUSR1 saved no checkpoint";
    EXPECT_LT(*ck, (a / "checkpoints" / "step_00000040").string());
    EXPECT_TRUE(fs::exists(a / "final" / "model.safetensors"));
    const fs::path h = dir_ / "hup";
    t = signal_after(h / "metrics.jsonl", 3, SIGHUP);
    s = run_training(cfg_, h.string());
    t.join();
    EXPECT_TRUE(s.interrupted);
    EXPECT_LT(s.steps, 40);
    EXPECT_EQ(latest_checkpoint(h.string()),
              (h / "checkpoints" / fmt::format("step_{:08d}", s.steps)).string());
    EXPECT_FALSE(fs::exists(h / "final"));
}

// `ete train ... 2>&1 | head -1`: the reader goes away after one line; training must finish and
// save (before the fix the next log line's SIGPIPE killed it).
TEST_F(Durability, AClosedStderrDoesNotKillTraining) {
    cfg_.steps = 6;
    const std::string cfg_path = (dir_ / "cfg.toml").string();
    write_file_atomic(cfg_path, dump_toml(cfg_));
    const fs::path out = dir_ / "pipe";
    const std::string cmd = "bash -c '" + ::ete::testing::binary_dir() + "/ete train " + cfg_path +
                            " --set train.log_every=1 --out " + out.string() +
                            " 2>&1 | head -1 >/dev/null; exit ${PIPESTATUS[0]}'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    EXPECT_TRUE(fs::exists(out / "final" / "model.safetensors"));
}

}  // namespace
}  // namespace ete
