// tests/parallel/link_probe_test.cpp — `ete topo --measure`'s probes: the circle method meets
// every pair exactly once in n − 1 (even n) or n (odd n) rounds of disjoint pairs, and the probe
// over a fake 4-rank world fills every off-diagonal entry and the collectives. (Under mpirun:
// Launch.TopoMeasuresTheLinksBetweenRanks.)
#include "ete/parallel/link_probe.h"

#include <gtest/gtest.h>

#include <set>

#include "ete/parallel/fake_comm.h"

namespace ete {
namespace {

TEST(LinkProbe, TheTournamentMeetsEveryPairOnce) {
    for (int n = 1; n <= 9; ++n) {
        std::set<std::pair<int, int>> met;
        EXPECT_EQ(tournament_rounds(n), n < 2 ? 0 : (n % 2 ? n : n - 1)) << n;
        for (int round = 0; round < tournament_rounds(n); ++round) {
            int resting = 0;
            for (int r = 0; r < n; ++r) {
                const int p = tournament_partner(n, round, r);
                if (p < 0) {
                    ++resting;
                    continue;
                }
                ASSERT_LT(p, n);
                ASSERT_NE(p, r) << n << " " << round;
                EXPECT_EQ(tournament_partner(n, round, p), r) << n << " " << round;  // a matching
                if (r < p) {
                    EXPECT_TRUE(met.insert({r, p}).second) << n << ": " << r << "-" << p;
                }
            }
            EXPECT_EQ(resting, n % 2) << n << " " << round;
        }
        EXPECT_EQ(int(met.size()), n * (n - 1) / 2) << n;
    }
}

TEST(LinkProbe, AFakeWorldGetsTheWholeMatrix) {
    ProbeOptions opt;
    opt.bytes = 1 << 16;
    opt.latency_reps = 3;
    opt.bandwidth_reps = 2;
    std::vector<LinkMatrix> seen(4);
    run_fake_world(4, [&](Communicator& w) { seen[size_t(w.rank())] = probe_links(w, opt); });
    for (const LinkMatrix& m : seen) {
        ASSERT_EQ(m.hosts.size(), 4u);
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                if (i == j) {
                    EXPECT_EQ(m.gbps[i][j], 0);
                } else {
                    EXPECT_GT(m.gbps[i][j], 0) << i << j;
                    EXPECT_GT(m.latency_us[i][j], 0) << i << j;
                }
            }
        EXPECT_EQ(m.gbps, seen[0].gbps);  // every rank returns the same matrix
        EXPECT_GT(m.world_bus_gbps, 0);
        ASSERT_EQ(m.node_names.size(), 1u);  // one host, four ranks
        EXPECT_EQ(m.node_names[0], m.hosts[0]);
        EXPECT_GT(m.node_bus_gbps[0], 0);
    }
}

}  // namespace
}  // namespace ete
