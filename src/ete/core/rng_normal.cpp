// ete/core/rng_normal.cpp — CounterRng::normal_fill: normal() for a run of counters, fast.
//
// Per element, normal() costs a Philox block (~3 ns) and libm's log and cos in double (~35 ns,
// cos most of it). The AVX-512 path runs Philox on 8 counters at a time and evaluates both
// Box-Muller factors with fdlibm's polynomials in 8 double lanes; OpenMP splits long runs into
// fixed blocks. Every element depends only on its counter, so the output does not depend on the
// thread count, the block size or where a run starts.
//
// Why the vector path is bit-identical to normal() (rng_normal.h): let d_s = fl(r_s c_s) be
// normal()'s double product and d_a = fl(r_a c_a) ours, with |r_a - r_s| <= e |r_s| and
// |c_a - c_s| <= e |c_s|, e = kMaxRelError (checked for all 2^32 inputs of each factor). With U the
// ulp of d_a, |d_a| < 2^53 U, so |d_s - d_a| <= (2e + e^2)(1 + 3e) 2^53 U + 1.5 U < 2^15 U. float()
// drops d_a's low 29 mantissa bits; it rounds up or down depending only on whether they are above
// or below 2^28 (the boundaries in neighbouring binades are farther away). A lane whose low bits
// lie within kRedoUlps of 2^28, or whose product is tiny (zero: w0 = 2^32 - 1), is recomputed with
// libm (about 1 lane in 4096); every other lane rounds as d_s does. The float product with
// `scale` is then the same IEEE operation on both paths.
#include <algorithm>

#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__FMA__)
#define ETE_RNG_AVX512 1
#include <immintrin.h>
#endif

#include "ete/core/error.h"
#include "ete/core/rng.h"
#include "ete/core/rng_normal.h"

namespace ete {
namespace {

constexpr int64_t kFillBlock = 1 << 14;                     // elements per OpenMP task
[[maybe_unused]] constexpr int64_t kParallelMin = 1 << 17;  // below: one thread (read by omp)
constexpr int64_t kRedoUlps = int64_t(1) << 16;  // distance from a float boundary, in d_a ulps
// The bound of the file comment, with a factor 2 to spare.
constexpr double kE = rng_detail::kMaxRelError;
static_assert((2 * kE + kE * kE) * (1 + 3 * kE) * 0x1p53 + 1.5 < 0x1p15 && 0x1p15 * 2 <= kRedoUlps,
              "kMaxRelError too loose for kRedoUlps");

#if ETE_RNG_AVX512

// Only intrinsics that take every input explicitly (maskz with all lanes set): GCC 12 flags the
// ones built on _mm512_undefined_*() as maybe-uninitialized under -Werror.
constexpr __mmask8 kAll = 0xFF;

struct PhiloxKeys {
    __m512i k0[10], k1[10];  // the round keys, zero-extended into 64-bit lanes
    __m512i s0, s1;          // counter words 2 and 3: the stream id
};

PhiloxKeys philox_keys(uint64_t seed, uint64_t stream) {
    PhiloxKeys k;
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u) {
        k.k0[r] = _mm512_set1_epi64(int64_t(k0));
        k.k1[r] = _mm512_set1_epi64(int64_t(k1));
    }
    k.s0 = _mm512_set1_epi64(int64_t(uint32_t(stream)));
    k.s1 = _mm512_set1_epi64(int64_t(stream >> 32));
    return k;
}

// philox4x32 (rng.cpp) on counters {idx, stream} in 8 lanes of 64 bits, returning words 0 and 1.
// mul_epu32 reads only the low 32 bits of each lane, so the high halves may carry garbage between
// rounds; the outputs are masked.
inline void philox8(const PhiloxKeys& k, __m512i idx, __m512i& w0, __m512i& w1) {
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
    __m512i c0 = idx, c1 = _mm512_maskz_srli_epi64(kAll, idx, 32), c2 = k.s0, c3 = k.s1;
    for (int r = 0; r < 10; ++r) {
        __m512i p0 = _mm512_maskz_mul_epu32(kAll, c0, m0),
                p1 = _mm512_maskz_mul_epu32(kAll, c2, m1);
        c0 = _mm512_ternarylogic_epi64(_mm512_maskz_srli_epi64(kAll, p1, 32), c1, k.k0[r],
                                       0x96);  // a^b^c
        c1 = p1;
        c2 = _mm512_ternarylogic_epi64(_mm512_maskz_srli_epi64(kAll, p0, 32), c3, k.k1[r], 0x96);
        c3 = p0;
    }
    const __m512i lo = _mm512_set1_epi64(0xFFFFFFFF);
    w0 = _mm512_and_si512(c0, lo);
    w1 = _mm512_and_si512(c1, lo);
}

inline __m512d fma(__m512d a, __m512d b, double c) {
    return _mm512_fmadd_pd(a, b, _mm512_set1_pd(c));
}

// log(u) for normal u > 0: fdlibm's e_log.c. u = 2^k m with m in (sqrt(2)/2, sqrt(2)], f = m - 1
// (exact), s = f / (2 + f), log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)).
inline __m512d log8(__m512d u) {
    const __m512i bits = _mm512_castpd_si512(u);
    __m512i k = _mm512_sub_epi64(_mm512_maskz_srli_epi64(kAll, bits, 52), _mm512_set1_epi64(1023));
    __m512d m = _mm512_castsi512_pd(
        _mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi64(0x000FFFFFFFFFFFFF)),
                        _mm512_set1_epi64(0x3FF0000000000000)));
    const __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(1.4142135623730951), _CMP_GT_OQ);
    m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
    k = _mm512_mask_add_epi64(k, big, k, _mm512_set1_epi64(1));
    const __m512d dk = _mm512_cvtepi64_pd(k);
    const __m512d f = _mm512_sub_pd(m, _mm512_set1_pd(1.0));
    const __m512d hfsq = _mm512_mul_pd(_mm512_set1_pd(0.5), _mm512_mul_pd(f, f));
    const __m512d s = _mm512_div_pd(f, _mm512_add_pd(_mm512_set1_pd(2.0), f));
    const __m512d z = _mm512_mul_pd(s, s), w = _mm512_mul_pd(z, z);
    __m512d t1 = fma(w, _mm512_set1_pd(1.531383769920937332e-01), 2.222219843214978396e-01);
    t1 = _mm512_mul_pd(w, fma(w, t1, 3.999999999940941908e-01));
    __m512d t2 = fma(w, _mm512_set1_pd(1.479819860511658591e-01), 1.818357216161805012e-01);
    t2 = fma(w, t2, 2.857142874366239149e-01);
    t2 = _mm512_mul_pd(z, fma(w, t2, 6.666666666666735130e-01));
    const __m512d R = _mm512_add_pd(t1, t2);
    const __m512d ln2_hi = _mm512_set1_pd(6.93147180369123816490e-01);  // dk * ln2_hi is exact
    const __m512d ln2_lo = _mm512_set1_pd(1.90821492927058770002e-10);
    __m512d inner = _mm512_fmadd_pd(s, _mm512_add_pd(hfsq, R), _mm512_mul_pd(dk, ln2_lo));
    inner = _mm512_sub_pd(_mm512_sub_pd(hfsq, inner), f);
    return _mm512_fmsub_pd(dk, ln2_hi, inner);
}

// cos(x) for x in [0, 2 pi): y = x - q pi/2 with fdlibm's three-part pi/2 (the first product is
// exact and x - q pio2_1 is exact by Sterbenz), then fdlibm's k_sin.c / k_cos.c polynomials on
// |y| <~ pi/4 and the quadrant's sign and swap.
inline __m512d cos8(__m512d x) {
    const __m512d q =
        _mm512_maskz_roundscale_pd(kAll, _mm512_mul_pd(x, _mm512_set1_pd(0.63661977236758134)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d y = _mm512_fnmadd_pd(q, _mm512_set1_pd(1.57079632673412561417e+00), x);
    y = _mm512_fnmadd_pd(q, _mm512_set1_pd(6.07710050630396597660e-11), y);
    y = _mm512_fnmadd_pd(q, _mm512_set1_pd(2.02226624871116645580e-21), y);
    const __m512d z = _mm512_mul_pd(y, y);

    __m512d sp = fma(z, _mm512_set1_pd(1.58969099521155010221e-10), -2.50507602534068634195e-08);
    sp = fma(z, sp, 2.75573137070700676789e-06);
    sp = fma(z, sp, -1.98412698298579493134e-04);
    sp = fma(z, sp, 8.33333333332248946124e-03);
    sp = fma(z, sp, -1.66666666666666324348e-01);
    const __m512d sin_y = _mm512_fmadd_pd(_mm512_mul_pd(y, z), sp, y);

    __m512d cp = fma(z, _mm512_set1_pd(-1.13596475577881948265e-11), 2.08757232129817482790e-09);
    cp = fma(z, cp, -2.75573143513906633035e-07);
    cp = fma(z, cp, 2.48015872894767294178e-05);
    cp = fma(z, cp, -1.38888888888741095749e-03);
    cp = fma(z, cp, 4.16666666666666019037e-02);
    // 1 - z/2 + z^2 cp, as k_cos.c: w = 1 - hz and the rounding error of w added back.
    const __m512d one = _mm512_set1_pd(1.0), hz = _mm512_mul_pd(_mm512_set1_pd(0.5), z);
    const __m512d w = _mm512_sub_pd(one, hz);
    const __m512d tail =
        _mm512_fmadd_pd(_mm512_mul_pd(z, z), cp, _mm512_sub_pd(_mm512_sub_pd(one, w), hz));
    const __m512d cos_y = _mm512_add_pd(w, tail);

    // Quadrant q (0..4): cos, -sin, -cos, sin, cos.
    const __m512i qi = _mm512_cvtpd_epi64(q);
    const __mmask8 use_sin = _mm512_test_epi64_mask(qi, _mm512_set1_epi64(1));
    const __mmask8 negate =
        _mm512_test_epi64_mask(_mm512_add_epi64(qi, _mm512_set1_epi64(1)), _mm512_set1_epi64(2));
    const __m512i r = _mm512_castpd_si512(_mm512_mask_blend_pd(use_sin, cos_y, sin_y));
    return _mm512_castsi512_pd(
        _mm512_mask_xor_epi64(r, negate, r, _mm512_set1_epi64(int64_t(0x8000000000000000ull))));
}

// The two factors exactly as rng_detail::radius / cos_angle form their arguments: (w0 + 1) / 2^32
// and w1 / 2^32 are exact, and 2 pi u2 is the same rounded product.
inline __m512d radius8(__m512i w0) {
    const __m512d u1 = _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepi64_pd(w0), _mm512_set1_pd(1.0)),
                                     _mm512_set1_pd(0x1p-32));
    return _mm512_maskz_sqrt_pd(kAll, _mm512_mul_pd(_mm512_set1_pd(-2.0), log8(u1)));
}

inline __m512d cos_angle8(__m512i w1) {
    const __m512d u2 = _mm512_mul_pd(_mm512_cvtepi64_pd(w1), _mm512_set1_pd(0x1p-32));
    return cos8(_mm512_mul_pd(_mm512_set1_pd(6.283185307179586), u2));
}

// Lanes whose float rounding the approximation cannot decide (file comment).
inline __mmask8 redo_mask(__m512d d) {
    const __m512i low = _mm512_and_si512(_mm512_castpd_si512(d), _mm512_set1_epi64((1 << 29) - 1));
    const __m512i dist =
        _mm512_maskz_abs_epi64(kAll, _mm512_sub_epi64(low, _mm512_set1_epi64(1 << 28)));
    return _mm512_cmple_epi64_mask(dist, _mm512_set1_epi64(kRedoUlps)) |
           _mm512_cmp_pd_mask(_mm512_abs_pd(d), _mm512_set1_pd(0x1p-100), _CMP_LT_OQ);
}

void fill_range(const PhiloxKeys& keys, float* out, uint64_t first, int64_t n, float scale) {
    const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 live = n - i >= 8 ? __mmask8(0xFF) : __mmask8((1u << (n - i)) - 1);
        __m512i w0, w1;  // counters wrap mod 2^64, as uint64_t index arithmetic does
        philox8(keys, _mm512_add_epi64(_mm512_set1_epi64(int64_t(first + uint64_t(i))), iota), w0,
                w1);
        const __m512d d = _mm512_mul_pd(radius8(w0), cos_angle8(w1));
        _mm256_mask_storeu_ps(out + i, live, _mm256_mul_ps(_mm512_maskz_cvtpd_ps(kAll, d), vscale));
        if (__mmask8 redo = redo_mask(d) & live) {
            alignas(64) uint64_t a[8], b[8];
            _mm512_store_si512(a, w0);
            _mm512_store_si512(b, w1);
            for (int l = 0; l < 8; ++l)
                if (redo >> l & 1)
                    out[i + l] =
                        scale * rng_detail::normal_from_words(uint32_t(a[l]), uint32_t(b[l]));
        }
    }
}

#endif  // ETE_RNG_AVX512

}  // namespace

void CounterRng::normal_fill(float* out, uint64_t first, int64_t n, float scale) const {
    ETE_ASSERT(n >= 0);
#if ETE_RNG_AVX512
    const PhiloxKeys keys = philox_keys(seed_, stream_);
#endif
    const int64_t blocks = (n + kFillBlock - 1) / kFillBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i0 = b * kFillBlock, len = std::min(kFillBlock, n - i0);
#if ETE_RNG_AVX512
        fill_range(keys, out + i0, first + uint64_t(i0), len, scale);
#else
        for (int64_t k = i0; k < i0 + len; ++k) out[k] = scale * normal(first + uint64_t(k));
#endif
    }
}

namespace rng_detail {

bool has_vector_normal() {
#if ETE_RNG_AVX512
    return true;
#else
    return false;
#endif
}

void approx_factors(const uint32_t* w0, const uint32_t* w1, double* r, double* c, int64_t n) {
    ETE_ASSERT(has_vector_normal());
#if ETE_RNG_AVX512
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t m = std::min<int64_t>(8, n - i);
        alignas(64) uint64_t a[8] = {}, b[8] = {};
        alignas(64) double ra[8], ca[8];
        for (int64_t l = 0; l < m; ++l) a[l] = w0[i + l], b[l] = w1[i + l];
        _mm512_store_pd(ra, radius8(_mm512_load_si512(a)));
        _mm512_store_pd(ca, cos_angle8(_mm512_load_si512(b)));
        for (int64_t l = 0; l < m; ++l) r[i + l] = ra[l], c[i + l] = ca[l];
    }
#else
    (void)w0, (void)w1, (void)r, (void)c, (void)n;  // portable builds: never called (asserted)
#endif
}

}  // namespace rng_detail
}  // namespace ete
