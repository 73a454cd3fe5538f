// tests/cli/job_faults_test.cpp — a launched job under faults: a rank that errors, hangs or is
// killed, a host that goes away or never answers, SIGTERM and SIGKILL to the launcher or to the
// whole process group. What these assert (exit codes, reports, checkpoints, bit-identical resume
// under one kernel choice) does not depend on which GEMM kernels run, so they live in the `cli`
// binary, outside the `numerics` label that run.sh reruns under other CPUs' kernel choices.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ete/core/dir_lock.h"
#include "ete/core/file_util.h"
#include "ete/io/safetensors.h"
#include "ete/train/trainer.h"
#include "parallel_fixture.h"
#include "shell.h"
#include "test_build.h"
#include "test_util.h"

namespace ete {
namespace {

using namespace parallel_test;

// The layout-parity fixture (a tiny Llama job, train(), expect_same()) under its own name.
class JobFaults : public ParallelTrain {};

// One rank failing alone (an error, not a timeout) ends the whole job at once: it aborts the job
// at exit instead of waiting in MPI_Finalize for its peer, which is blocked in a collective the
// failed rank will never join (before the fix the job ended only when that peer's 120 s timeout
// fired).
TEST_F(JobFaults, AnErrorOnOneRankEndsTheJobAtOnce) {
    const std::string cmd =
        "ETE_FAULT=error@step=2,rank=1 OMP_NUM_THREADS=1 " + kMpiEnv +
        ete_cmd("launch -n 2 -- train " + (dir_ / "job.toml").string() + " --out " +
                (dir_ / "fail").string() + " --set parallel.tp=2 --set parallel.timeout_s=120") +
        " 2>&1";
    const auto t0 = std::chrono::steady_clock::now();
    ShellResult r = run_shell(cmd);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ete: error: ETE_FAULT: world rank 1 fails at step 2"), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("timed out"), std::string::npos) << r.out;
    EXPECT_LT(took.count(), 60.0) << r.out;
}

// A rank that hangs (ETE_FAULT hang: it stops at the start of step 3 and never enters the step's
// first collective) on a job of 2 and of 4 ranks: while the job is alive, after
// parallel.hang_warn_s and well before the timeout, one report names the collective, the ranks
// that entered it and `rank N` that did not, with what it was doing and its stack; at the timeout
// the job ends (non-zero, within a few seconds) with the report on stderr and a complete
// DIR/hang_report.json.
TEST_F(JobFaults, AHangNamesTheStuckRankBeforeTheTimeout) {
    for (const auto& [ranks, stuck] : {std::pair{2, 1}, std::pair{4, 2}}) {
        const std::string out = (dir_ / fmt::format("hang{}", ranks)).string();
        const std::string cmd =
            fmt::format("ETE_FAULT=hang@step=3,rank={} OMP_NUM_THREADS=1 ", stuck) + kMpiEnv +
            ete_cmd(fmt::format("launch -n {} -- train {} --out {} --set parallel.timeout_s=6 "
                                "--set parallel.hang_warn_s=1.5",
                                ranks, (dir_ / "job.toml").string(), out)) +
            " 2>&1";
        const auto t0 = std::chrono::steady_clock::now();
        const ShellResult r = run_shell(cmd);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
        const std::string what = fmt::format("{} ranks, rank {} stuck", ranks, stuck);
        EXPECT_NE(r.code, 0) << what << "\n" << r.out;
        EXPECT_LT(took.count(), 6 + 6.0) << what;
        // The first report: during the run, after the warning threshold (+1 s at most).
        const size_t first = r.out.find("ete: hang: rank 0 has waited ");
        ASSERT_NE(first, std::string::npos) << what << "\n" << r.out;
        const double waited = std::stod(r.out.substr(first + 29));
        EXPECT_GE(waited, 1.5) << what;
        EXPECT_LE(waited, 2.5) << what;
        std::string entered;
        for (int k = 0; k < ranks; ++k)
            if (k != stuck) entered += fmt::format("{}rank {}", entered.empty() ? "" : ", ", k);
        EXPECT_NE(r.out.find(fmt::format("entered: {}; not entered: rank {}", entered, stuck)),
                  std::string::npos)
            << what << "\n"
            << r.out;
        EXPECT_NE(r.out.find(fmt::format("ete: hang: rank {}: at step 3, not in a communication "
                                         "operation",
                                         stuck)),
                  std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find("ete::FaultPlan::at_step_start"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("timed out after 6 s"), std::string::npos) << r.out;
        const nlohmann::json rep = nlohmann::json::parse(read_file(out + "/hang_report.json"));
        EXPECT_EQ(rep["missing"], nlohmann::json::array({stuck})) << rep.dump(2);
        EXPECT_EQ(rep["entered"].size(), size_t(ranks - 1));
        EXPECT_GE(rep["waited_s"].get<double>(), 6.0);
        EXPECT_TRUE(rep["operation"].contains("group"));
        EXPECT_EQ(rep["step"], 3);
        const nlohmann::json& info = rep["ranks"][std::to_string(stuck)];
        EXPECT_EQ(info["step"], 3);
        EXPECT_TRUE(info["pending"].empty());
        EXPECT_FALSE(info["stack"].empty());
        EXPECT_FALSE(info["recent"].empty());
    }
}

// A supervised run in `out` ended as the uninterrupted run `straight` (the fixture's last run):
// the same final weights and per-step losses, bit for bit.
void expect_finished_as(const std::string& out, const RunResult& straight,
                        const std::string& last) {
    EXPECT_EQ(read_file(out + "/final/model.safetensors"),
              read_file(last + "/final/model.safetensors"));
    std::ifstream in(out + "/metrics.jsonl");
    std::vector<double> losses;
    for (std::string line; std::getline(in, line);)
        losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    EXPECT_EQ(losses, straight.losses);
}

// `ete launch --max-restarts`: a rank killed at three different steps of three attempts (and one
// attempt hung until its timeout, exit 75) is relaunched from the newest checkpoint each time; the
// run completes with final weights bit-identical to an uninterrupted run of the same layout, and
// the launcher's summary lists the attempts.
TEST_F(JobFaults, KilledAndHungRanksAreRelaunchedAndFinishBitIdentical) {
    const std::string sets = " --set train.checkpoint_every=1 --set parallel.timeout_s=4";
    RunResult straight = train(2, sets);
    const std::string out = (dir_ / "supervised").string();
    const std::string cmd =
        "ETE_FAULT='kill@step=2,rank=1;kill@step=3,rank=0,attempt=1;hang@step=4,rank=1,"
        "attempt=2;kill@step=5,rank=1,attempt=3' OMP_NUM_THREADS=1 " +
        kMpiEnv +
        ete_cmd("launch -n 2 --max-restarts 4 -- train " + (dir_ / "job.toml").string() +
                " --out " + out + sets) +
        " 2>&1";
    const ShellResult r = run_shell(cmd);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ete launch: 5 attempts:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("attempt 2: 2 ranks, exit 137 (a rank killed by signal 9)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("attempt 3: 2 ranks, exit 75 (a timeout or a lost peer)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("attempt 4: 2 ranks, exit 137"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("attempt 5: 2 ranks, exit 0"), std::string::npos) << r.out;
    expect_finished_as(out, straight, last_out_);
}

// ZeRO-3: a rank killed inside a parameter gather (its broadcasts started, its peer waiting in
// its own) ends the attempt like any lost rank; the relaunch resumes from the newest checkpoint
// (written from the parameter shards) and finishes with the uninterrupted stage-3 run's weights
// and losses, bit for bit.
TEST_F(JobFaults, ARankKilledInAZero3GatherIsRelaunched) {
    const std::string sets =
        " --set train.checkpoint_every=1 --set parallel.timeout_s=4 --set parallel.zero_stage=3";
    RunResult straight = train(2, sets);
    const std::string out = (dir_ / "supervised").string();
    const ShellResult r =
        run_shell("ETE_FAULT='kill_gather@step=3,rank=1' OMP_NUM_THREADS=1 " + kMpiEnv +
                  ete_cmd("launch -n 2 --max-restarts 2 -- train " + (dir_ / "job.toml").string() +
                          " --out " + out + sets) +
                  " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ETE_FAULT: world rank 1 kills itself in a ZeRO-3 gather of step 3"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("attempt 1: 2 ranks, exit 137 (a rank killed by signal 9)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("attempt 2: 2 ranks, exit 0"), std::string::npos) << r.out;
    expect_finished_as(out, straight, last_out_);
}

// --min-ranks with a hostfile that loses two of its four slots while the job runs (as a
// scheduler would rewrite it when a host goes): the relaunch runs on 2 ranks (dp re-derived,
// the checkpoint resharded) and the run completes with the 4-rank run's losses and weights
// within fp32 summation noise.
TEST_F(JobFaults, ARunShrinksFromFourRanksToTwo) {
    RunResult four = train(4, "");
    const std::string hosts = (dir_ / "hosts").string(), out = (dir_ / "shrunk").string();
    write_file_atomic(hosts, "localhost slots=4\n");
    std::thread lose([&] {  // after the first step: two slots are gone
        for (int i = 0; i < 3000 && !fs::exists(out + "/metrics.jsonl"); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        write_file_atomic(hosts, "localhost slots=2 # a host went away\n");
    });
    const ShellResult r = run_shell(
        "ETE_FAULT='kill@step=3,rank=3;slow@ms=150' OMP_NUM_THREADS=1 " + kMpiEnv +
        ete_cmd("launch -n 4 --hostfile " + hosts + " --min-ranks 2 --max-restarts 1 -- train " +
                (dir_ / "job.toml").string() + " --out " + out +
                " --set train.checkpoint_every=1") +
        " 2>&1");
    lose.join();
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("attempt 1: 4 ranks, exit 137"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("attempt 2: 2 ranks, exit 0"), std::string::npos) << r.out;
    RunResult shrunk;
    std::ifstream in(out + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        shrunk.steps.push_back(j["step"].get<int64_t>());
        shrunk.losses.push_back(j["loss"].get<double>());
    }
    auto f = SafetensorsFile::open(out + "/final/model.safetensors");
    for (const std::string& n : f.names()) {
        Tensor t = f.to_f32(n);
        shrunk.weights[n].assign(t.f32(), t.f32() + t.numel());
    }
    expect_same(four, shrunk, "4 -> 2 ranks");
}

// --min-ranks with a host that does not answer (down, unreachable: here a name that never
// resolves): the launcher probes every host before the attempt, leaves that one out and trains
// on the slots that answered.
TEST_F(JobFaults, AHostThatDoesNotAnswerIsLeftOut) {
    const std::string hosts = (dir_ / "hosts").string(), out = (dir_ / "probed").string();
    write_file_atomic(hosts, "localhost slots=2\nete-gone-host.invalid slots=2\n");
    auto launch = [&](int min_ranks, const std::string& run, const std::string& sets) {
        return run_shell(
            "OMP_NUM_THREADS=1 " + kMpiEnv +
            ete_cmd(fmt::format("launch -n 4 --hostfile {} --min-ranks {} -- train "
                                "{} --out {}{}",
                                hosts, min_ranks, (dir_ / "job.toml").string(), run, sets)) +
            " 2>&1");
    };
    const ShellResult r = launch(2, out, " --set train.steps=2");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ete launch: host ete-gone-host.invalid does not answer (mpirun exit"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("2 slots left out"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("-np 2 "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("parallel: 2 ranks"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(out + "/final/model.safetensors"));
    // With --min-ranks 3 the two answering slots are too few: the launcher gives up with 75.
    const ShellResult few = launch(3, out + "3", "");
    EXPECT_EQ(few.code, 75) << few.out;
    EXPECT_NE(few.out.find("has 2 answering slots, fewer than --min-ranks 3: giving up"),
              std::string::npos)
        << few.out;
}

// Starts `ete launch -n 2 -- train` with steps of at least `step_ms`, waits for its second step
// and sends SIGTERM `times` times (to the launcher alone, or with `group` to every process of the
// job at once, as Slurm's scancel does); the job's exit code and the steps it logged.
std::pair<int, size_t> stop_launched_job(const std::string& out, const std::string& job,
                                         int step_ms, bool group, int times, int sig = SIGTERM) {
    const std::string ete = ::ete::testing::binary_dir() + "/ete";
    const pid_t pid = fork();
    if (pid == 0) {
        if (group) ::setpgid(0, 0);
        setenv("ETE_FAULT", fmt::format("slow@ms={}", step_ms).c_str(), 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 2);
        execl(ete.c_str(), ete.c_str(), "launch", "-n", "2", "--", "train", job.c_str(), "--out",
              out.c_str(), "--set", "train.steps=200", static_cast<char*>(nullptr));
        _exit(127);
    }
    if (pid < 0) return {-1, 0};
    auto lines = [&] {
        std::ifstream in(out + "/metrics.jsonl");
        size_t n = 0;
        for (std::string l; std::getline(in, l);) ++n;
        return n;
    };
    for (int i = 0; i < 6000 && lines() < 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int i = 0; i < times; ++i) {
        ::kill(group ? -pid : pid, sig);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return {-1, 0};
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), lines()};
}

// SIGTERM to `ete launch` (Kubernetes' pod termination, an operator's kill): every rank saves a
// checkpoint and the job exits 4 (stopped, resumable) — before the fix mpirun killed the ranks a
// second after forwarding SIGTERM, before a larger model's checkpoint was written.
TEST_F(JobFaults, SigtermToTheLauncherCheckpointsEveryRank) {
    const std::string out = (dir_ / "term").string();
    const auto [code, done] = stop_launched_job(out, (dir_ / "job.toml").string(), 200, false, 1);
    EXPECT_EQ(code, kExitStopped);
    EXPECT_LT(done, 200u);
    EXPECT_TRUE(fs::exists(out + fmt::format("/checkpoints/step_{:08d}/state.json", done)))
        << "no checkpoint after step " << done;
    EXPECT_FALSE(fs::exists(out + "/final"));
}

// kill -9 of `ete launch` left mpirun and the ranks training unsupervised, holding the run lock.
// mpirun now gets SIGUSR2 when the launcher dies (PDEATHSIG), which it forwards: every rank
// checkpoints at its step and exits, and the lock is free again.
TEST_F(JobFaults, AKilledLauncherStillStopsItsRanksCleanly) {
    const std::string out = (dir_ / "kill9").string();
    const auto [code, done] =
        stop_launched_job(out, (dir_ / "job.toml").string(), 200, false, 1, SIGKILL);
    EXPECT_EQ(code, 128 + SIGKILL);
    bool free = false;
    for (int i = 0; i < 600 && !free; ++i) {
        free = error_of([&] { DirLock lock(out); }) == "<no error>";
        if (!free) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(free) << "the ranks still hold " << out << "/ete.lock 60 s after the launcher died";
    std::ifstream in(out + "/metrics.jsonl");
    size_t steps = 0;
    for (std::string l; std::getline(in, l);) ++steps;
    EXPECT_GE(steps, done);
    EXPECT_LT(steps, 200u);
    EXPECT_TRUE(fs::exists(out + fmt::format("/checkpoints/step_{:08d}/state.json", steps)))
        << "no checkpoint after step " << steps;
}

// Slurm's scancel and time limit: SIGTERM to every process of the job at once (launcher, mpirun,
// ranks), twice within milliseconds, with 1.5 s steps. Before, mpirun answered its own SIGTERM by
// killing the ranks a second later and the second SIGTERM ended them: no checkpoint.
TEST_F(JobFaults, SigtermsToEveryProcessOfTheJobStillCheckpoint) {
    const std::string out = (dir_ / "group").string();
    const auto [code, done] = stop_launched_job(out, (dir_ / "job.toml").string(), 1500, true, 2);
    EXPECT_EQ(code, kExitStopped);
    EXPECT_TRUE(fs::exists(out + fmt::format("/checkpoints/step_{:08d}/state.json", done)))
        << "no checkpoint after step " << done;
    EXPECT_FALSE(fs::exists(out + "/final"));
}

}  // namespace
}  // namespace ete
