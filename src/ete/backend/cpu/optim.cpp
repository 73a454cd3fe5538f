// ete/backend/cpu/optim.cpp — AdamW step, sum of squares (gradient norm) and scaling on the CPU.
//
// AdamW repeats ete::ref::adamw_step operation for operation (the order of torch.optim.AdamW), so
// results are bit-identical to the reference as GCC compiles it. GCC contracts a*b+c into fma by
// default in C++ (-ffp-contract=fast) on FMA targets; in the reference it fuses m + (g - m)(1-b1),
// v*b2 + ((1-b2) g) g (the first product) and p - step * (m / denom). The AVX-512 path spells
// those fmas out; the portable path is the reference's own source, contracted the same way.
// Vector sqrt and division are correctly rounded, as the scalar ones.
//
// sum_squares adds fixed blocks of kSumBlock elements (each in double) and then the block sums in
// block order: the value does not depend on thread count or timing, so gradient clipping is
// reproducible on any machine running this build.
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "ete/backend/cpu/cpu_kernels.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;
constexpr int64_t kSumBlock = 1 << 14;

constexpr int64_t kAdamBlock = 1 << 14;  // elements per parallel task

// The float constants of ete::ref::adamw_step, computed the same way.
struct AdamConsts {
    float step_size, bc2_sqrt, decay, one_m_b1, beta2, one_m_b2, eps;
};

#if defined(__AVX512F__) && defined(__FMA__)
// GCC will not vectorise std::sqrt under -fmath-errno, hence intrinsics. Masked tail: lanes past
// i1 compute on zeros and are not stored.
// (maskz_sqrt rather than sqrt: GCC 12 warns on the latter's _mm512_undefined_ps.)
void adamw_range(float* p, const float* g, float* m, float* v, int64_t i0, int64_t i1,
                 const AdamConsts& k) {
    const __m512 step = _mm512_set1_ps(k.step_size), bc2s = _mm512_set1_ps(k.bc2_sqrt);
    const __m512 decay = _mm512_set1_ps(k.decay), omb1 = _mm512_set1_ps(k.one_m_b1);
    const __m512 b2 = _mm512_set1_ps(k.beta2), omb2 = _mm512_set1_ps(k.one_m_b2);
    const __m512 eps = _mm512_set1_ps(k.eps);
    for (int64_t i = i0; i < i1; i += 16) {
        __mmask16 mask = i1 - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (i1 - i)) - 1);
        __m512 gi = _mm512_maskz_loadu_ps(mask, g + i);
        __m512 mi = _mm512_maskz_loadu_ps(mask, m + i);
        __m512 vi = _mm512_maskz_loadu_ps(mask, v + i);
        __m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, p + i), decay);
        mi = _mm512_fmadd_ps(_mm512_sub_ps(gi, mi), omb1, mi);
        vi = _mm512_fmadd_ps(vi, b2, _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(mask, vi), bc2s), eps);
        pi = _mm512_fnmadd_ps(step, _mm512_div_ps(mi, denom), pi);
        _mm512_mask_storeu_ps(p + i, mask, pi);
        _mm512_mask_storeu_ps(m + i, mask, mi);
        _mm512_mask_storeu_ps(v + i, mask, vi);
    }
}
#else
void adamw_range(float* p, const float* g, float* m, float* v, int64_t i0, int64_t i1,
                 const AdamConsts& k) {
    for (int64_t i = i0; i < i1; ++i) {  // same expressions as ete::ref::adamw_step
        p[i] = p[i] * k.decay;
        m[i] = m[i] + (g[i] - m[i]) * k.one_m_b1;
        v[i] = v[i] * k.beta2 + k.one_m_b2 * g[i] * g[i];
        float denom = std::sqrt(v[i]) / k.bc2_sqrt + k.eps;
        p[i] = p[i] - k.step_size * (m[i] / denom);
    }
}
#endif

double sum_squares_block(const float* x, int64_t n) {
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * x[i];
    return acc;
}

}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float wd, float bc1, float bc2) {
    AdamConsts k{lr / bc1, std::sqrt(bc2), 1.0f - lr * wd, 1.0f - beta1, beta2, 1.0f - beta2, eps};
    int64_t nblk = (n + kAdamBlock - 1) / kAdamBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t b = 0; b < nblk; ++b) {
        int64_t i0 = b * kAdamBlock, i1 = std::min(n, i0 + kAdamBlock);
        adamw_range(p, g, m, v, i0, i1, k);
    }
}

double sum_squares(const float* x, int64_t n) {
    int64_t nblk = (n + kSumBlock - 1) / kSumBlock;
    if (nblk <= 1) return sum_squares_block(x, n);
    std::vector<double> part(static_cast<size_t>(nblk));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t b = 0; b < nblk; ++b)
        part[size_t(b)] =
            sum_squares_block(x + b * kSumBlock, std::min(kSumBlock, n - b * kSumBlock));
    double acc = 0;
    for (double s : part) acc += s;
    return acc;
}

void scale(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(simd : static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace ete::cpu
