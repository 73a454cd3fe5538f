// What the scheduler allows a run (train/job_limits.h): the Slurm end time, the grace a stop
// signal leaves, the attempt record that stops a job failing the same step forever.
#include "ete/train/job_limits.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "ete/core/file_util.h"

namespace ete {
namespace {

// squeue prints local time: parsed under TZ=UTC here, the epoch seconds are known.
TEST(JobLimits, ParsesSqueueEndTimes) {
    const char* tz = std::getenv("TZ");
    const std::string saved = tz ? tz : "";
    setenv("TZ", "UTC", 1);
    tzset();
    EXPECT_EQ(parse_squeue_time("2026-12-04T10:00:00"), 1796378400);
    EXPECT_EQ(parse_squeue_time("2026-12-04T10:00:00\n"), 1796378400);
    EXPECT_EQ(parse_squeue_time("2026-12-04T10:00:01"), 1796378401);
    for (const char* bad : {"N/A", "NONE", "Unknown", "", "2026-13-04T10:00:00", "2026-12-04T10:00",
                            "2026-12-04T10:00:00x", "1796378400"})
        EXPECT_EQ(parse_squeue_time(bad), std::nullopt) << bad;
    if (tz)
        setenv("TZ", saved.c_str(), 1);
    else
        unsetenv("TZ");
    tzset();
}

TEST(JobLimits, ParsesKillWaitAndGraceTime) {
    const std::string config =
        "Configuration data as of 2026-12-04T09:00:00\nJobRequeue              = 1\n"
        "KillOnBadExit           = 0\nKillWait                = 45 sec\nLaunchType = x\n";
    EXPECT_EQ(parse_kill_wait(config), 45.0);
    EXPECT_EQ(parse_kill_wait("KillOnBadExit = 0\n"), std::nullopt);
    EXPECT_EQ(parse_grace_time("PartitionName=low\n   PreemptMode=REQUEUE GraceTime=30 "
                               "Hidden=NO\n"),
              30.0);
    EXPECT_EQ(parse_grace_time("PartitionName=low\n   Hidden=NO\n"), std::nullopt);
}

TEST(JobLimits, TheTightestGraceWins) {
    EXPECT_FALSE(tightest_grace(std::nullopt, std::nullopt, std::nullopt));
    auto g = tightest_grace(30.0, 0.0, std::nullopt);  // GraceTime 0: no pre-emption grace
    ASSERT_TRUE(g);
    EXPECT_EQ(g->seconds, 30);
    EXPECT_EQ(g->why, "Slurm's KillWait (30 s)");
    g = tightest_grace(30.0, 20.0, std::nullopt);
    EXPECT_EQ(g->seconds, 20);
    EXPECT_EQ(g->why, "the partition's GraceTime (20 s, on pre-emption)");
    g = tightest_grace(30.0, std::nullopt, std::string());  // mpirun's default: 1 s, SIGKILL at 2
    EXPECT_EQ(g->seconds, 2);
    EXPECT_EQ(g->why, "mpirun's SIGKILL 2 s after a SIGTERM (--mca odls_base_sigkill_timeout 1)");
    g = tightest_grace(30.0, std::nullopt, std::string("60"));
    EXPECT_EQ(g->seconds, 30);
}

TEST(JobLimits, EndTimeFromTheEnvironment) {
    setenv("SLURM_JOB_END_TIME", "1796378400", 1);
    EXPECT_EQ(slurm_job_end_time(), 1796378400);
    unsetenv("SLURM_JOB_END_TIME");
    const char* id = std::getenv("SLURM_JOB_ID");
    if (!id) {
        EXPECT_EQ(slurm_job_end_time(), std::nullopt);  // outside Slurm
    }
}

TEST(JobLimits, FailedAttemptsCountFromTheNewest) {
    using V = std::vector<Attempt>;
    EXPECT_EQ(failed_attempts_at(V{}, 0), 0);
    V a = {{0, "stopped", 10}, {10, "running", -1}, {10, "running", -1}};
    EXPECT_EQ(failed_attempts_at(a, 10), 2);
    EXPECT_EQ(failed_attempts_at(a, 20), 0);  // progress since: a newer checkpoint
    a.push_back({10, "stopped", 10});         // a clean stop breaks the chain
    EXPECT_EQ(failed_attempts_at(a, 10), 0);
    a.push_back({10, "running", -1});
    EXPECT_EQ(failed_attempts_at(a, 10), 1);
}

TEST(JobLimits, AttemptRecordRoundTripsAndSurvivesDamage) {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("attempts_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const std::string run = dir.string();
    EXPECT_TRUE(read_attempts(run).empty());
    std::vector<Attempt> a;
    for (int i = 0; i < 40; ++i) a.push_back({i, i % 2 ? "running" : "done", i % 2 ? -1 : i + 1});
    write_attempts(run, a);
    const std::vector<Attempt> back = read_attempts(run);
    ASSERT_EQ(back.size(), 32u);  // the newest 32
    EXPECT_EQ(back.front().start_step, 8);
    EXPECT_EQ(back.back().start_step, 39);
    EXPECT_EQ(back.back().end, "running");
    EXPECT_EQ(back[0].end_step, 9);
    write_file_atomic(run + "/.ete/attempts.json", "{\"attempts\": [{\"start_step\": ");
    EXPECT_TRUE(read_attempts(run).empty());  // a damaged record never blocks a run
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ete
