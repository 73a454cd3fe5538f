// ete/parallel/mesh.cpp — rank arithmetic of the dp × tp × pp mesh and the group split.
#include "ete/parallel/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ete/core/error.h"

namespace ete {
namespace {

int axis_size(const MeshShape& s, MeshAxis axis) {
    switch (axis) {
        case MeshAxis::Dp:
            return s.dp;
        case MeshAxis::Tp:
            return s.tp;
        case MeshAxis::Pp:
            return s.pp;
    }
    ETE_ASSERT(false);
    return 0;
}

int& axis_coord(MeshCoord& c, MeshAxis axis) {
    switch (axis) {
        case MeshAxis::Dp:
            return c.dp;
        case MeshAxis::Tp:
            return c.tp;
        case MeshAxis::Pp:
            return c.pp;
    }
    ETE_ASSERT(false);
    return c.dp;
}

const char* axis_name(MeshAxis axis) {
    switch (axis) {
        case MeshAxis::Dp:
            return "dp";
        case MeshAxis::Tp:
            return "tp";
        case MeshAxis::Pp:
            return "pp";
    }
    ETE_ASSERT(false);
    return "";
}

// Splits `world` into the groups along `axis`. Ranks sharing the other two coordinates get one
// color: the rank with this axis' coordinate zeroed is unique per group and in [0, size).
std::unique_ptr<Communicator> split_axis(Communicator& world, const MeshShape& shape,
                                         MeshAxis axis) {
    MeshCoord c = mesh_coord(shape, world.rank());
    std::vector<int> ranks = mesh_group_ranks(shape, axis, world.rank());
    std::vector<int> world_ranks;
    world_ranks.reserve(ranks.size());
    for (int r : ranks) world_ranks.push_back(world.world_ranks()[size_t(r)]);
    int key = axis_coord(c, axis);
    axis_coord(c, axis) = 0;
    int color = mesh_rank(shape, c);
    auto group = world.split(color, key, mesh_group_name(axis, world_ranks));
    ETE_ASSERT(group != nullptr);
    ETE_ASSERT(group->size() == int(ranks.size()) && group->rank() == key);
    ETE_ASSERT(group->world_ranks() == world_ranks);
    return group;
}

}  // namespace

void validate_mesh(const MeshShape& s, int world_size) {
    ETE_CHECK(s.dp >= 1, "parallel.dp = {}: expected an integer >= 1", s.dp);
    ETE_CHECK(s.tp >= 1, "parallel.tp = {}: expected an integer >= 1", s.tp);
    ETE_CHECK(s.pp >= 1, "parallel.pp = {}: expected an integer >= 1", s.pp);
    // In 64 bits: three ints of a bad config must not overflow into a matching product.
    long long product = (long long)s.dp * s.tp * s.pp;
    ETE_CHECK(product == world_size, "parallel.dp*tp*pp = {}*{}*{} = {} but the job has {} rank{}",
              s.dp, s.tp, s.pp, product, world_size, world_size == 1 ? "" : "s");
}

MeshCoord mesh_coord(const MeshShape& s, int rank) {
    ETE_ASSERT(rank >= 0 && rank < s.size());
    return {.dp = (rank / s.tp) % s.dp, .tp = rank % s.tp, .pp = rank / (s.tp * s.dp)};
}

int mesh_rank(const MeshShape& s, const MeshCoord& c) {
    ETE_ASSERT(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp);
    return (c.pp * s.dp + c.dp) * s.tp + c.tp;
}

std::vector<int> mesh_group_ranks(const MeshShape& s, MeshAxis axis, int rank) {
    MeshCoord c = mesh_coord(s, rank);
    std::vector<int> ranks;
    ranks.reserve(size_t(axis_size(s, axis)));
    for (int i = 0; i < axis_size(s, axis); ++i) {
        axis_coord(c, axis) = i;
        ranks.push_back(mesh_rank(s, c));
    }
    return ranks;
}

std::string mesh_group_name(MeshAxis axis, const std::vector<int>& world_ranks) {
    return fmt::format("{}[{}]", axis_name(axis), fmt::join(world_ranks, ","));
}

Communicator& ParallelGroups::group(MeshAxis axis) const {
    const std::unique_ptr<Communicator>& g =
        axis == MeshAxis::Dp ? dp : (axis == MeshAxis::Tp ? tp : pp);
    ETE_ASSERT(g != nullptr);
    return *g;
}

ParallelGroups make_groups(Communicator& world, MeshShape shape) {
    validate_mesh(shape, world.size());
    ParallelGroups g;
    g.shape = shape;
    MeshCoord c = mesh_coord(shape, world.rank());
    g.dp_rank = c.dp;
    g.tp_rank = c.tp;
    g.pp_rank = c.pp;
    g.world = &world;
    // Every rank splits in the same order (split is collective on world).
    g.tp = split_axis(world, shape, MeshAxis::Tp);
    g.dp = split_axis(world, shape, MeshAxis::Dp);
    g.pp = split_axis(world, shape, MeshAxis::Pp);
    return g;
}

}  // namespace ete
