// ete/parallel/topology.h — the machine as the engine sees it (`ete topo`): this host's NUMA
// nodes, cores, caches and network devices (hwloc), and its GPUs' pairwise links as
// `nvidia-smi topo -m` reports them.
//
// nvidia-smi's matrix names each pair's link class, fastest first (its legend):
//   NV#   a bonded set of # NVLinks
//   PIX   at most a single PCIe bridge
//   PXB   multiple PCIe bridges, without the PCIe host bridge
//   PHB   PCIe and a PCIe host bridge (typically the CPU)
//   NODE  PCIe and the interconnect between PCIe host bridges within a NUMA node
//   SYS   PCIe and the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)
//   X     the device itself
// Rows and columns are the GPUs (GPU0..), then the NICs (NIC0.. with a "NIC Legend" naming
// them, or their device names, mlx5_0.. in older drivers); the last columns are each GPU's CPU
// affinity, NUMA affinity and (newer drivers) GPU NUMA ID.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ete {

enum class LinkClass : uint8_t { Self, NVLink, PIX, PXB, PHB, NODE, SYS };

struct Link {
    LinkClass cls = LinkClass::SYS;
    int nvlinks = 0;  // NV#: the bonded links
    bool operator==(const Link&) const = default;
};

// "NV12", "PIX", "X", ...
std::string link_name(const Link& l);
// The legend's line for the class.
const char* link_class_meaning(LinkClass c);

struct GpuTopology {
    std::vector<std::string> gpus;           // GPU0, GPU1, ...
    std::vector<std::string> nics;           // device names (mlx5_0), from the NIC legend
    std::vector<std::vector<Link>> gpu_gpu;  // [i][j], Self on the diagonal, symmetric
    std::vector<std::vector<Link>> gpu_nic;  // [gpu][nic]
    std::vector<std::string> cpu_affinity;   // per GPU, a CPU list ("0-23,48-71") or "N/A"
    std::vector<int> numa_affinity;          // per GPU, -1 = N/A or not reported
};

// Parses the text of `nvidia-smi topo -m` (tab- or space-separated, with or without the legends).
// Throws ete::Error naming `where`, the line and what was expected for an unknown link class, a
// row or column missing (truncated text), a matrix that is not symmetric or has no X diagonal,
// or text with no GPU matrix at all.
GpuTopology parse_nvidia_smi_topo(const std::string& text, const std::string& where);
// The text `nvidia-smi topo -m` prints here, or "" when there is no nvidia-smi (or it fails: no
// driver, no GPU).
std::string nvidia_smi_topo_text();

// This host as hwloc sees it.
struct HostTopology {
    int packages = 0, numa_nodes = 0, cores = 0, pus = 0;
    std::vector<uint64_t> numa_bytes;                    // memory per NUMA node
    uint64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per cache instance (the first's)
    int l3_count = 0;
    std::vector<std::string> nics;  // network and InfiniBand devices (eth0, mlx5_0, ...)
    std::string cpu_model;
};
HostTopology discover_host();

// One core of this host as Open MPI's rankfile names it ("slot=package:core", both logical
// indices, the core's counted within its package), with what it shares: its NUMA node (the
// kernel's number, as nvidia-smi's NUMA affinity gives it) and its L3 cache (-1 = none).
struct HostCore {
    int package = 0, core_in_package = 0, numa = 0, l3 = -1;
};
// The cores this process may run on, in hwloc's logical order.
std::vector<HostCore> host_cores();

}  // namespace ete
