// ete/core/rng_normal.h — the Box-Muller of CounterRng::normal, and what normal_fill's vector path
// promises about it. Internal to ete/core; exposed for tests/core/rng_test.cpp and the exhaustive
// check in bench/rng_bench.cpp.
//
// normal(i) is float(radius(w0) * cos_angle(w1)) on the first two Philox words of counter i, each
// factor in double through libm. normal_fill's AVX-512 path computes both factors with its own
// polynomials (a few double ulps from libm), rounds the product to float, and recomputes with
// libm the rare lanes whose double product lies so near a float rounding boundary that the two
// could round differently (see rng_normal.cpp for the bound). Its output therefore equals
// normal() bit for bit, provided each approximate factor is within kMaxRelError of libm's for
// every one of the 2^32 inputs; `ete_bench_rng --verify-exhaustive` checks exactly that.
#pragma once

#include <cmath>
#include <cstdint>

namespace ete::rng_detail {

// sqrt(-2 log u1) with u1 = (w0 + 1) / 2^32 in (0, 1], so the log is finite.
inline double radius(uint32_t w0) {
    double u1 = (double(w0) + 1.0) / 4294967296.0;
    return std::sqrt(-2.0 * std::log(u1));
}

// cos(2 pi u2) with u2 = w1 / 2^32 in [0, 1).
inline double cos_angle(uint32_t w1) {
    double u2 = double(w1) / 4294967296.0;
    return std::cos(6.283185307179586 * u2);
}

// The definition of CounterRng::normal (53-bit doubles keep the tails accurate).
inline float normal_from_words(uint32_t w0, uint32_t w1) {
    return float(radius(w0) * cos_angle(w1));
}

// The largest relative difference between an approximate factor and libm's that keeps the
// recompute rule of rng_normal.cpp exact.
inline constexpr double kMaxRelError = 0x1p-40;

// Whether normal_fill has the vector path in this build (AVX-512F and DQ).
bool has_vector_normal();

// The vector path's factors for n words: r[i] ~ radius(w0[i]), c[i] ~ cos_angle(w1[i]). Only in
// a build where has_vector_normal(); otherwise ETE_ASSERT.
void approx_factors(const uint32_t* w0, const uint32_t* w1, double* r, double* c, int64_t n);

}  // namespace ete::rng_detail
