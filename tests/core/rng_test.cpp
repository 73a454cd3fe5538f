// tests/core/rng_test.cpp — Philox known answers and counter-based invariance.
#include <gtest/gtest.h>

#include <cmath>

#include "ete/core/rng.h"

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
    EXPECT_NEAR(sum / n, 0.0, 0.01);
    EXPECT_NEAR(sq / n, 1.0, 0.01);
}

}  // namespace ete
