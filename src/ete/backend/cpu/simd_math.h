// ete/backend/cpu/simd_math.h — branch-free exp/sigmoid/tanh that vectorise inside
// `#pragma omp simd`.
//
// libm's expf and tanhf are scalar calls, which block vectorisation of the softmax, SwiGLU, GELU
// and soft-capping loops.
// These functions are written as straight-line float code (selects, fma, bit casts) so GCC turns
// a simd loop calling them into AVX-512/AVX2 code on any x86 target, and plain code elsewhere.
//
// Numerics of exp_fast: x = n*ln2 + r with |r| <= ln2/2 (Cody–Waite split of ln2), e^r by its
// degree-7 Taylor polynomial (truncation < 6e-9 relative), 2^n built from exponent bits. Measured
// max error 1.3 ulp over the normal range. Inputs below -87.3 return 0 (e^-87.3 is the smallest
// normal float); inputs above 88 are clamped to e^88 ≈ 1.65e38 so that 1/(1 + e) and e * s stay
// finite in the sigmoid forms below. NaN propagates.
//
// Numerics of tanh_fast: tanh|x| = m / (m + 2) with m = e^(2|x|) - 1, which never cancels: m by
// its Taylor polynomial below 2|x| = 2 (degree 16: truncation 2^17 / 17! · e² < 2e-9 relative)
// and as exp_fast - 1 above (e² / (e² - 1) <= 1.16 amplifies exp_fast's error). Its slope
// 1 - tanh² = 4 (m + 1) / (m + 2)² likewise, without the cancellation of 1 - t·t near |t| = 1.
// |x| is clamped to 40 first: tanh(40) rounds to 1 and the slope stays a normal float. Both are
// within 8 ulp of the correctly rounded values over the float range (tests/backend: SimdMath).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace ete::cpu {

constexpr float kExpMin = -87.3f;  // below: result flushed to 0
constexpr float kExpMax = 88.0f;   // above: clamped

[[gnu::always_inline]] inline float exp_fast(float x) {
    const float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the bits
    float xc = x < kExpMin ? kExpMin : x;
    xc = xc > kExpMax ? kExpMax : xc;
    float t = std::fma(xc, 1.44269504088896341f, kShift);
    float n = t - kShift;
    int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
    float r = std::fma(n, -0.693145751953125f, xc);  // ln2 high part: x - n*hi is exact
    r = std::fma(n, -1.428606765330187045e-06f, r);  // ln2 low part
    float p = 1.0f / 5040;
    p = std::fma(p, r, 1.0f / 720);
    p = std::fma(p, r, 1.0f / 120);
    p = std::fma(p, r, 1.0f / 24);
    p = std::fma(p, r, 1.0f / 6);
    p = std::fma(p, r, 0.5f);
    p = std::fma(p, r, 1.0f);
    p = std::fma(p, r, 1.0f);
    float two_n = std::bit_cast<float>((ni + 127) << 23);  // n in [-126, 127]: a normal float
    float y = p * two_n;
    return x < kExpMin ? 0.0f : y;
}

// 1 / (1 + e^-x). Relative error a few ulp; tends to 0 (not NaN) for very negative x.
[[gnu::always_inline]] inline float sigmoid_fast(float x) {
    return 1.0f / (1.0f + exp_fast(-x));
}

// SwiGLU's value silu(g) · u, the one expression swiglu_forward and swiglu_quantize share.
[[gnu::always_inline]] inline float swiglu_value(float g, float u) {
    return g * sigmoid_fast(g) * u;
}

// e^z - 1 for z in [0, 80] (tanh_fast's m; see the file header). The Taylor polynomial is
// written out (a loop, even a constant one, keeps GCC from vectorising the caller).
[[gnu::always_inline]] inline float expm1_fast(float z) {
    float p = 1.0f / 20922789888000.0f;  // 1 / 16!
    p = std::fma(p, z, 1.0f / 1307674368000.0f);
    p = std::fma(p, z, 1.0f / 87178291200.0f);
    p = std::fma(p, z, 1.0f / 6227020800.0f);
    p = std::fma(p, z, 1.0f / 479001600);
    p = std::fma(p, z, 1.0f / 39916800);
    p = std::fma(p, z, 1.0f / 3628800);
    p = std::fma(p, z, 1.0f / 362880);
    p = std::fma(p, z, 1.0f / 40320);
    p = std::fma(p, z, 1.0f / 5040);
    p = std::fma(p, z, 1.0f / 720);
    p = std::fma(p, z, 1.0f / 120);
    p = std::fma(p, z, 1.0f / 24);
    p = std::fma(p, z, 1.0f / 6);
    p = std::fma(p, z, 1.0f / 2);
    p = std::fma(p, z, 1.0f);
    return z < 2.0f ? p * z : exp_fast(z) - 1.0f;
}

// tanh(x) into t and its slope 1 - tanh(x)² (file header); NaN propagates.
[[gnu::always_inline]] inline void tanh_fast(float x, float& t, float& slope) {
    const float a = std::min(std::fabs(x), 40.0f);
    const float m = expm1_fast(2.0f * a);
    const float r = 1.0f / (m + 2.0f);
    t = std::copysign(m * r, x);
    slope = 4.0f * ((m + 1.0f) * r) * r;
}

// Soft-capping of n contiguous floats in place: x = cap · tanh(x / cap), and slope (when not null)
// = 1 - tanh², its derivative (Gemma's attention scores and final logits). Two loops so that
// each vectorises.
[[gnu::always_inline]] inline void softcap_row(float* x, float* slope, int n, float cap) {
    if (slope) {
#pragma omp simd
        for (int i = 0; i < n; ++i) {
            float t;
            tanh_fast(x[i] / cap, t, slope[i]);
            x[i] = cap * t;
        }
    } else {
#pragma omp simd
        for (int i = 0; i < n; ++i) {
            float t, s;
            tanh_fast(x[i] / cap, t, s);
            x[i] = cap * t;
        }
    }
}

}  // namespace ete::cpu
