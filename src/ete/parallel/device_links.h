// ete/parallel/device_links.h — the link tables placement searches over (parallel/placement.h),
// built from what `ete topo` sees: a node's GPUs as `nvidia-smi topo -m` describes them, or its
// cores as hwloc does, repeated over the nodes of a job, the nodes joined by the network.
//
// Bandwidths are nominal, one direction, and serve to order placements, not to time them (the
// planner's cluster file or measured links do that):
//   NV#   25 GB/s per bonded NVLink (NVLink 2-4 run 25 GB/s a link and direction)
//   PIX   24      PXB  20      PHB  16      NODE  12      SYS  10     (PCIe 4 x16 ≈ 25 GB/s at
//         best; each bridge, host bridge and socket crossing costs more)
//   cores: the same L3 40, the same NUMA node 25, the same package 16, across packages 10
//   net   6 GB/s between nodes (a 50 Gb/s share a device), slower than any link inside a node
#pragma once

#include <string>
#include <vector>

#include "ete/parallel/placement.h"
#include "ete/parallel/topology.h"

namespace ete {

double nominal_gbps(const Link& l);
constexpr double kNetworkGbps = 6;

// The first gpus_per_node[k] GPUs of `node` on each node k (every node like this one).
DeviceLinks gpu_links(const GpuTopology& node, const std::vector<int>& gpus_per_node);

// One device per rank: on node k, ranks_per_node[k] blocks of `cores` (this host's, every node
// like it), block i holding cores [i·c, (i+1)·c) for c = cores / ranks (at least 1: with more
// ranks than cores, block i is core i mod cores). Links by what the blocks' first cores share.
// block_cores: each block's cores (indices into `cores`), for the rankfile.
DeviceLinks core_links(const std::vector<HostCore>& cores, const std::vector<int>& ranks_per_node,
                       std::vector<std::vector<int>>* block_cores);

// An Open MPI rankfile slot list for a set of cores: "0:0-3" or "0:6-7,1:0-1" (package:cores).
std::string rankfile_slots(const std::vector<HostCore>& cores, const std::vector<int>& which);

}  // namespace ete
