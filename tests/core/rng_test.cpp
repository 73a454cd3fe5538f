// tests/core/rng_test.cpp — Philox known answers, counter-based invariance, and normal_fill
// against the per-element normal() bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "ete/core/rng.h"
#include "ete/core/rng_normal.h"

namespace ete {

TEST(Rng, PhiloxKnownAnswerRandom123) {
    // Random123 known-answer vectors for philox4x32_10.
    auto z = philox4x32({0, 0}, {0, 0, 0, 0});
    EXPECT_EQ(z[0], 0x6627e8d5u);
    EXPECT_EQ(z[1], 0xe169c58du);
    EXPECT_EQ(z[2], 0xbc57ac4cu);
    EXPECT_EQ(z[3], 0x9b00dbd8u);
    auto p = philox4x32({0xa4093822u, 0x299f31d0u},
                        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u});
    EXPECT_EQ(p[0], 0xd16cfe09u);
    EXPECT_EQ(p[1], 0x94fdccebu);
    EXPECT_EQ(p[2], 0x5001e420u);
    EXPECT_EQ(p[3], 0x24126ea1u);
}

TEST(Rng, StreamsAndIndicesAreIndependentOfOrder) {
    CounterRng a(42, "model.layers.0.mlp.up_proj.weight");
    CounterRng b(42, "model.layers.1.mlp.up_proj.weight");
    EXPECT_NE(a.u32(7), b.u32(7));
    EXPECT_EQ(a.u32(7), CounterRng(42, "model.layers.0.mlp.up_proj.weight").u32(7));
    double sum = 0, sq = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        double x = a.normal(uint64_t(i));
        sum += x;
        sq += x * x;
    }
    // Statistical: 0.01 is 4.5σ of the sample mean and 3.2σ of the sample second moment over
    // 200000 draws (σ = 1/√n, √(2/n)); the draws are fixed by the seed, so this cannot flake.
    EXPECT_NEAR(sum / n, 0.0, 0.01);
    EXPECT_NEAR(sq / n, 1.0, 0.01);
}

// Bitwise, so that -0.0 vs 0.0 or a NaN would count as a difference.
int64_t count_mismatches(const CounterRng& rng, uint64_t first, int64_t n, float scale) {
    std::vector<float> got(size_t(n) + 2, 7.0f);  // guard elements either side
    rng.normal_fill(got.data() + 1, first, n, scale);
    int64_t bad = got.front() != 7.0f || got.back() != 7.0f;
    for (int64_t k = 0; k < n; ++k) {
        float want = scale * rng.normal(first + uint64_t(k));
        bad += std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got[size_t(k) + 1]);
    }
    return bad;
}

// words() (8 blocks at a time, vectorised) against word() (one philox4x32 call), at starts in
// every position of a block, runs shorter than a block and across the 32-word fast path, and a
// counter whose high 32 bits are set (the carry into the second counter word).
TEST(Rng, WordsMatchWordOneByOne) {
    const CounterRng rng(0x0123456789abcdefULL, "lora_dropout/step3/layer1/site4");
    for (uint64_t first : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(3), uint64_t(37),
                           (uint64_t(1) << 34) - 5}) {
        for (int64_t n : {1, 3, 31, 32, 33, 100, 257}) {
            std::vector<uint32_t> got(static_cast<size_t>(n));
            rng.words(first, n, got.data());
            for (int64_t k = 0; k < n; ++k)
                ASSERT_EQ(got[size_t(k)], rng.word(first + uint64_t(k)))
                    << "first " << first << " n " << n << " k " << k;
        }
    }
    EXPECT_EQ(rng.word(5), rng.block(1)[1]);
}

TEST(Rng, NormalFillMatchesNormalBitForBit) {
    CounterRng rng(1234, "transformer.h.0.attn.c_attn.weight");
    const uint64_t near32 = (uint64_t(1) << 32) - 9;  // the counter's high word changes inside
    for (uint64_t first : {uint64_t(0), uint64_t(5), near32, uint64_t(1) << 40, ~uint64_t(0) - 20})
        for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000})
            for (float scale : {1.0f, 0.02f})
                EXPECT_EQ(count_mismatches(rng, first, n, scale), 0)
                    << "first " << first << " n " << n << " scale " << scale;
    EXPECT_EQ(count_mismatches(rng, 3, 1000003, 0.02f), 0);
}

TEST(Rng, NormalFillParallelPathIsThreadCountInvariant) {
    CounterRng rng(7, "wte");
    const int64_t n = (int64_t(1) << 18) + 5;  // past the OpenMP threshold, several blocks
    const uint64_t first = (uint64_t(1) << 32) - 1000;
    EXPECT_EQ(count_mismatches(rng, first, n, 0.02f), 0);
    std::vector<float> one(static_cast<size_t>(n)), many(static_cast<size_t>(n));
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    rng.normal_fill(one.data(), first, n, 0.02f);
    omp_set_num_threads(3);  // uneven split of the blocks
    rng.normal_fill(many.data(), first, n, 0.02f);
    omp_set_num_threads(saved);
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0);
}

// The vector path recomputes only the lanes that need it; this proves the approximation stays
// far inside the bound that makes that exact, on a sample of inputs (the whole 2^32 range of each
// factor is checked by `ete_bench_rng --verify-exhaustive`), including the edges of both ranges.
TEST(Rng, VectorNormalFactorsAreWithinTheExactnessBound) {
    if (!rng_detail::has_vector_normal()) {
        GTEST_SKIP() << "no AVX-512 path in this build";
    }
    std::vector<uint32_t> w;
    for (uint64_t v = 0; v < (uint64_t(1) << 32); v += 65537) w.push_back(uint32_t(v));
    for (uint32_t v : {0u, 1u, 2u, 0x3FFFFFFFu, 0x40000000u, 0x40000001u, 0x7FFFFFFFu, 0x80000000u,
                       0xBFFFFFFFu, 0xC0000000u, 0xFFFFFFFEu, 0xFFFFFFFFu})
        w.push_back(v);
    std::vector<double> r(w.size()), c(w.size());
    rng_detail::approx_factors(w.data(), w.data(), r.data(), c.data(), int64_t(w.size()));
    double worst_r = 0, worst_c = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        double rs = rng_detail::radius(w[i]), cs = rng_detail::cos_angle(w[i]);
        if (rs == 0) {
            EXPECT_EQ(r[i], 0.0);  // w = 2^32 - 1: u1 = 1
        } else {
            worst_r = std::max(worst_r, std::abs(r[i] - rs) / rs);
        }
        worst_c = std::max(worst_c, std::abs(c[i] - cs) / std::abs(cs));
    }
    // The exhaustive check finds 2^-52 for the radius and 2^-49.3 for the cosine, the latter at
    // w = 2^30 (in the sample): x = fl(pi/2), cos x ~ 6e-17, where the three-part pi/2 of the
    // reduction is short by 8.5e-32. 2^8 below the bound leaves room for another compiler.
    EXPECT_LT(worst_r, rng_detail::kMaxRelError / 256) << worst_r;
    EXPECT_LT(worst_c, rng_detail::kMaxRelError / 256) << worst_c;
}

}  // namespace ete
