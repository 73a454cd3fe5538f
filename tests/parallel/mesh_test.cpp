// tests/parallel/mesh_test.cpp — the dp × tp × pp mesh: rank ↔ coordinate tables written by hand
// (tp fastest, then dp, then pp), group membership, validation messages, and make_groups on a
// fake 8-rank world checked by an all-reduce of world ranks against closed-form sums.
#include "ete/parallel/mesh.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ete/parallel/fake_comm.h"
#include "ete/parallel/self_comm.h"
#include "test_util.h"

namespace ete {
namespace {

using Partition = std::vector<std::vector<int>>;  // disjoint groups of ranks, each in group order

struct Layout {
    MeshShape shape;
    std::vector<MeshCoord> coords;  // coords[world rank] as {dp, tp, pp}
    Partition tp, dp, pp;
};

// Every layout with dp, tp, pp in {1, 2}; world size = dp·tp·pp. Written out by hand from
// world_rank = (pp·dp + dp_rank)·tp + tp_rank.
const std::vector<Layout>& layouts() {
    static const std::vector<Layout> k = {
        {{1, 1, 1}, {{0, 0, 0}}, {{0}}, {{0}}, {{0}}},
        {{2, 1, 1}, {{0, 0, 0}, {1, 0, 0}}, {{0}, {1}}, {{0, 1}}, {{0}, {1}}},
        {{1, 2, 1}, {{0, 0, 0}, {0, 1, 0}}, {{0, 1}}, {{0}, {1}}, {{0}, {1}}},
        {{1, 1, 2}, {{0, 0, 0}, {0, 0, 1}}, {{0}, {1}}, {{0}, {1}}, {{0, 1}}},
        {{2, 2, 1},
         {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}},
         {{0, 1}, {2, 3}},
         {{0, 2}, {1, 3}},
         {{0}, {1}, {2}, {3}}},
        {{2, 1, 2},
         {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1}},
         {{0}, {1}, {2}, {3}},
         {{0, 1}, {2, 3}},
         {{0, 2}, {1, 3}}},
        {{1, 2, 2},
         {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}},
         {{0, 1}, {2, 3}},
         {{0}, {1}, {2}, {3}},
         {{0, 2}, {1, 3}}},
        {{2, 2, 2},
         {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}, {0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 1}},
         {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
         {{0, 2}, {1, 3}, {4, 6}, {5, 7}},
         {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
    };
    return k;
}

std::string shape_str(const MeshShape& s) {
    return "dp=" + std::to_string(s.dp) + " tp=" + std::to_string(s.tp) +
           " pp=" + std::to_string(s.pp);
}

const std::vector<int>& block_of(const Partition& p, int rank) {
    for (const auto& g : p) {
        for (int r : g)
            if (r == rank) return g;
    }
    ADD_FAILURE() << "rank " << rank << " in no group of the table";
    static const std::vector<int> kNone;
    return kNone;
}

TEST(Mesh, CoordsMatchHandTables) {
    for (const Layout& l : layouts()) {
        ASSERT_EQ(int(l.coords.size()), l.shape.size()) << shape_str(l.shape);
        for (int r = 0; r < l.shape.size(); ++r) {
            MeshCoord c = mesh_coord(l.shape, r);
            EXPECT_EQ(c, l.coords[size_t(r)]) << shape_str(l.shape) << " rank " << r;
            EXPECT_EQ(mesh_rank(l.shape, l.coords[size_t(r)]), r) << shape_str(l.shape);
        }
    }
}

TEST(Mesh, GroupRanksMatchHandTables) {
    for (const Layout& l : layouts()) {
        for (int r = 0; r < l.shape.size(); ++r) {
            std::string at = shape_str(l.shape) + " rank " + std::to_string(r);
            EXPECT_EQ(mesh_group_ranks(l.shape, MeshAxis::Tp, r), block_of(l.tp, r)) << at;
            EXPECT_EQ(mesh_group_ranks(l.shape, MeshAxis::Dp, r), block_of(l.dp, r)) << at;
            EXPECT_EQ(mesh_group_ranks(l.shape, MeshAxis::Pp, r), block_of(l.pp, r)) << at;
        }
    }
}

// Unequal dimensions catch a formula that swaps dp and tp (invisible when both are 2).
TEST(Mesh, AsymmetricShape) {
    MeshShape s{.dp = 3, .tp = 2, .pp = 2};  // 12 ranks
    EXPECT_EQ(mesh_coord(s, 5), (MeshCoord{.dp = 2, .tp = 1, .pp = 0}));
    EXPECT_EQ(mesh_coord(s, 6), (MeshCoord{.dp = 0, .tp = 0, .pp = 1}));
    EXPECT_EQ(mesh_coord(s, 11), (MeshCoord{.dp = 2, .tp = 1, .pp = 1}));
    EXPECT_EQ(mesh_group_ranks(s, MeshAxis::Tp, 9), (std::vector<int>{8, 9}));
    EXPECT_EQ(mesh_group_ranks(s, MeshAxis::Dp, 9), (std::vector<int>{7, 9, 11}));
    EXPECT_EQ(mesh_group_ranks(s, MeshAxis::Pp, 3), (std::vector<int>{3, 9}));
    for (int r = 0; r < s.size(); ++r) EXPECT_EQ(mesh_rank(s, mesh_coord(s, r)), r);
}

TEST(Mesh, GroupNames) {
    EXPECT_EQ(mesh_group_name(MeshAxis::Tp, {0, 1}), "tp[0,1]");
    EXPECT_EQ(mesh_group_name(MeshAxis::Dp, {0, 2}), "dp[0,2]");
    EXPECT_EQ(mesh_group_name(MeshAxis::Pp, {0, 4}), "pp[0,4]");
    EXPECT_EQ(mesh_group_name(MeshAxis::Dp, {5}), "dp[5]");
}

TEST(Mesh, ValidationErrors) {
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 2, .tp = 2, .pp = 1}, 3); }),
              "parallel.dp*tp*pp = 2*2*1 = 4 but the job has 3 ranks");
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 1, .tp = 2, .pp = 1}, 1); }),
              "parallel.dp*tp*pp = 1*2*1 = 2 but the job has 1 rank");
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 0, .tp = 1, .pp = 1}, 1); }),
              "parallel.dp = 0: expected an integer >= 1");
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 1, .tp = -2, .pp = 1}, 1); }),
              "parallel.tp = -2: expected an integer >= 1");
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 1, .tp = 1, .pp = 0}, 1); }),
              "parallel.pp = 0: expected an integer >= 1");
    // 8·3·178956971 = 2^32 + 8 wraps to 8 in 32-bit arithmetic: the product must not.
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 8, .tp = 3, .pp = 178956971}, 8); }),
              "parallel.dp*tp*pp = 8*3*178956971 = 4294967304 but the job has 8 ranks");
    EXPECT_EQ(error_of([] { validate_mesh({.dp = 2, .tp = 2, .pp = 2}, 8); }), "<no error>");
}

TEST(Mesh, MakeGroupsOnSelf) {
    auto self = make_self_communicator();
    ParallelGroups g = make_groups(*self, {});
    EXPECT_EQ(g.world, self.get());
    EXPECT_EQ(g.tp->name(), "tp[0]");
    EXPECT_EQ(g.dp->size(), 1);
    EXPECT_EQ(g.pp->rank(), 0);
    EXPECT_EQ(error_of([&] { make_groups(*self, {.dp = 1, .tp = 2, .pp = 1}); }),
              "parallel.dp*tp*pp = 1*2*1 = 2 but the job has 1 rank");
}

// Sum of the world ranks in this rank's group along `axis`, from the coordinates alone:
// tp group: base..base+tp-1 with base = (pp·dp + d)·tp; dp group: (pp·dp + i)·tp + t over i;
// pp group: (i·dp + d)·tp + t over i.
int64_t closed_form_sum(const MeshShape& s, const MeshCoord& c, MeshAxis axis) {
    int64_t dp = s.dp, tp = s.tp, pp = s.pp;
    switch (axis) {
        case MeshAxis::Tp:
            return tp * ((c.pp * dp + c.dp) * tp) + tp * (tp - 1) / 2;
        case MeshAxis::Dp:
            return dp * (c.pp * dp * tp + c.tp) + tp * dp * (dp - 1) / 2;
        case MeshAxis::Pp:
            return pp * (c.dp * tp + c.tp) + dp * tp * pp * (pp - 1) / 2;
    }
    return -1;
}

void check_groups(Communicator& world, const MeshShape& s) {
    std::string at = shape_str(s) + " world rank " + std::to_string(world.rank());
    ParallelGroups g = make_groups(world, s);
    MeshCoord c = mesh_coord(s, world.rank());
    EXPECT_EQ(g.world, &world) << at;
    EXPECT_EQ((MeshCoord{g.dp_rank, g.tp_rank, g.pp_rank}), c) << at;
    const struct {
        MeshAxis axis;
        const Communicator* comm;
        const char* prefix;
        int size, rank;
    } groups[] = {{MeshAxis::Tp, g.tp.get(), "tp", s.tp, c.tp},
                  {MeshAxis::Dp, g.dp.get(), "dp", s.dp, c.dp},
                  {MeshAxis::Pp, g.pp.get(), "pp", s.pp, c.pp}};
    for (const auto& e : groups) {
        ASSERT_NE(e.comm, nullptr) << at;
        Communicator& comm = g.group(e.axis);
        EXPECT_EQ(&comm, e.comm) << at;
        EXPECT_EQ(comm.size(), e.size) << at << " " << e.prefix;
        EXPECT_EQ(comm.rank(), e.rank) << at << " " << e.prefix;
        std::vector<int> ranks = mesh_group_ranks(s, e.axis, world.rank());
        EXPECT_EQ(comm.world_ranks(), ranks) << at << " " << e.prefix;
        EXPECT_EQ(comm.name(), mesh_group_name(e.axis, ranks)) << at;
        EXPECT_EQ(comm.name().rfind(e.prefix, 0), 0u) << comm.name();
        int64_t v = world.rank();
        comm.all_reduce(&v, 1, DType::I64, ReduceOp::Sum);
        EXPECT_EQ(v, closed_form_sum(s, c, e.axis)) << at << " " << e.prefix;
    }
}

// Every factorization of 8 into dp·tp·pp (10 layouts), each on a fresh fake world.
TEST(Mesh, MakeGroupsOnFakeWorld8) {
    int layouts_run = 0;
    for (int dp : {1, 2, 4, 8}) {
        for (int tp : {1, 2, 4, 8}) {
            if (8 % (dp * tp) != 0) continue;
            MeshShape s{.dp = dp, .tp = tp, .pp = 8 / (dp * tp)};
            run_fake_world(8, [&](Communicator& world) { check_groups(world, s); });
            ++layouts_run;
        }
    }
    EXPECT_EQ(layouts_run, 10);
}

TEST(Mesh, MakeGroupsNamesOn222) {
    std::vector<std::string> names(8);
    run_fake_world(8, [&](Communicator& world) {
        ParallelGroups g = make_groups(world, {.dp = 2, .tp = 2, .pp = 2});
        names[size_t(world.rank())] = g.tp->name() + " " + g.dp->name() + " " + g.pp->name();
    });
    EXPECT_EQ(names[0], "tp[0,1] dp[0,2] pp[0,4]");
    EXPECT_EQ(names[5], "tp[4,5] dp[5,7] pp[1,5]");
    EXPECT_EQ(names[6], "tp[6,7] dp[4,6] pp[2,6]");
}

TEST(Mesh, MakeGroupsRejectsWrongWorldSize) {
    std::vector<std::string> errors(3);
    run_fake_world(3, [&](Communicator& world) {
        errors[size_t(world.rank())] =
            error_of([&] { make_groups(world, {.dp = 2, .tp = 2, .pp = 1}); });
    });
    for (const auto& e : errors)
        EXPECT_EQ(e, "parallel.dp*tp*pp = 2*2*1 = 4 but the job has 3 ranks");
}

}  // namespace
}  // namespace ete
