// tests/parallel/replica_check_test.cpp — buffer_checksum's properties and the dp replica check
// on the fake world: identical replicas pass; a one-ulp change on one rank makes every rank throw
// a message naming that rank (group and world rank) against the majority's reference rank.
#include "ete/parallel/replica_check.h"

#include <cmath>
#include <set>

#include "comm_checks.h"
#include "ete/parallel/fake_comm.h"

namespace ete {
namespace {

std::vector<float> params(size_t n) {
    std::vector<float> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = std::sin(float(i) * 0.37f) * 3.0f;
    return p;
}

std::string hex(uint64_t x) {
    return fmt::format("{:#018x}", x);
}

TEST(BufferChecksum, IsDeterministicAndSeesEveryWordAndTheLength) {
    for (size_t n : {0, 1, 2, 7, 8, 9, 33, 1000}) {
        const std::vector<float> p = params(n);
        const std::vector<float> copy = p;
        EXPECT_EQ(buffer_checksum(p.data(), n), buffer_checksum(copy.data(), n)) << n;
        // A one-ulp change anywhere (every lane, the tail) always changes it (a bijective chain).
        std::set<uint64_t> seen{buffer_checksum(p.data(), n)};
        for (size_t i = 0; i < n; ++i) {
            std::vector<float> q = p;
            q[i] = std::nextafter(q[i], INFINITY);
            EXPECT_TRUE(seen.insert(buffer_checksum(q.data(), n)).second) << n << " at " << i;
        }
    }
    // The length counts even when the extra bytes are zero; order counts; -0 is not +0.
    std::vector<float> z(9, 0.0f);
    EXPECT_NE(buffer_checksum(z.data(), 8), buffer_checksum(z.data(), 9));
    EXPECT_NE(buffer_checksum(z.data(), 0), buffer_checksum(z.data(), 1));
    std::vector<float> ab = {1.0f, 2.0f, 3.0f, 4.0f}, ba = {3.0f, 4.0f, 1.0f, 2.0f};
    EXPECT_NE(buffer_checksum(ab.data(), 4), buffer_checksum(ba.data(), 4));
    std::vector<float> neg = z;
    neg[3] = -0.0f;
    EXPECT_NE(buffer_checksum(z.data(), 9), buffer_checksum(neg.data(), 9));
}

class ReplicaCheck : public ::testing::TestWithParam<int> {};

TEST_P(ReplicaCheck, IdenticalReplicasPass) {
    run_fake_world(GetParam(), [](Communicator& w) {
        const std::vector<float> p = params(1031);
        EXPECT_EQ(error_of([&] { check_replicas_identical(w, p.data(), p.size(), "step 1"); }),
                  "<no error>");
    });
}

// Rank `bad` is one ulp off in one element; every rank throws the same message naming it.
TEST_P(ReplicaCheck, OneUlpOnOneRankIsNamedOnEveryRank) {
    const int n = GetParam();
    if (n == 1) GTEST_SKIP() << "one replica cannot diverge";
    for (int bad = 0; bad < n; ++bad) {
        const std::vector<float> good = params(1031);
        std::vector<float> off = good;
        off[517] = std::nextafter(off[517], INFINITY);
        const uint64_t good_sum = buffer_checksum(good.data(), good.size());
        const uint64_t bad_sum = buffer_checksum(off.data(), off.size());
        // Two ranks tie: the lowest rank is the reference. Otherwise the majority is.
        const int ref = n == 2 ? 0 : (bad == 0 ? 1 : 0);
        const std::string want =
            n == 2 && bad == 0
                ? fmt::format(
                      "replica check (step 40): parameters of dp rank 1 (world rank 1) "
                      "differ from dp rank 0 in group world: checksums {} vs {} (1 of 2 "
                      "ranks agree with dp rank 0)",
                      hex(good_sum), hex(bad_sum))
                : fmt::format(
                      "replica check (step 40): parameters of dp rank {} (world rank {}) "
                      "differ from dp rank {} in group world: checksums {} vs {} ({} of "
                      "{} ranks agree with dp rank {})",
                      bad, bad, ref, hex(bad_sum), hex(good_sum), n - 1, n, ref);
        run_fake_world(n, [&](Communicator& w) {
            const std::vector<float>& mine = w.rank() == bad ? off : good;
            EXPECT_EQ(
                error_of([&] { check_replicas_identical(w, mine.data(), mine.size(), "step 40"); }),
                want)
                << "rank " << w.rank() << ", bad rank " << bad;
        });
    }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ReplicaCheck, ::testing::Range(1, 5));

// On a subgroup the message names group ranks, their world ranks and the group; several diverged
// ranks are listed together against the majority.
TEST(ReplicaCheckGroups, NamesWorldRanksOfTheGroupAndSeveralDivergedRanks) {
    run_fake_world(4, [](Communicator& w) {
        auto dp = w.split(w.rank() % 2, w.rank(), w.rank() % 2 == 0 ? "dp[0,2]" : "dp[1,3]");
        std::vector<float> p = params(64);  // world rank 2 = rank 1 of dp[0,2] is off
        if (w.rank() == 2) p[1] = std::nextafter(p[1], INFINITY);
        const uint64_t good = buffer_checksum(params(64).data(), 64);
        std::vector<float> q = params(64);
        q[1] = std::nextafter(q[1], INFINITY);
        const uint64_t bad = buffer_checksum(q.data(), 64);
        const std::string err =
            error_of([&] { check_replicas_identical(*dp, p.data(), p.size(), "step 7"); });
        if (w.rank() % 2 == 1) {
            EXPECT_EQ(err, "<no error>");
        } else {
            EXPECT_EQ(err, fmt::format("replica check (step 7): parameters of dp rank 1 (world "
                                       "rank 2) differ from dp rank 0 in group dp[0,2]: checksums "
                                       "{} vs {} (1 of 2 ranks agree with dp rank 0)",
                                       hex(bad), hex(good)));
        }
    });
    run_fake_world(4, [](Communicator& w) {
        std::vector<float> p = params(64);
        if (w.rank() >= 2) p[w.rank()] += 1.0f;  // ranks 2 and 3 differ from 0, 1 and each other
        const std::string err = error_of([&] { check_replicas_identical(w, p.data(), 64, ""); });
        EXPECT_EQ(err.rfind("replica check: parameters of dp ranks 2,3 (world ranks 2,3) differ "
                            "from dp rank 0 in group world: checksums ",
                            0),
                  0u)
            << err;
        EXPECT_NE(err.find("(2 of 4 ranks agree with dp rank 0)"), std::string::npos) << err;
    });
}

}  // namespace
}  // namespace ete
