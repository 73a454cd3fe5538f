// ete/backend/cpu/optim.cpp — the AdamW step on the CPU.
//
// AdamW repeats ete::ref::adamw_step operation for operation (the order of torch.optim.AdamW), so
// results are bit-identical to the reference as GCC compiles it. GCC contracts a*b+c into fma by
// default in C++ (-ffp-contract=fast) on FMA targets; in the reference it fuses m + (g - m)(1-b1),
// v*b2 + ((1-b2) g) g (the first product) and p - step * (m / denom). The AVX-512 path spells
// those fmas out; the portable path is the reference's own source, contracted the same way.
// Vector sqrt and division are correctly rounded, as the scalar ones.
//
// With a 16-bit compute copy (mixed precision) each block rewrites its slice of the copy right
// after updating the fp32 master, while the values are still in cache: one pass over memory.
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512F__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

constexpr int64_t kAdamBlock = 1 << 14;  // elements per parallel task

// The float constants of ete::ref::adamw_step, computed the same way.
struct AdamConsts {
    float step_size, bc2_sqrt, decay, one_m_b1, beta2, one_m_b2, eps, grad_scale;
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
    const __m512 eps = _mm512_set1_ps(k.eps), gs = _mm512_set1_ps(k.grad_scale);
    const bool scaled = k.grad_scale != 1.0f;
    for (int64_t i = i0; i < i1; i += 16) {
        __mmask16 mask = i1 - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (i1 - i)) - 1);
        __m512 gi = _mm512_maskz_loadu_ps(mask, g + i);
        if (scaled) gi = _mm512_mul_ps(gi, gs);
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
        const float gi = k.grad_scale == 1.0f ? g[i] : g[i] * k.grad_scale;
        p[i] = p[i] * k.decay;
        m[i] = m[i] + (gi - m[i]) * k.one_m_b1;
        v[i] = v[i] * k.beta2 + k.one_m_b2 * gi * gi;
        float denom = std::sqrt(v[i]) / k.bc2_sqrt + k.eps;
        p[i] = p[i] - k.step_size * (m[i] / denom);
    }
}
#endif

template <typename C>
void write_copy(C* dst, const float* p, int64_t i0, int64_t i1) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) store(dst[i], p[i]);
}

}  // namespace

void CpuBackend::adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) {
    Scope h(*this, "adamw");
    const int64_t n = p.n;
    ETE_CHECK(g.n == n && m.n == n && v.n == n && (p_compute.empty() || p_compute.n == n),
              "adamw_step: p, g, m, v (and the compute copy) must have {} elements", n);
    ETE_CHECK(p.dtype == DType::F32 && g.dtype == DType::F32 && m.dtype == DType::F32 &&
                  v.dtype == DType::F32,
              "adamw_step: parameters, gradients and moments must be F32");
    p = h(p);
    g = h(g);
    m = h(m);
    v = h(v);
    p_compute = h(p_compute);
    float* pp = elems<float>(p);
    float *mp = elems<float>(m), *vp = elems<float>(v);
    const float* gp = elems<float>(g);
    AdamConsts k{s.lr / s.bc1,   std::sqrt(s.bc2), 1.0f - s.lr * s.weight_decay,
                 1.0f - s.beta1, s.beta2,          1.0f - s.beta2,
                 s.eps,          s.grad_scale};
    auto update = [&](auto copy) {
        using C = std::remove_pointer_t<decltype(copy)>;
        int64_t nblk = (n + kAdamBlock - 1) / kAdamBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
        for (int64_t b = 0; b < nblk; ++b) {
            int64_t i0 = b * kAdamBlock, i1 = std::min(n, i0 + kAdamBlock);
            adamw_range(pp, gp, mp, vp, i0, i1, k);
            if constexpr (!std::is_same_v<C, void>) write_copy(copy, pp, i0, i1);
        }
    };
    if (p_compute.empty()) return update(static_cast<void*>(nullptr));
    with_float_type(p_compute.dtype, "adamw_step", [&](auto t) {
        using C = decltype(t);
        update(elems<C>(p_compute));
    });
}

}  // namespace ete::cpu
