// tests/parallel/topology_test.cpp — `nvidia-smi topo -m` parsed exactly on three machine
// layouts (tests/parallel/topo/: an 8-GPU NVSwitch node with a NIC legend, a dual-socket PCIe
// node in an older driver's space-aligned layout, a VM's vGPUs with SYS everywhere), bad or
// truncated text refused by name, and hwloc's view of this machine.
#include <gtest/gtest.h>

#include <thread>

#include "ete/core/file_util.h"
#include "ete/parallel/topology.h"
#include "test_util.h"

namespace ete {
namespace {

std::string fixture(const std::string& name) {
    return read_file(std::string(ETE_SOURCE_DIR) + "/tests/parallel/topo/" + name);
}

const Link X{LinkClass::Self, 0}, SYS{LinkClass::SYS, 0}, NODE{LinkClass::NODE, 0},
    PIX{LinkClass::PIX, 0}, PHB{LinkClass::PHB, 0};

TEST(NvidiaSmiTopo, NvSwitchNodeWithItsNicLegend) {
    const GpuTopology g = parse_nvidia_smi_topo(fixture("nvswitch8.txt"), "nvswitch8.txt");
    ASSERT_EQ(g.gpus.size(), 8u);
    EXPECT_EQ(g.gpus[7], "GPU7");
    EXPECT_EQ(g.nics, (std::vector<std::string>{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"}));
    for (size_t i = 0; i < 8; ++i)
        for (size_t j = 0; j < 8; ++j)
            EXPECT_EQ(g.gpu_gpu[i][j], i == j ? X : (Link{LinkClass::NVLink, 18})) << i << j;
    EXPECT_EQ(g.gpu_nic[5], (std::vector<Link>{SYS, SYS, PIX, NODE}));
    EXPECT_EQ(g.cpu_affinity[0], "0-47,96-143");
    EXPECT_EQ(g.cpu_affinity[4], "48-95,144-191");
    EXPECT_EQ(g.numa_affinity, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
    EXPECT_EQ(link_name(g.gpu_gpu[0][1]), "NV18");
}

TEST(NvidiaSmiTopo, PcieDualSocketInAnOlderLayout) {
    const GpuTopology g = parse_nvidia_smi_topo(fixture("pcie_dual_socket.txt"), "pcie.txt");
    ASSERT_EQ(g.gpus.size(), 4u);
    EXPECT_EQ(g.nics, std::vector<std::string>{"mlx4_0"});
    EXPECT_EQ(g.gpu_gpu[0], (std::vector<Link>{X, PIX, SYS, SYS}));
    EXPECT_EQ(g.gpu_gpu[3], (std::vector<Link>{SYS, SYS, PIX, X}));
    EXPECT_EQ(g.gpu_nic[1], std::vector<Link>{PHB});
    EXPECT_EQ(g.cpu_affinity[2], "10-19,30-39");
    EXPECT_EQ(g.numa_affinity, (std::vector<int>{-1, -1, -1, -1}));  // no such column
}

TEST(NvidiaSmiTopo, VirtualGpusSeeOnlySys) {
    const GpuTopology g = parse_nvidia_smi_topo(fixture("vgpu_sys.txt"), "vgpu.txt");
    ASSERT_EQ(g.gpus.size(), 2u);
    EXPECT_TRUE(g.nics.empty());
    EXPECT_EQ(g.gpu_gpu[0][1], SYS);
    EXPECT_EQ(g.numa_affinity, (std::vector<int>{-1, -1}));
}

// Each damage of the NVSwitch text is one line naming the file, the line and what was expected.
TEST(NvidiaSmiTopo, BadOrTruncatedTextIsRefusedByName) {
    const std::string good = fixture("nvswitch8.txt");
    auto error = [](const std::string& text) {
        return error_of([&] { parse_nvidia_smi_topo(text, "t.txt"); });
    };
    std::string s = good;
    s.replace(s.find("NV18"), 4, "NV1X");
    EXPECT_EQ(error(s),
              "t.txt:2: the link of GPU0 to GPU1 is 'NV1X' (expected X, NV#, PIX, PXB, PHB, NODE "
              "or SYS)");
    s = good.substr(0, good.find("\nGPU5\t"));  // cut before GPU5's row
    EXPECT_EQ(error(s), "t.txt: no row for GPU5 (truncated?)");
    s = good;
    const size_t row = s.find("\nGPU2\t") + 1;
    s = s.substr(0, row) + s.substr(row, s.find("\tNV18", row) + 5 - row) + "\n" +
        s.substr(s.find("\nGPU3\t") + 1);  // GPU2's row cut short
    EXPECT_EQ(error(s), "t.txt:4: the row of GPU2 has 1 cells, expected 12 (truncated?)");
    s = good;
    s.replace(s.find("NV18", s.find("\nGPU1\t")), 4, "SYS");  // GPU1 -> GPU0 only
    EXPECT_EQ(error(s),
              "t.txt: the link of GPU0 to GPU1 is NV18 but the other way SYS (expected a "
              "symmetric matrix)");
    s = good;
    s.replace(s.find(" X "), 3, "SYS");
    EXPECT_EQ(error(s),
              "t.txt: the link of GPU0 to GPU0 is SYS (expected X exactly on the "
              "diagonal)");
    EXPECT_EQ(error("No devices were found\n"),
              "t.txt: no GPU matrix (expected the output of nvidia-smi topo -m: a header line "
              "starting with GPU0)");
    s = good;
    s.replace(s.find("\t0\t"), 3, "\tzero\t");
    EXPECT_EQ(error(s), "t.txt:2: GPU0's NUMA affinity is 'zero' (expected a node number or N/A)");
}

// hwloc's counts of this machine, against what the OS says.
TEST(HostTopology, HwlocSeesThisMachine) {
    const HostTopology h = discover_host();
    EXPECT_GE(h.packages, 1);
    EXPECT_GE(h.numa_nodes, 1);
    EXPECT_GE(h.cores, 1);
    EXPECT_GE(h.pus, h.cores);
    EXPECT_LE(h.pus, int(std::thread::hardware_concurrency()));
    ASSERT_EQ(h.numa_bytes.size(), size_t(h.numa_nodes));
    for (uint64_t b : h.numa_bytes) EXPECT_GT(b, uint64_t(64) << 20);
    EXPECT_GT(h.l2_bytes, 0u);
    // The cores a rankfile names: one per hwloc core, each package's counted from 0.
    const std::vector<HostCore> cores = host_cores();
    ASSERT_EQ(int(cores.size()), h.cores);
    EXPECT_EQ(cores[0].package, 0);
    EXPECT_EQ(cores[0].core_in_package, 0);
    for (size_t i = 1; i < cores.size(); ++i) {
        const bool next = cores[i].package == cores[i - 1].package &&
                          cores[i].core_in_package == cores[i - 1].core_in_package + 1;
        const bool first =
            cores[i].package == cores[i - 1].package + 1 && cores[i].core_in_package == 0;
        EXPECT_TRUE(next || first) << i;
    }
}

}  // namespace
}  // namespace ete
