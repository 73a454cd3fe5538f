// ete/parallel/placement.h — which device each rank of a dp × tp × pp mesh runs on (`ete launch
// --placement auto`, docs/planner.md): TP groups on the fastest links, PP neighbours on the next,
// DP across, found by an exact search over the devices' measured or described links.
//
// The cost a placement minimises, in seconds of communication per step if none of it overlapped:
//
//   cost = Σ over the axes (tp, dp, pp) of  bytes[axis] × max over that axis's groups of
//          (1 / the bandwidth of the group's slowest link)
//
// A tp or dp group's "slowest link" is the slowest of its pairs (a ring all-reduce runs at its
// slowest hop, and on the tree-shaped topologies nvidia-smi and hwloc describe — NVLink islands,
// PCIe switches, sockets, nodes — every ring through a set of devices crosses the set's slowest
// pair's level); a pp group's links are its neighbouring stages' pairs. The groups of one axis
// run at once and the step waits for the slowest, hence the max. Ties are broken by the sum over
// every group of the same terms (`spread_s`): among placements whose slowest groups are as fast,
// the one with fewer groups on slow links.
//
// The search: depth-first over the ranks in mesh order (tp fastest, so a TP group is placed
// whole before the next one starts), each rank on each free device, cheapest first; a branch is
// cut when its partial cost (which only grows as ranks are added), raised to each axis's lower
// bound, cannot beat the best placement found. The first incumbent is the best of the six
// "linear" placements (the mesh's ranks listed with the axes in each order, filling the devices
// in order). Devices that are interchangeable — two free devices whose links to every other are
// the same, or two wholly free nodes whose devices correspond — are tried once, which is exact
// (the subtrees are mirror images) and is what keeps an 8-GPU NVSwitch node or a set of like
// nodes small. When the search finishes the placement is optimal (tests: equal to brute force
// on every small case); when it runs out of its budget of steps, `optimal` is false and the best
// found is returned with the lower bound beside it.
//
// An axis's lower bound: its groups of g devices (g = tp, dp or pp) each need all their pairs
// (pp: their chain) on links of at least the bandwidth b; for the smallest 1/b at which the
// devices joined by such links form components that hold all the axis's groups (Σ ⌊size / g⌋ ≥
// groups), bytes × 1/b.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ete/parallel/mesh.h"

namespace ete {

// The devices a job may use and the links between them.
struct DeviceLinks {
    std::vector<int> node;                       // per device: its node, nodes' devices consecutive
    std::vector<std::vector<double>> gbps;       // [a][b]: GB/s one direction (diagonal unused)
    std::vector<std::vector<std::string>> name;  // [a][b]: the link's class ("NV18", "SYS", "net")
    int size() const { return int(node.size()); }
};

// Bytes each group of an axis moves over its slowest link per step (a ring all-reduce of S bytes
// over n ranks: 2(n − 1)/n · S; a pp neighbour pair: its activations and their gradients).
struct AxisBytes {
    double tp = 0, dp = 0, pp = 0;
};

struct PlacementCost {
    double cost_s = 0;                    // the cost above
    double spread_s = 0;                  // the tie-break: the same terms summed over every group
    double tp_s = 0, dp_s = 0, pp_s = 0;  // each axis's share of cost_s
    // Per axis (tp, dp, pp): the bandwidth of the slowest link of its slowest group (GB/s; 0
    // where the axis has one rank) and whether any of its groups spans nodes.
    double gbps[3] = {0, 0, 0};
    bool crosses_nodes[3] = {false, false, false};
};

struct Placement {
    std::vector<int> device_of_rank;  // mesh rank -> device
    PlacementCost cost;
    double lower_bound_s = 0;  // no placement costs less
    bool optimal = false;      // the search finished (or met the lower bound)
    int64_t steps = 0;         // search nodes visited
};

// The cost of a given placement (device_of_rank: a distinct device for every mesh rank).
PlacementCost placement_cost(const MeshShape& mesh, const DeviceLinks& links,
                             const AxisBytes& bytes, const std::vector<int>& device_of_rank);

// The linear placement with the axes in `order` (fastest first, e.g. {Tp, Dp, Pp} = launch
// order): mesh rank -> device index.
std::vector<int> linear_placement(const MeshShape& mesh, const MeshAxis order[3]);

// The search above. Throws ete::Error naming the counts when the mesh has more ranks than there
// are devices or the link table is not square.
Placement place_ranks(const MeshShape& mesh, const DeviceLinks& links, const AxisBytes& bytes,
                      int64_t budget = 4'000'000);

// One line per axis: its groups' slowest link classes, e.g. "tp: 4 groups on NV18; dp: 2 groups
// on net; pp: 4 pairs on SYS".
std::string describe_placement(const MeshShape& mesh, const DeviceLinks& links,
                               const std::vector<int>& device_of_rank);

}  // namespace ete
