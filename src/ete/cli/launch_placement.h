// ete/cli/launch_placement.h — `ete launch --placement auto`: the train config's dp × tp × pp
// mesh placed on the job's devices by the exact search of parallel/placement.h, weighted by the
// bytes each axis moves a step (train/plan.h's comm_bytes), and written as an Open MPI rankfile
// (each rank's host and cores) plus, with GPUs, ETE_CUDA_DEVICE_MAP (world rank -> GPU index).
//
// Devices: with GPUs (this node's `nvidia-smi topo -m`, or --nvidia-smi-topo FILE), the first
// min(slots, GPUs) GPUs of each host in hostfile order until there are enough, a rank bound to
// the cores of its GPU's NUMA node (all cores when nvidia-smi names none); without, one block of
// cores per rank (a host's cores shared evenly by its ranks). Every host is taken to be like this
// one; hosts are joined by the network. Without a hostfile, every rank runs on this host.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ete/cli/launch.h"
#include "ete/parallel/placement.h"
#include "ete/parallel/topology.h"

namespace ete {

struct PlacementHost {
    std::vector<HostCore> cores;
    std::optional<GpuTopology> gpus;  // this node's GPUs, when it has any
};
// hwloc's cores, and topo_file's text (or `nvidia-smi topo -m`'s when nvidia-smi runs here).
PlacementHost placement_host(const std::string& topo_file);

struct AutoPlacement {
    std::string rankfile;    // its text
    std::string device_map;  // "" without GPUs
    int threads = 1;         // OMP_NUM_THREADS of a rank
    std::string report;      // what was chosen and why, for stderr
    Placement placement;
};

// Pure: n ranks of `mesh` on `hosts` ({"localhost", n} without a hostfile).
AutoPlacement auto_placement(const MeshShape& mesh, const AxisBytes& bytes,
                             const std::vector<HostfileEntry>& hosts, int n,
                             const PlacementHost& ph);

// The placement of attempt `a` (its train args, -n, hostfile): reads the train config and its
// model, places, writes the rankfile to $TMPDIR/ete-launch-<pid>.rankfile and sets a.rankfile,
// a.device_map and a.threads. Throws ete::Error for a command other than train.
std::string apply_auto_placement(LaunchArgs& a);

}  // namespace ete
