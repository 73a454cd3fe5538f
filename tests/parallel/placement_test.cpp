// tests/parallel/placement_test.cpp — the placement search (parallel/placement.h): equal to
// brute force over every permutation on small topologies (tree-shaped and arbitrary), TP groups
// kept inside NVLink islands that launch order would split, the cheaper of pp and dp sent across
// nodes, the lower bound never above a cost, the budget's honest "not optimal", and errors.
#include "ete/parallel/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "test_util.h"

namespace ete {
namespace {

// A link table from a class per pair: cls(a, b) -> (name, GB/s).
template <class F>
DeviceLinks make_links(int n, int per_node, F cls) {
    DeviceLinks l;
    l.gbps.assign(size_t(n), std::vector<double>(size_t(n), 0));
    l.name.assign(size_t(n), std::vector<std::string>(size_t(n)));
    for (int a = 0; a < n; ++a) {
        l.node.push_back(a / per_node);
        for (int b = 0; b < n; ++b)
            if (a != b) std::tie(l.name[a][b], l.gbps[a][b]) = cls(a, b);
    }
    return l;
}

// The best (cost, spread) over every assignment of the mesh's ranks to distinct devices.
PlacementCost brute_force(const MeshShape& m, const DeviceLinks& l, const AxisBytes& b) {
    std::vector<int> devs(size_t(l.size()));
    std::iota(devs.begin(), devs.end(), 0);
    PlacementCost best{1e300, 1e300};
    do {  // every permutation; the first m.size() entries are the placement
        std::vector<int> p(devs.begin(), devs.begin() + m.size());
        const PlacementCost c = placement_cost(m, l, b, p);
        if (c.cost_s < best.cost_s * (1 - 1e-9) ||
            (c.cost_s <= best.cost_s * (1 + 1e-9) && c.spread_s < best.spread_s))
            best = c;
    } while (std::next_permutation(devs.begin(), devs.end()));
    return best;
}

// The search's result against brute force: the same cost and spread (to rounding: both are sums
// of at most 3 and 8 products computed in different orders, 1e-9 relative is ~10^7 ulps of room).
void expect_brute_force(const MeshShape& m, const DeviceLinks& l, const AxisBytes& b) {
    const Placement p = place_ranks(m, l, b);
    const PlacementCost bf = brute_force(m, l, b);
    EXPECT_TRUE(p.optimal);
    EXPECT_NEAR(p.cost.cost_s, bf.cost_s, 1e-9 * bf.cost_s);
    EXPECT_NEAR(p.cost.spread_s, bf.spread_s, 1e-9 * bf.spread_s);
    const PlacementCost again = placement_cost(m, l, b, p.device_of_rank);
    EXPECT_NEAR(again.cost_s, p.cost.cost_s, 1e-9 * bf.cost_s);
    EXPECT_LE(p.lower_bound_s, bf.cost_s * (1 + 1e-9));
    std::vector<int> d = p.device_of_rank;
    std::sort(d.begin(), d.end());
    EXPECT_EQ(std::adjacent_find(d.begin(), d.end()), d.end());  // distinct devices
}

TEST(Placement, EqualsBruteForceOnRandomTreesAndArbitraryLinks) {
    std::mt19937 rng(7);
    const MeshShape meshes[] = {{2, 2, 2}, {1, 2, 4}, {4, 2, 1}, {2, 1, 3},
                                {1, 3, 2}, {2, 2, 1}, {1, 1, 6}, {3, 2, 1}};
    for (int trial = 0; trial < 24; ++trial) {
        const MeshShape m = meshes[trial % 8];
        const int n = m.size() + (trial % 3 == 0 && m.size() < 8 ? 1 : 0);  // a spare device
        AxisBytes b{double(1 + rng() % 100) * 1e6, double(1 + rng() % 100) * 1e6,
                    double(1 + rng() % 100) * 1e6};
        DeviceLinks l;
        if (trial % 2 == 0) {  // a tree: pairs, then quads, then the rest (random speeds, ordered)
            std::vector<int> perm(static_cast<size_t>(n));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            const double fast = 100 + rng() % 300, mid = 20 + rng() % 60, slow = 5 + rng() % 10;
            l = make_links(n, n, [&](int a, int c) -> std::pair<std::string, double> {
                const int x = perm[a], y = perm[c];
                if (x / 2 == y / 2) return {"NV", fast};
                if (x / 4 == y / 4) return {"PIX", mid};
                return {"SYS", slow};
            });
        } else {  // any symmetric table
            std::vector<std::vector<double>> g(static_cast<size_t>(n),
                                               std::vector<double>(static_cast<size_t>(n)));
            for (int a = 0; a < n; ++a)
                for (int c = a + 1; c < n; ++c) g[a][c] = g[c][a] = double(1 + rng() % 50);
            l = make_links(n, n, [&](int a, int c) -> std::pair<std::string, double> {
                return {"x", g[a][c]};
            });
        }
        SCOPED_TRACE(::testing::Message() << "trial " << trial);
        expect_brute_force(m, l, b);
    }
}

// Two nodes of two sockets, four devices each: the node boundary is slower than a socket's.
TEST(Placement, EqualsBruteForceAcrossNodes) {
    const DeviceLinks l = make_links(8, 4, [](int a, int b) -> std::pair<std::string, double> {
        if (a / 4 != b / 4) return {"net", 12};
        if (a / 2 != b / 2) return {"SYS", 20};
        return {"PIX", 24};
    });
    expect_brute_force({2, 2, 2}, l, {5e8, 1e8, 2e8});
    expect_brute_force({2, 4, 1}, l, {5e8, 1e8, 0});
    expect_brute_force({1, 2, 4}, l, {1e8, 0, 3e8});
}

// Eight GPUs in NVLink pairs that launch order splits: {0,5} {1,4} {2,7} {3,6}.
// Bounds in this file's hand-computed costs: each is a sum of at most three products bytes ×
// (1 / (GB/s · 1e9)) in double, ~0.01–0.1 s, so the code and the test differ by a few roundings
// (≤ ~1e-17 s); 1e-12 s is far above that and far below any wrong link (≥ 1e-3 s here). Pure
// double arithmetic, no CPU kernel: the same on every CPU and kernel choice.
TEST(Placement, TensorParallelGroupsStayInsideNvLinkIslands) {
    const int island[8] = {0, 1, 2, 3, 1, 0, 3, 2};
    const DeviceLinks l = make_links(8, 8, [&](int a, int b) -> std::pair<std::string, double> {
        if (island[a] == island[b]) return {"NV4", 100};
        if (a / 4 == b / 4) return {"PHB", 20};
        return {"SYS", 10};
    });
    const MeshShape m{4, 2, 1};
    const Placement p = place_ranks(m, l, {1e9, 1e8, 0});
    ASSERT_TRUE(p.optimal);
    for (int r = 0; r < 8; r += 2)
        EXPECT_EQ(island[p.device_of_rank[r]], island[p.device_of_rank[r + 1]]) << r;
    EXPECT_EQ(describe_placement(m, l, p.device_of_rank),
              "tp: 4 groups on NV4; dp: 2 groups on PHB");
    const MeshAxis launch[3] = {MeshAxis::Tp, MeshAxis::Dp, MeshAxis::Pp};
    const std::vector<int> in_order = linear_placement(m, launch);
    EXPECT_EQ(in_order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(describe_placement(m, l, in_order), "tp: 4 groups on PHB; dp: 2 groups on SYS");
    // 1 GB of tp on NVLink at 100 GB/s + 0.1 GB of dp with each dp group the first (or second)
    // devices of the islands, one socket's PHB at 20 GB/s: 0.01 + 0.005 s. Launch order: tp
    // pairs on PHB, dp groups across sockets: 0.05 + 0.01 s.
    EXPECT_NEAR(p.cost.cost_s, 1e9 / 100e9 + 1e8 / 20e9, 1e-12);
    EXPECT_NEAR(placement_cost(m, l, {1e9, 1e8, 0}, in_order).cost_s, 1e9 / 20e9 + 1e8 / 10e9,
                1e-12);
}

// Two 8-GPU NVSwitch nodes, tp 4 x pp 2 x dp 2: one of pp and dp has to cross the network; the
// axis with fewer bytes does, and the search is exact (like devices and nodes tried once).
TEST(Placement, TheCheaperAxisCrossesNodes) {
    const DeviceLinks l = make_links(16, 8, [](int a, int b) -> std::pair<std::string, double> {
        return a / 8 == b / 8 ? std::pair<std::string, double>{"NV18", 450}
                              : std::pair<std::string, double>{"net", 50};
    });
    const MeshShape m{2, 4, 2};
    const Placement dp_heavy = place_ranks(m, l, {4e9, 2e9, 1e8});
    ASSERT_TRUE(dp_heavy.optimal);
    EXPECT_EQ(describe_placement(m, l, dp_heavy.device_of_rank),
              "tp: 4 groups on NV18; dp: 8 groups on NV18; pp: 8 chains on net");
    EXPECT_NEAR(dp_heavy.cost.cost_s, 4e9 / 450e9 + 2e9 / 450e9 + 1e8 / 50e9, 1e-12);
    const Placement pp_heavy = place_ranks(m, l, {4e9, 1e8, 2e9});
    ASSERT_TRUE(pp_heavy.optimal);
    EXPECT_EQ(describe_placement(m, l, pp_heavy.device_of_rank),
              "tp: 4 groups on NV18; dp: 8 groups on net; pp: 8 chains on NV18");
    EXPECT_LT(dp_heavy.steps, 100000);  // interchangeable devices and nodes tried once
}

// 128 nodes x 8 = 1,024 devices: like devices and like nodes tried once, the search finishes.
TEST(Placement, ALargeClusterOfLikeNodesIsSearchedToTheEnd) {
    const DeviceLinks l = make_links(1024, 8, [](int a, int b) -> std::pair<std::string, double> {
        return a / 8 == b / 8 ? std::pair<std::string, double>{"NV18", 450}
                              : std::pair<std::string, double>{"net", 50};
    });
    const MeshShape m{16, 8, 8};
    const AxisBytes b{8e9, 2e9, 5e8};
    const Placement p = place_ranks(m, l, b, 2'000'000);
    const MeshAxis launch[3] = {MeshAxis::Tp, MeshAxis::Dp, MeshAxis::Pp};
    EXPECT_LE(p.cost.cost_s, placement_cost(m, l, b, linear_placement(m, launch)).cost_s);
    EXPECT_LE(p.lower_bound_s, p.cost.cost_s);
    // tp fills a node, so dp and pp cross the network: launch order's cost, proven optimal by the
    // search (the per-axis lower bound, with pp chains each in a node, is below it).
    EXPECT_NEAR(p.cost.cost_s, 8e9 / 450e9 + 2e9 / 50e9 + 5e8 / 50e9, 1e-12);
    EXPECT_NEAR(p.lower_bound_s, 8e9 / 450e9 + 2e9 / 50e9 + 5e8 / 450e9, 1e-12);
    EXPECT_TRUE(p.optimal);
}

TEST(Placement, ABudgetThatRunsOutIsNotCalledOptimal) {
    std::mt19937 rng(3);
    std::vector<std::vector<double>> g(10, std::vector<double>(10));
    for (int a = 0; a < 10; ++a)
        for (int c = a + 1; c < 10; ++c) g[a][c] = g[c][a] = double(1 + rng() % 50);
    const DeviceLinks l = make_links(10, 10, [&](int a, int c) -> std::pair<std::string, double> {
        return {"x", g[a][c]};
    });
    const Placement p = place_ranks({5, 2, 1}, l, {1e9, 1e9, 0}, 50);
    EXPECT_FALSE(p.optimal);
    EXPECT_EQ(p.device_of_rank.size(), 10u);
    EXPECT_LE(p.lower_bound_s, p.cost.cost_s);
}

TEST(Placement, ErrorsNameTheCounts) {
    const DeviceLinks l = make_links(4, 4, [](int, int) -> std::pair<std::string, double> {
        return {"x", 10};
    });
    EXPECT_EQ(error_of([&] {
                  place_ranks({2, 2, 2}, l, {});
              }),
              "placement: the mesh dp 2 x tp 2 x pp 2 has 8 ranks but there are 4 devices");
    DeviceLinks bad = l;
    bad.gbps[1][2] = 0;
    EXPECT_EQ(error_of([&] {
                  place_ranks({1, 2, 1}, bad, {});
              }),
              "placement: link 1 - 2: bandwidth 0 GB/s, expected > 0");
}

}  // namespace
}  // namespace ete
