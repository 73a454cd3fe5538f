// tests/parallel/mpi/grad_sync_mpi_test.cpp — GradSync and the replica check over real MPI
// processes (np 2, 3, 4): exact sums for every way of reporting ranges on a dp group whose ranks
// are reversed against the world, bf16 within its error bound, overlap on vs off bit for bit, the
// causality proof that an all-reduce runs during backward, and a diverged replica named on every
// rank. The suite is MpiComm (tests named GradSync*, ReplicaCheck*) because CMake runs the
// filter "MpiComm.*" at np 2, 3 and 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "ete/parallel/grad_sync.h"
#include "ete/parallel/replica_check.h"
#include "mpi_test_env.h"
#include "numerics.h"
#include "test_util.h"

namespace ete::testing {
namespace {

using Range = GradSync::Range;

constexpr size_t kBucketElems = 32;
const size_t kSizes[] = {1, 31, 33, 1031};

// Exact in f32 (integers plus a multiple of 1/4, far below 2^24): the sum has the same bits in
// any reduction order, so MPI's algorithm choice cannot change it.
float exact_grad(int rank, size_t i) {
    return float(i % 97) + 0.25f * float(rank + 1);
}
float exact_sum(int n, size_t i) {
    return float(n) * float(i % 97) + 0.25f * float(n * (n + 1) / 2);
}
// A full-mantissa value in [0.5, 1): sums round.
float random_grad(int rank, size_t i) {
    uint64_t x = uint64_t(rank) * 0x9E3779B97F4A7C15ULL + i + 1;
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 29)) * 0x94D049BB133111EBULL;
    return 0.5f + 0.5f * (float(x >> 40) / float(1 << 24));
}

std::vector<Range> reverse_chunks(size_t n, size_t chunk) {
    std::vector<Range> out;
    for (size_t end = n; end > 0;) {
        const size_t begin = end > chunk ? end - chunk : 0;
        out.push_back({begin, end - begin});
        end = begin;
    }
    return out;
}

// A dp group ordered against the world, so group rank != world rank.
std::unique_ptr<Communicator> reversed_dp() {
    Communicator& w = mpi_world();
    return w.split(0, -w.rank(), "dp");
}

TEST(MpiComm, GradSyncSumsForEveryWayOfReporting) {
    auto dp = reversed_dp();
    const int n = dp->size(), r = dp->rank();
    for (size_t size : kSizes) {
        for (int mode = 0; mode < 3; ++mode) {  // reverse order, random order per rank, nothing
            std::vector<float> g(size);
            for (size_t i = 0; i < size; ++i) g[i] = exact_grad(r, i);
            std::vector<Range> ranges = reverse_chunks(size, 7);
            if (mode == 1) std::shuffle(ranges.begin(), ranges.end(), std::mt19937(uint32_t(r)));
            if (mode == 2) ranges.clear();
            GradSync s(*dp, nullptr, g.data(), size, {kBucketElems * sizeof(float), false, true});
            s.begin();
            for (Range x : ranges) s.ready(x.offset, x.count);
            s.finish();
            for (size_t i = 0; i < size; ++i) {
                ASSERT_EQ(g[i], exact_sum(n, i))
                    << "size " << size << " mode " << mode << " i " << i;
            }
            ASSERT_EQ(s.events().size(), s.num_buckets());
            for (const BucketEvent& e : s.events()) EXPECT_GE(e.end_s, e.start_s);
        }
    }
}

// bf16 transport: a sum of n positive terms, each rounded to bf16 and each add rounded to bf16
// (in f32 first: exact for values in [0.5, 1)), within γ_n of the exact sum S in bf16's unit
// u = 2^-8 (8 significant bits; numerics.h). Overlap on and off issue the same all-reduces on the
// same communicator, so they agree bit for bit.
TEST(MpiComm, GradSyncBf16WithinItsBoundAndOverlapOffEqualsOn) {
    auto dp = reversed_dp();
    const int n = dp->size(), r = dp->rank();
    const size_t size = 1031;
    for (bool bf16 : {false, true}) {
        std::vector<float> on(size), off(size);
        for (size_t i = 0; i < size; ++i) on[i] = off[i] = random_grad(r, i);
        GradSync a(*dp, nullptr, on.data(), size, {kBucketElems * sizeof(float), bf16, true});
        GradSync b(*dp, nullptr, off.data(), size, {kBucketElems * sizeof(float), bf16, false});
        a.begin();
        for (Range x : reverse_chunks(size, 11)) a.ready(x.offset, x.count);
        a.finish();
        b.begin();
        b.finish();
        EXPECT_EQ(std::memcmp(on.data(), off.data(), size * sizeof(float)), 0) << bf16;
        for (size_t i = 0; i < size; ++i) {
            double exact = 0;
            for (int q = 0; q < n; ++q) exact += random_grad(q, i);
            // f32: n - 1 additions of positive values, in any order: γ_(n-1) of S.
            const double tol = bf16 ? testing::gamma_worst(n, 0x1p-8) * exact
                                    : testing::gamma_worst(n - 1) * exact;
            ASSERT_NEAR(on[i], exact, tol) << (bf16 ? "bf16" : "f32") << " element " << i;
        }
    }
}

// Backward "computes" 20 ms between buckets: bucket 0's all-reduce ending before the last bucket
// is ready proves it ran during the computation (causality, not a time limit).
TEST(MpiComm, GradSyncAllReduceRunsDuringBackward) {
    auto dp = reversed_dp();
    const size_t bucket = 1024, buckets = 5;
    std::vector<float> g(bucket * buckets);
    for (size_t i = 0; i < g.size(); ++i) g[i] = exact_grad(dp->rank(), i);
    GradSync s(*dp, nullptr, g.data(), g.size(), {bucket * sizeof(float), false, true});
    mpi_world().barrier();  // every rank's backward starts together
    s.begin();
    for (size_t b = 0; b < buckets; ++b) {
        if (b > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        s.ready(s.bucket(b).offset, s.bucket(b).count);
    }
    s.finish();
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], exact_sum(dp->size(), i)) << i;
    EXPECT_LT(s.events()[0].end_s, s.events()[buckets - 1].ready_s);
}

// The last world rank is one ulp off in one element: every rank throws naming it.
TEST(MpiComm, ReplicaCheckNamesTheDivergedRankOnEveryRank) {
    Communicator& w = mpi_world();
    const int n = w.size(), bad = n - 1;
    std::vector<float> p(4099);
    for (size_t i = 0; i < p.size(); ++i) p[i] = std::sin(float(i));
    EXPECT_EQ(error_of([&] { check_replicas_identical(w, p.data(), p.size(), "step 3"); }),
              "<no error>");
    const uint64_t good = buffer_checksum(p.data(), p.size());
    p[2048] = std::nextafter(p[2048], INFINITY);
    const uint64_t off = buffer_checksum(p.data(), p.size());
    if (w.rank() != bad) p[2048] = std::nextafter(p[2048], -INFINITY);
    EXPECT_EQ(error_of([&] { check_replicas_identical(w, p.data(), p.size(), "step 4"); }),
              fmt::format("replica check (step 4): parameters of dp rank {} (world rank {}) "
                          "differ from dp rank 0 in group world: checksums {:#018x} vs {:#018x} "
                          "({} of {} ranks agree with dp rank 0)",
                          bad, bad, off, good, n - 1, n));
}

}  // namespace
}  // namespace ete::testing
