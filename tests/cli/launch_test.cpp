// tests/cli/launch_test.cpp — `ete launch`: the mpirun command line for each host situation, the
// error when mpirun is missing, and one real 2-rank run of the ete binary through mpirun.
#include "ete/cli/launch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/core/file_util.h"
#include "shell.h"
#include "test_build.h"
#include "test_util.h"

namespace ete {
namespace {

using Argv = std::vector<std::string>;

LaunchHost host(int cores, bool root = false, bool omp_set = false) {
    return {
        .self_exe = "/opt/ete/ete", .is_root = root, .cores = cores, .omp_threads_set = omp_set};
}

LaunchArgs args(int n, Argv ete_args = {"train", "cfg.toml"}) {
    LaunchArgs a;
    a.n = n;
    a.args = std::move(ete_args);
    return a;
}

TEST(Launch, OneNodeFewerRanksThanCores) {
    // 2 ranks on 8 cores: each rank owns 4 cores and runs 4 OpenMP threads.
    EXPECT_EQ(mpirun_argv(args(2), host(8)),
              (Argv{"mpirun", "-np", "2", "--map-by", "slot:PE=4", "--bind-to", "core", "-x",
                    "OMP_NUM_THREADS=4", "/opt/ete/ete", "train", "cfg.toml"}));
    // 3 ranks on 8 cores: 2 whole cores each, 2 cores idle (rounds down, never oversubscribes).
    EXPECT_EQ(mpirun_argv(args(3), host(8)),
              (Argv{"mpirun", "-np", "3", "--map-by", "slot:PE=2", "--bind-to", "core", "-x",
                    "OMP_NUM_THREADS=2", "/opt/ete/ete", "train", "cfg.toml"}));
}

TEST(Launch, OneNodeAsManyRanksAsCoresAsRoot) {
    EXPECT_EQ(mpirun_argv(args(2, {"--version"}), host(2, /*root=*/true)),
              (Argv{"mpirun", "-np", "2", "--allow-run-as-root", "--map-by", "slot:PE=1",
                    "--bind-to", "core", "-x", "OMP_NUM_THREADS=1", "/opt/ete/ete", "--version"}));
}

TEST(Launch, OneNodeOversubscribed) {
    EXPECT_EQ(mpirun_argv(args(4), host(2)),
              (Argv{"mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", "-x",
                    "OMP_NUM_THREADS=1", "/opt/ete/ete", "train", "cfg.toml"}));
}

TEST(Launch, UserOmpThreadsWin) {
    Argv argv = mpirun_argv(args(2), host(8, false, /*omp_set=*/true));
    EXPECT_EQ(argv, (Argv{"mpirun", "-np", "2", "--map-by", "slot:PE=4", "--bind-to", "core",
                          "/opt/ete/ete", "train", "cfg.toml"}));
}

TEST(Launch, Hostfile) {
    LaunchArgs a = args(16);
    a.hostfile = "hosts.txt";
    a.mpirun = "/usr/lib/openmpi/bin/mpirun";
    // The hostfile decides slots per node: no oversubscribe or per-core mapping from local cores.
    EXPECT_EQ(mpirun_argv(a, host(2)),
              (Argv{"/usr/lib/openmpi/bin/mpirun", "-np", "16", "--hostfile", "hosts.txt",
                    "--bind-to", "none", "/opt/ete/ete", "train", "cfg.toml"}));
    // A user-set OMP_NUM_THREADS is forwarded to the other nodes.
    EXPECT_EQ(mpirun_argv(a, host(2, true, true)),
              (Argv{"/usr/lib/openmpi/bin/mpirun", "-np", "16", "--allow-run-as-root", "--hostfile",
                    "hosts.txt", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "/opt/ete/ete",
                    "train", "cfg.toml"}));
}

TEST(Launch, ArgumentsPassThroughVerbatim) {
    Argv ete_args = {"train", "--set", "train.lr=3e-4", "--out", "runs/a b", "--", "-n"};
    Argv argv = mpirun_argv(args(1, ete_args), host(4));
    ASSERT_GE(argv.size(), ete_args.size() + 1);
    Argv tail(argv.end() - ptrdiff_t(ete_args.size()), argv.end());
    EXPECT_EQ(tail, ete_args);
    EXPECT_EQ(*(argv.end() - ptrdiff_t(ete_args.size()) - 1), "/opt/ete/ete");
}

TEST(Launch, BadArguments) {
    EXPECT_EQ(error_of([] { mpirun_argv(args(0), host(2)); }),
              "launch -n 0: expected at least 1 rank");
    EXPECT_EQ(error_of([] { mpirun_argv(args(2, {}), host(2)); }),
              "launch: expected the ete arguments after --, e.g. ete launch -n 2 -- train "
              "cfg.toml");
}

TEST(Launch, HostFacts) {
    LaunchHost h = launch_host();
    EXPECT_GE(h.cores, 1);
    EXPECT_EQ(h.self_exe.front(), '/');
    EXPECT_NE(h.self_exe.find("ete_test_cli"), std::string::npos) << h.self_exe;
}

TEST(Launch, MissingMpirunNamesThePackage) {
    LaunchArgs a = args(2, {"--version"});
    a.mpirun = "/nonexistent/bin/mpirun";
    EXPECT_EQ(error_of([&] { cmd_launch(a); }),
              "mpirun '/nonexistent/bin/mpirun' not found: install Open MPI (Debian package "
              "openmpi-bin) or pass --mpirun PATH");
}

// The real thing: `ete launch -n 2 -- --version` execs mpirun, which runs the ete binary twice.
TEST(Launch, RealTwoRankRun) {
    if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0) {
        GTEST_SKIP() << "mpirun not installed (Debian package openmpi-bin)";
    }
    ShellResult r = run_shell(ete_cmd("launch -n 2 -- --version 2>/dev/null"));
    EXPECT_EQ(r.code, 0) << r.out;
    // One version line per rank, and nothing else on stdout.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
    size_t first = r.out.find("ete 0.1.0");
    ASSERT_NE(first, std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ete 0.1.0", first + 1), std::string::npos) << r.out;
}

// `ete topo --measure` under mpirun: rank 0 prints the whole matrix, the others nothing.
TEST(Launch, TopoMeasuresTheLinksBetweenRanks) {
    if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0) {
        GTEST_SKIP() << "mpirun not installed (Debian package openmpi-bin)";
    }
    ShellResult r =
        run_shell("ASAN_OPTIONS=detect_leaks=0 " +
                  ete_cmd("launch -n 2 -- topo --json --measure --measure-mib 1 2>/dev/null"));
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // one JSON document: rank 0's
    const nlohmann::json& m = j["measured"];
    EXPECT_EQ(m["ranks"], 2);
    EXPECT_EQ(m["hosts"][0], m["hosts"][1]);
    EXPECT_GT(m["gbytes_per_s"][0][1].get<double>(), 0);
    EXPECT_GT(m["gbytes_per_s"][1][0].get<double>(), 0);
    EXPECT_EQ(m["gbytes_per_s"][0][0].get<double>(), 0);
    EXPECT_GT(m["latency_us"][0][1].get<double>(), 0);
    EXPECT_GT(m["world_bus_gbytes_per_s"].get<double>(), 0);
    EXPECT_EQ(m["node_names"].size(), 1u);
    const ShellResult bad = run_shell(ete_cmd("topo --measure --measure-mib 0 2>&1"));
    EXPECT_EQ(bad.code, 1);
    EXPECT_EQ(bad.out,
              "ete: error: topo --measure-mib 0: expected a size in MiB from 1/1024 to 1024\n");
}

// A job on this node runs with a private Open MPI session base (concurrent jobs otherwise race
// on the shared /tmp/ompi.<host>.<uid>): mpirun sees an existing directory, removed after it;
// a base the user set is kept, and a job over a hostfile gets none.
TEST(Launch, PrivateSessionDirPerJob) {
    const std::string dir =
        ::testing::TempDir() + "/ete_launch_tmpdir_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string fake = dir + "/mpirun", seen = dir + "/seen";
    write_file_atomic(fake,
                      "#!/bin/sh\nb=\"$OMPI_MCA_orte_tmpdir_base\"\n"
                      "if [ -n \"$b\" ] && [ -d \"$b\" ]; then d=yes; else d=no; fi\n"
                      "echo \"$b $d\" > " +
                          seen + "\n");
    std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
    const auto seen_by_mpirun = [&](const std::string& env) {
        ShellResult r = run_shell(env + ete_cmd("launch --mpirun " + fake + " -n 2 -- --version"));
        EXPECT_EQ(r.code, 0) << r.out;
        return read_file(seen);
    };
    const std::string own = seen_by_mpirun("env -u OMPI_MCA_orte_tmpdir_base TMPDIR=" + dir + " ");
    EXPECT_EQ(own.rfind(dir + "/ete-launch-", 0), 0u) << own;
    EXPECT_NE(own.find(" yes\n"), std::string::npos) << own;
    EXPECT_FALSE(std::filesystem::exists(own.substr(0, own.find(' ')))) << own;
    EXPECT_EQ(seen_by_mpirun("OMPI_MCA_orte_tmpdir_base=" + dir + " "), dir + " yes\n");
    write_file_atomic(dir + "/hosts", "localhost slots=2\n");
    ShellResult r = run_shell(
        "env -u OMPI_MCA_orte_tmpdir_base " +
        ete_cmd("launch --mpirun " + fake + " --hostfile " + dir + "/hosts -n 2 -- --version"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(read_file(seen), " no\n");
    std::filesystem::remove_all(dir);
}

// --min-ranks reads the hostfile's lines (comments dropped, a bare host = 1 slot), probes each
// host with a one-rank mpirun of the ete binary, and writes the answering hosts' lines again.
TEST(Launch, HostfileProbeAndLiveHostfile) {
    const std::string dir = ::testing::TempDir(), path = dir + "/ete_hosts_test";
    write_file_atomic(path, "# cluster\nnode1 slots=4 max_slots=8 # big\n\nnode2\nnode3 slots=2\n");
    const std::vector<HostfileEntry> hosts = read_hostfile(path);
    ASSERT_EQ(hosts.size(), 3u);
    EXPECT_EQ(hosts[0].host, "node1");
    EXPECT_EQ(hosts[0].slots, 4);
    EXPECT_EQ(hosts[1].slots, 1);
    EXPECT_EQ(hostfile_slots(path), 7);
    EXPECT_EQ(probe_argv(args(4), host(2, /*root=*/true), "node2"),
              (Argv{"mpirun", "-np", "1", "--allow-run-as-root", "--host", "node2:1",
                    "/opt/ete/ete", "--version"}));
    const std::string live = write_live_hostfile(hosts, {0, 255, 0});
    EXPECT_EQ(read_file(live), "node1 slots=4 max_slots=8 \nnode3 slots=2\n");
    EXPECT_EQ(hostfile_slots(live), 6);
    std::remove(live.c_str());
    std::remove(path.c_str());
}

// The real probe: this machine answers, a name that can never resolve (RFC 2606 .invalid) does
// not, and both are known well before the timeout.
TEST(Launch, ProbeTellsALiveHostFromAGoneOne) {
    if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0) {
        GTEST_SKIP() << "mpirun not installed (Debian package openmpi-bin)";
    }
    LaunchHost h = launch_host();
    h.self_exe = ::ete::testing::binary_dir() + "/ete";
    const std::vector<int> codes =
        probe_hosts(args(2), h, {{"localhost", 2, ""}, {"ete-gone-host.invalid", 2, ""}}, 60);
    ASSERT_EQ(codes.size(), 2u);
    EXPECT_EQ(codes[0], 0);
    EXPECT_GT(codes[1], 0);  // mpirun's own failure, not the timeout (-1)
}

TEST(Launch, RealRunPropagatesFailure) {
    if (run_shell("command -v mpirun >/dev/null 2>&1").code != 0) {
        GTEST_SKIP() << "mpirun not installed (Debian package openmpi-bin)";
    }
    // Each rank fails with a usage error (exit 2); the launch must not report success.
    ShellResult r = run_shell(ete_cmd("launch -n 2 -- inspect 2>&1"));
    EXPECT_NE(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("path is required"), std::string::npos) << r.out;  // from the ranks
}

}  // namespace
}  // namespace ete
