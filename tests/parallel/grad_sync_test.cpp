// tests/parallel/grad_sync_test.cpp — GradSync on the in-process fake world (n = 1..4): bucket
// layout, sums for awkward sizes and every way of reporting ranges, bf16 transport, overlap on vs
// off bit for bit, consecutive steps, misuse errors, a communication error surfacing from finish(),
// and a causality proof that an all-reduce runs while "backward" is still computing.
#include "ete/parallel/grad_sync.h"
#include "ete/backend/backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "comm_checks.h"
#include "ete/parallel/fake_comm.h"
#include "numerics.h"

namespace ete {
namespace {

using Range = GradSync::Range;

// Rank r's gradient, exact in f32: integers plus a multiple of 1/4, far below 2^24, so every
// partial sum is exact and the sum has the same bits in any reduction order.
float exact_grad(int rank, size_t i) {
    return float(i % 97) + 0.25f * float(rank + 1);
}
float exact_sum(int n, size_t i) {
    return float(n) * float(i % 97) + 0.25f * float(n * (n + 1) / 2);
}

// Rank r's gradient with a full mantissa, in [-1, 1) (or [0.5, 1) when positive): sums round.
float random_grad(int rank, size_t i, bool positive = false) {
    uint64_t x = uint64_t(rank) * 0x9E3779B97F4A7C15ULL + i + 1;
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 29)) * 0x94D049BB133111EBULL;
    const float u = float(x >> 40) / float(1 << 24);  // [0, 1), 24 random bits
    return positive ? 0.5f + 0.5f * u : 2.0f * u - 1.0f;
}

std::vector<float> fill(int rank, size_t n, float (*f)(int, size_t)) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = f(rank, i);
    return g;
}

// [0, n) in pieces of `chunk`, from the end of the buffer backwards (backward's order).
std::vector<Range> reverse_chunks(size_t n, size_t chunk) {
    std::vector<Range> out;
    for (size_t end = n; end > 0;) {
        const size_t begin = end > chunk ? end - chunk : 0;
        out.push_back({begin, end - begin});
        end = begin;
    }
    return out;
}

void expect_exact_sums(const std::vector<float>& g, int n, const std::string& what) {
    for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(g[i], exact_sum(n, i)) << what << ": element " << i << " of " << g.size();
    }
}

// Every bucket ran once, in bucket order, after it became ready.
void expect_sane_events(const GradSync& s) {
    ASSERT_EQ(s.events().size(), s.num_buckets());
    for (size_t b = 0; b < s.num_buckets(); ++b) {
        const BucketEvent& e = s.events()[b];
        EXPECT_EQ(e.bucket, int(b));
        EXPECT_GE(e.ready_s, 0.0);
        EXPECT_GE(e.start_s, e.ready_s) << "bucket " << b;
        EXPECT_GE(e.end_s, e.start_s) << "bucket " << b;
        if (b > 0) {
            EXPECT_GE(e.start_s, s.events()[b - 1].start_s) << "bucket " << b;
        }
    }
}

constexpr size_t kBucketElems = 32;
constexpr GradSyncOptions kSmallBuckets{kBucketElems * sizeof(float), false, true};
const size_t kSizes[] = {1, 31, 32, 33, 1031};  // below, at and above one bucket; many buckets

class GradSyncFake : public ::testing::TestWithParam<int> {};

TEST(GradSyncLayout, BucketsAreCutFromTheEnd) {
    run_fake_world(1, [](Communicator& w) {
        GradSync s(w, nullptr, nullptr, 0, kSmallBuckets);
        EXPECT_EQ(s.num_buckets(), 0u);
        std::vector<float> g(70);
        // 130 bytes hold 32 whole f32 elements.
        GradSync t(w, nullptr, g.data(), g.size(), {130, false, true});
        ASSERT_EQ(t.num_buckets(), 3u);
        EXPECT_EQ(t.bucket(0).offset, 38u);
        EXPECT_EQ(t.bucket(0).count, 32u);
        EXPECT_EQ(t.bucket(1).offset, 6u);
        EXPECT_EQ(t.bucket(1).count, 32u);
        EXPECT_EQ(t.bucket(2).offset, 0u);
        EXPECT_EQ(t.bucket(2).count, 6u);
        EXPECT_NE(error_of([&] {
                      GradSync u(w, nullptr, g.data(), g.size(), {3, false, true});
                  }).find("bucket_bytes 3 (expected >= 4"),
                  std::string::npos);
    });
}

TEST_P(GradSyncFake, SumsWithRangesInReverseOrderSpanningBuckets) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        for (size_t size : kSizes) {
            std::vector<float> g = fill(w.rank(), size, exact_grad);
            GradSync s(w, nullptr, g.data(), g.size(), kSmallBuckets);
            s.begin();
            for (Range r : reverse_chunks(size, 7))
                s.ready(r.offset, r.count);  // 7 does not divide 32
            s.finish();
            expect_exact_sums(g, n, "size " + std::to_string(size));
            if (n > 1) expect_sane_events(s);
            if (n == 1) {
                EXPECT_TRUE(s.events().empty());
            }
        }
    });
}

// Each rank reports in its own random order: buckets still start in one order on every rank
// (otherwise the fake would report mismatched collectives or hang).
TEST_P(GradSyncFake, SumsWithRangesInRandomOrderDifferentOnEachRank) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        for (size_t size : kSizes) {
            std::vector<float> g = fill(w.rank(), size, exact_grad);
            std::vector<Range> ranges = reverse_chunks(size, 5);
            std::mt19937 rng(uint32_t(100 + w.rank()));
            std::shuffle(ranges.begin(), ranges.end(), rng);
            GradSync s(w, nullptr, g.data(), g.size(), kSmallBuckets);
            s.begin();
            for (Range r : ranges) s.ready(r.offset, r.count);
            s.finish();
            expect_exact_sums(g, n, "size " + std::to_string(size));
            if (n > 1) expect_sane_events(s);
        }
    });
}

TEST_P(GradSyncFake, FinishReportsWhatWasNotReported) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        for (size_t size : kSizes) {
            std::vector<float> g = fill(w.rank(), size, exact_grad);
            GradSync s(w, nullptr, g.data(), g.size(), kSmallBuckets);
            s.begin();
            s.finish();  // nothing reported at all
            expect_exact_sums(g, n, "nothing reported, size " + std::to_string(size));

            // Some ranges, leaving holes at the start, the end and in the middle of buckets.
            for (size_t i = 0; i < size; ++i) g[i] = exact_grad(w.rank(), i);  // in place
            s.begin();
            for (Range r : reverse_chunks(size, 3)) {
                if (r.offset % 2 == 1 && r.offset + r.count < size) s.ready(r.offset, r.count);
            }
            s.finish();
            expect_exact_sums(g, n, "partly reported, size " + std::to_string(size));
        }
    });
}

// Gradients in memory the host cannot touch (the guarded test backend): every bucket is staged
// through host memory, f32 and bf16, overlapped or not, and the sums are the same as in place.
TEST_P(GradSyncFake, StagesBackendMemoryTheHostCannotTouch) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        auto be = make_guarded_backend();
        for (bool bf16 : {false, true})
            for (bool overlap : {true, false}) {
                const size_t size = 1031;
                std::vector<float> want = fill(w.rank(), size, exact_grad);
                DeviceBuffer dev(*be, size * sizeof(float));
                be->upload(dev.data(), want.data(), size * sizeof(float));
                GradSync host(w, nullptr, want.data(), size,
                              {kBucketElems * sizeof(float), bf16, overlap});
                GradSync s(w, be.get(), static_cast<float*>(dev.data()), size,
                           {kBucketElems * sizeof(float), bf16, overlap});
                for (GradSync* g : {&host, &s}) {
                    g->begin();
                    for (Range r : reverse_chunks(size, 7)) g->ready(r.offset, r.count);
                    g->finish();
                }
                std::vector<float> got(size);
                be->download(got.data(), dev.data(), size * sizeof(float));
                EXPECT_EQ(got, want) << "bf16 " << bf16 << " overlap " << overlap;
                if (!bf16) expect_exact_sums(got, n, "guarded");
            }
    });
}

// The bf16 transport: the fake adds in group-rank order in f32 and rounds to bf16 after each
// add, so the result must equal that rounding sequence exactly; it is also within the bf16
// error bound of the exact sum.
TEST_P(GradSyncFake, Bf16EqualsRankOrderRoundingOfTheSum) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        const size_t size = 1031;
        std::vector<float> g(size);
        for (size_t i = 0; i < size; ++i) g[i] = random_grad(w.rank(), i, true);
        GradSync s(w, nullptr, g.data(), g.size(), {kBucketElems * sizeof(float), true, true});
        s.begin();
        for (Range r : reverse_chunks(size, 13)) s.ready(r.offset, r.count);
        s.finish();
        if (n == 1) {  // no transport, no rounding
            for (size_t i = 0; i < size; ++i) ASSERT_EQ(g[i], random_grad(0, i, true));
            return;
        }
        size_t rounded = 0;
        for (size_t i = 0; i < size; ++i) {
            uint16_t acc = f32_to_bf16(random_grad(0, i, true));
            double exact = random_grad(0, i, true);
            for (int r = 1; r < n; ++r) {
                const float x = bf16_to_f32(f32_to_bf16(random_grad(r, i, true)));
                acc = f32_to_bf16(bf16_to_f32(acc) + x);
                exact += random_grad(r, i, true);
            }
            ASSERT_EQ(g[i], bf16_to_f32(acc)) << "element " << i;
            // A sum of n positive terms, each rounded to bf16 and each add rounded to bf16 (in
            // f32 first: exact for values in [0.5, 1)): within γ_n of the exact sum, in bf16's
            // unit u = 2^-8 (8 significant bits; numerics.h). At n = 2 the error reaches 0.84 of
            // it: bf16 rounding of a few terms comes near its worst case.
            ASSERT_NEAR(g[i], exact, testing::gamma_worst(n, 0x1p-8) * exact) << "element " << i;
            rounded += double(g[i]) != double(float(exact));
        }
        EXPECT_GT(rounded, size / 2) << "the values went through bf16";
    });
}

// Overlap changes who calls the all-reduce and when, never what is reduced.
TEST_P(GradSyncFake, OverlapOffEqualsOverlapOnBitForBit) {
    const int n = GetParam();
    run_fake_world(n, [](Communicator& w) {
        for (bool bf16 : {false, true}) {
            const size_t size = 1031;
            std::vector<float> on =
                fill(w.rank(), size, [](int r, size_t i) { return random_grad(r, i); });
            std::vector<float> off = on;
            GradSync a(w, nullptr, on.data(), size, {kBucketElems * sizeof(float), bf16, true});
            GradSync b(w, nullptr, off.data(), size, {kBucketElems * sizeof(float), bf16, false});
            a.begin();
            for (Range r : reverse_chunks(size, 11)) a.ready(r.offset, r.count);
            a.finish();
            b.begin();
            for (Range r : reverse_chunks(size, 11)) b.ready(r.offset, r.count);
            b.finish();
            EXPECT_EQ(std::memcmp(on.data(), off.data(), size * sizeof(float)), 0)
                << (bf16 ? "bf16" : "f32");
            if (w.size() > 1) {
                EXPECT_NE(on[0], random_grad(w.rank(), 0)) << "it was reduced";
            }
        }
    });
}

TEST_P(GradSyncFake, TwoConsecutiveSteps) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        const size_t size = 100;
        std::vector<float> g = fill(w.rank(), size, exact_grad);
        GradSync s(w, nullptr, g.data(), size, kSmallBuckets);
        for (int step = 0; step < 2; ++step) {
            // Step 1 starts from the sum of step 0 on every rank, so it ends at n * that sum.
            s.begin();
            for (Range r : reverse_chunks(size, 9)) s.ready(r.offset, r.count);
            s.finish();
            for (size_t i = 0; i < size; ++i) {
                const float want = step == 0 ? exact_sum(n, i) : float(n) * exact_sum(n, i);
                ASSERT_EQ(g[i], want) << "step " << step << " element " << i;
            }
            if (n > 1) expect_sane_events(s);
        }
    });
}

TEST(GradSyncMisuse, ErrorsNameTheRangeAndTheExpectation) {
    run_fake_world(2, [](Communicator& w) {
        std::vector<float> g(100, 1.0f);
        GradSync s(w, nullptr, g.data(), g.size(), kSmallBuckets);
        EXPECT_EQ(error_of([&] { s.ready(0, 1); }),
                  "GradSync::ready on group world: no step armed (expected begin() first)");
        EXPECT_NE(error_of([&] { s.finish(); }).find("no step armed"), std::string::npos);
        s.begin();
        EXPECT_NE(error_of([&] { s.begin(); }).find("the previous step is not finished"),
                  std::string::npos);
        EXPECT_EQ(error_of([&] { s.ready(90, 11); }),
                  "GradSync::ready on group world: elements [90, 101) (expected a range inside "
                  "the gradient buffer of 100 elements)");
        s.ready(40, 10);
        s.ready(60, 10);
        const std::string overlap = error_of([&] { s.ready(45, 10); });
        EXPECT_EQ(overlap,
                  "GradSync::ready on group world: elements [45, 55) overlap [40, 50) reported "
                  "earlier this step (expected each element at most once per step)");
        EXPECT_NE(error_of([&] { s.ready(50, 11); }).find("overlap [60, 70)"), std::string::npos);
        EXPECT_NE(error_of([&] { s.ready(42, 1); }).find("overlap [40, 50)"), std::string::npos);
        s.ready(50, 10);  // fills the gap exactly: [40, 70) merged
        EXPECT_NE(error_of([&] { s.ready(69, 1); }).find("overlap [40, 70)"), std::string::npos);
        s.finish();  // the failed calls changed nothing: a correct sum
        for (float x : g) ASSERT_EQ(x, 2.0f);
    });
}

TEST(GradSyncSingleRank, IsANoOp) {
    run_fake_world(1, [](Communicator& w) {
        std::vector<float> g = fill(0, 1031, exact_grad);
        GradSync s(w, nullptr, g.data(), g.size(), kSmallBuckets);
        s.begin();
        s.ready(10, 5);
        s.finish();
        for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], exact_grad(0, i));
        EXPECT_TRUE(s.events().empty());
        EXPECT_EQ(s.wait_seconds(), 0.0);
    });
}

// Rank 1 never joins the all-reduce: rank 0's comm thread fails, finish() rethrows the
// communicator's message (op, group, world ranks) and the GradSync refuses further steps.
TEST(GradSyncError, CommThreadFailureSurfacesFromFinish) {
    run_fake_world(2, [](Communicator& w) {
        auto dp = w.split(0, w.rank(), "dp[0,1]");
        if (w.rank() == 1) return;
        std::vector<float> g(40, 1.0f);
        GradSync s(*dp, nullptr, g.data(), g.size(), kSmallBuckets);
        s.begin();
        s.ready(8, 32);  // bucket 0 starts on the comm thread now
        EXPECT_EQ(error_of([&] { s.finish(); }),
                  "GradSync bucket 0 of 2 (elements [8, 40)): [comm] all_reduce on group dp[0,1] "
                  "(world ranks 0,1): world rank 1 finished without joining");
        EXPECT_NE(error_of([&] { s.begin(); }).find("a previous step failed"), std::string::npos);
        ASSERT_EQ(s.events().size(), 2u);
        EXPECT_EQ(s.events()[1].start_s, -1.0) << "bucket 1 was skipped after the failure";
    });
}

// Backward "computes" 20 ms between buckets. With overlap, bucket 0's all-reduce must have
// ended before the last bucket was even ready — it can only have run during the computation.
// Without overlap nothing starts before the last bucket is ready. Causality, not a time limit.
TEST_P(GradSyncFake, AllReduceRunsDuringBackward) {
    const int n = GetParam();
    if (n == 1) GTEST_SKIP() << "no communication with one rank";
    run_fake_world(n, [](Communicator& w) {
        for (bool overlap : {true, false}) {
            const size_t bucket = 1024, buckets = 5;
            std::vector<float> g = fill(w.rank(), bucket * buckets, exact_grad);
            GradSync s(w, nullptr, g.data(), g.size(), {bucket * sizeof(float), false, overlap});
            ASSERT_EQ(s.num_buckets(), buckets);
            w.barrier();  // every rank's backward starts together
            s.begin();
            for (size_t b = 0; b < buckets; ++b) {
                if (b > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
                s.ready(s.bucket(b).offset, s.bucket(b).count);
            }
            s.finish();
            expect_exact_sums(g, w.size(), overlap ? "overlap" : "no overlap");
            const std::vector<BucketEvent>& e = s.events();
            if (overlap) {
                EXPECT_LT(e[0].end_s, e[buckets - 1].ready_s);
            } else {
                EXPECT_GE(e[0].start_s, e[buckets - 1].ready_s);
                EXPECT_GE(s.wait_seconds(), e[buckets - 1].end_s - e[0].start_s);
            }
        }
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GradSyncFake, ::testing::Range(1, 5));

}  // namespace
}  // namespace ete
