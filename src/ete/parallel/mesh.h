// ete/parallel/mesh.h — the dp × tp × pp device mesh: pure rank arithmetic, and the communicator
// groups built from it.
//
// Rank order (DESIGN.md §4): tp varies fastest, then dp, then pp, so the ranks of one TP group are
// neighbours (same node, fastest links) and a pipeline stage is a contiguous block of dp·tp ranks:
//
//     world_rank = (pp_rank · dp + dp_rank) · tp + tp_rank
//
// e.g. dp=2, tp=2, pp=2 on 8 ranks: tp groups {0,1} {2,3} {4,5} {6,7}; dp groups {0,2} {1,3}
// {4,6} {5,7}; pp groups {0,4} {1,5} {2,6} {3,7}.
//
// Groups are explicit values (ParallelGroups) passed to whoever needs them; there are no globals.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ete/parallel/communicator.h"

namespace ete {

struct MeshShape {
    int dp = 1, tp = 1, pp = 1;
    int size() const { return dp * tp * pp; }
};

// A rank's position in the mesh, each coordinate in [0, that dimension).
struct MeshCoord {
    int dp = 0, tp = 0, pp = 0;
    bool operator==(const MeshCoord&) const = default;
};

enum class MeshAxis { Dp, Tp, Pp };

// Throws ete::Error unless every dimension is >= 1 and dp·tp·pp == world_size, naming the
// config keys parallel.dp/tp/pp, e.g. "parallel.dp*tp*pp = 2*2*1 = 4 but the job has 3 ranks".
void validate_mesh(const MeshShape& shape, int world_size);

MeshCoord mesh_coord(const MeshShape& shape, int rank);  // rank in [0, shape.size())
int mesh_rank(const MeshShape& shape, const MeshCoord& coord);

// The mesh ranks of the group along `axis` that contains `rank`, in group-rank order (the
// coordinate along `axis` = the position in the returned list). Its size is that dimension.
std::vector<int> mesh_group_ranks(const MeshShape& shape, MeshAxis axis, int rank);

// "tp[0,1]", "dp[0,2]", "pp[0,4]": the axis name and the group's world ranks.
std::string mesh_group_name(MeshAxis axis, const std::vector<int>& world_ranks);

// One rank's view of the mesh: its coordinates and one communicator per axis.
//
// Ownership: `world` is NOT owned — it is the communicator make_groups() was given, and the caller
// keeps it alive for as long as these groups (typically both live in the same scope: the
// std::unique_ptr from make_world() first, the groups after it). dp/tp/pp are owned; a dimension
// of 1 still gets a (single-rank) group so callers never test for null.
struct ParallelGroups {
    MeshShape shape;
    int dp_rank = 0, tp_rank = 0, pp_rank = 0;
    Communicator* world = nullptr;
    std::unique_ptr<Communicator> dp, tp, pp;

    Communicator& group(MeshAxis axis) const;
};

// Collective over `world` (every rank calls it, with the same shape): validates the shape against
// world.size(), then splits world into the tp, dp and pp groups (in that order). Group names carry
// the world ranks (world.world_ranks()), so a `world` that is itself a sub-group still names real
// world ranks.
ParallelGroups make_groups(Communicator& world, MeshShape shape);

}  // namespace ete
