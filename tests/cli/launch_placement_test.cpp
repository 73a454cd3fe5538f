// tests/cli/launch_placement_test.cpp — `ete launch --placement auto` without mpirun: the
// rankfile, the GPU map and the report for GPUs described by nvidia-smi fixtures (a dual-socket
// PCIe node, two NVSwitch nodes) and for core blocks of a two-socket host, the mpirun line that
// applies them, the rankfile slot lists, and the errors. (A real run through mpirun:
// ParallelTrain.AutoPlacementTrainsTheSameNumbers.)
#include "ete/cli/launch_placement.h"

#include <gtest/gtest.h>

#include "ete/core/file_util.h"
#include "ete/parallel/device_links.h"
#include "test_util.h"

namespace ete {
namespace {

GpuTopology fixture(const std::string& name) {
    const std::string path = std::string(ETE_SOURCE_DIR) + "/tests/parallel/topo/" + name;
    return parse_nvidia_smi_topo(read_file(path), path);
}

// `packages` sockets of `cores` cores, one NUMA node and one L3 each.
std::vector<HostCore> sockets(int packages, int cores) {
    std::vector<HostCore> out;
    for (int p = 0; p < packages; ++p)
        for (int c = 0; c < cores; ++c) out.push_back({p, c, p, p});
    return out;
}

// Four GPUs in two PIX pairs across two sockets: the axis with more bytes gets the PIX pairs.
TEST(AutoPlacement, PciePairsGoToTheHeavierAxis) {
    const PlacementHost ph{sockets(2, 4), fixture("pcie_dual_socket.txt")};
    const std::vector<HostfileEntry> one = {{"gpu1", 4, "gpu1 slots=4"}};
    const AutoPlacement tp = auto_placement({2, 2, 1}, {8e9, 1e9, 0}, one, 4, ph);
    // nvidia-smi names no NUMA node here: each rank may run on every core.
    EXPECT_EQ(tp.rankfile,
              "rank 0=gpu1 slot=0:0-3,1:0-3\nrank 1=gpu1 slot=0:0-3,1:0-3\n"
              "rank 2=gpu1 slot=0:0-3,1:0-3\nrank 3=gpu1 slot=0:0-3,1:0-3\n");
    EXPECT_EQ(tp.device_map, "0,1,2,3");  // launch order is already right
    EXPECT_EQ(tp.threads, 2);             // 8 cores, 4 ranks
    EXPECT_NE(tp.report.find("on 4 GPUs of 1 node: tp: 2 groups on PIX; dp: 2 groups on SYS"),
              std::string::npos)
        << tp.report;
    // 8 GB of tp at PIX's 24 GB/s + 1 GB of dp at SYS's 10 GB/s. Bound: two quotients and a sum
    // in double (≤ ~1e-16 s of rounding on 0.43 s), far below a wrong link's ≥ 0.1 s; no kernel.
    EXPECT_NEAR(tp.placement.cost.cost_s, 8e9 / 24e9 + 1e9 / 10e9, 1e-12);
    EXPECT_TRUE(tp.placement.optimal);
    const AutoPlacement dp = auto_placement({2, 2, 1}, {1e9, 8e9, 0}, one, 4, ph);
    EXPECT_EQ(dp.device_map, "0,2,1,3");  // the dp groups {0,2} {1,3} on the PIX pairs
    EXPECT_NE(dp.report.find("tp: 2 groups on SYS; dp: 2 groups on PIX"), std::string::npos)
        << dp.report;
    // Launch order would leave 8 GB of dp on SYS: 1e9/24e9 + 8e9/10e9 = 0.842 s, against
    // 1e9/10e9 + 8e9/24e9 = 0.433 s.
    EXPECT_NE(dp.report.find("communication 0.433 s a step if none of it overlapped (launch "
                             "order: 0.842 s)"),
              std::string::npos)
        << dp.report;
}

// Two NVSwitch nodes, tp 4 x dp 2 x pp 2: pp moves more than dp, so each pipeline stays in a
// node and the dp groups cross the network; each rank is bound to its GPU's NUMA node's cores.
TEST(AutoPlacement, TwoNvSwitchNodesKeepThePipelinesInside) {
    const PlacementHost ph{sockets(2, 2), fixture("nvswitch8.txt")};
    const std::vector<HostfileEntry> hosts = {{"a", 8, "a slots=8"}, {"b", 8, "b slots=8"}};
    const AutoPlacement p = auto_placement({2, 4, 2}, {4e9, 1e8, 2e9}, hosts, 16, ph);
    ASSERT_TRUE(p.placement.optimal);
    EXPECT_NE(p.report.find("on 16 GPUs of 2 nodes: tp: 4 groups on NV18; dp: 8 groups on net; "
                            "pp: 8 chains on NV18"),
              std::string::npos)
        << p.report;
    // Ranks 0-3 (tp group 0 of dp 0, stage 0) and their stage-1 partners 8-11 share a node.
    std::vector<std::string> lines;
    for (size_t i = 0, j; (j = p.rankfile.find('\n', i)) != std::string::npos; i = j + 1)
        lines.push_back(p.rankfile.substr(i, j - i));
    ASSERT_EQ(lines.size(), 16u);
    auto host_of = [&](int r) {
        return lines[size_t(r)].substr(lines[size_t(r)].find('=') + 1, 1);
    };
    for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(host_of(r), host_of(r + 8)) << r;  // a pipeline in a node
        EXPECT_NE(host_of(r), host_of(r + 4)) << r;  // a dp pair across
    }
    // GPUs 0-3 sit on NUMA node 0 (package 0's cores), 4-7 on node 1.
    const std::vector<std::string> map = [&] {
        std::vector<std::string> v(1);
        for (char ch : p.device_map) {
            if (ch == ',')
                v.emplace_back();
            else
                v.back().push_back(ch);
        }
        return v;
    }();
    ASSERT_EQ(map.size(), 16u);
    for (int r = 0; r < 16; ++r)
        EXPECT_EQ(lines[size_t(r)].substr(lines[size_t(r)].find("slot=")),
                  std::stoi(map[size_t(r)]) < 4 ? "slot=0:0-1" : "slot=1:0-1")
            << r;
    EXPECT_EQ(p.threads, 1);  // 4 cores for 8 ranks a node
}

// No GPU: each rank gets a block of cores; the tp pairs share a socket.
TEST(AutoPlacement, CoreBlocksOfATwoSocketHost) {
    const PlacementHost ph{sockets(2, 4), std::nullopt};
    const std::vector<HostfileEntry> local = {{"localhost", 4, "localhost"}};
    const AutoPlacement p = auto_placement({2, 2, 1}, {1e9, 1e6, 0}, local, 4, ph);
    EXPECT_EQ(p.rankfile,
              "rank 0=localhost slot=0:0-1\nrank 1=localhost slot=0:2-3\n"
              "rank 2=localhost slot=1:0-1\nrank 3=localhost slot=1:2-3\n");
    EXPECT_EQ(p.device_map, "");
    EXPECT_EQ(p.threads, 2);
    EXPECT_NE(p.report.find("on 4 core blocks of 1 node: tp: 2 groups on L3; dp: 2 groups on SYS"),
              std::string::npos)
        << p.report;
    // dp heavier: the dp pairs share the sockets instead.
    const AutoPlacement q = auto_placement({2, 2, 1}, {1e6, 1e9, 0}, local, 4, ph);
    EXPECT_NE(q.report.find("tp: 2 groups on SYS; dp: 2 groups on L3"), std::string::npos)
        << q.report;
}

TEST(AutoPlacement, SlotListsAndErrors) {
    const std::vector<HostCore> c = sockets(2, 8);
    EXPECT_EQ(rankfile_slots(c, {6, 7, 8, 9}), "0:6-7,1:0-1");
    EXPECT_EQ(rankfile_slots(c, {0, 2, 3, 5}), "0:0,0:2-3,0:5");
    const PlacementHost gpus{sockets(1, 4), fixture("vgpu_sys.txt")};
    EXPECT_EQ(error_of([&] {
                  auto_placement({4, 1, 1}, {0, 1e9, 0}, {{"a", 8, "a slots=8"}}, 4, gpus);
              }),
              "launch --placement auto: -n 4 but the hosts give 2 devices (its slots, at most 2 "
              "GPUs a host)");
}

TEST(AutoPlacement, TheMpirunLineAppliesTheRankfile) {
    LaunchArgs a;
    a.n = 4;
    a.args = {"train", "cfg.toml"};
    a.rankfile = "/tmp/r.rankfile";
    a.threads = 2;
    a.device_map = "0,2,1,3";
    const LaunchHost h{.self_exe = "/opt/ete/ete", .is_root = false, .cores = 8};
    EXPECT_EQ(mpirun_argv(a, h),
              (std::vector<std::string>{"mpirun", "-np", "4", "--rankfile", "/tmp/r.rankfile", "-x",
                                        "OMP_NUM_THREADS=2", "-x", "ETE_CUDA_DEVICE_MAP=0,2,1,3",
                                        "/opt/ete/ete", "train", "cfg.toml"}));
    a.hostfile = "hosts";
    a.device_map = "";
    const LaunchHost omp{.self_exe = "/opt/ete/ete", .cores = 8, .omp_threads_set = true};
    EXPECT_EQ(mpirun_argv(a, omp),
              (std::vector<std::string>{"mpirun", "-np", "4", "--hostfile", "hosts", "--rankfile",
                                        "/tmp/r.rankfile", "-x", "OMP_NUM_THREADS", "/opt/ete/ete",
                                        "train", "cfg.toml"}));
}

}  // namespace
}  // namespace ete
