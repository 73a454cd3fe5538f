// ete/backend/cpu/optim8.cpp — the 8-bit AdamW step on the CPU (Backend::adamw8bit_step).
//
// Each block is one task (OpenMP over blocks): dequantize and step its elements in one loop
// (keeping the fresh fp32 moments in a block-sized scratch and their absmax), then requantize
// them through DynamicCoder (a bucket's two candidate codes and one comparison instead of a binary
// search with 8 unpredictable branches: the step's optimizer part ran ~40x AdamW's before). Where
// the build targets AVX-512 both loops run 16 lanes at a time, the maps and the coder's entries
// read by gathers (dynamic_code.h), and the first loop prefetches its parameter and gradient
// streams kPrefetch elements ahead (the gathers fill the core's window, so the hardware
// prefetcher alone left those loads waiting on memory). On Zen 5 the bench Llama's optimizer part
// went 155 -> 98 ms with the vector loops, 98 -> ~40 with one gather per code and the prefetch,
// against AdamW's ~24 ms the same day and ~300 ms for the scalar loop. The arithmetic is
// adamw_step's, element by element, and this file is compiled without floating-point contraction
// (src/ete/CMakeLists.txt): every product and sum rounds on its own, as in the reference script's
// float32 NumPy, so codes, absmax and parameters are bit-exact to its goldens on every CPU (and to
// the reference backend, ref/ref_adamw8bit.cpp).
#include <algorithm>
#include <cmath>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/dynamic_code.h"
#include "ete/backend/cpu/elem.h"
#include "ete/core/dynamic_map.h"

namespace ete::cpu {
namespace {

constexpr int64_t kMaxBlock = 4096;

struct Consts {
    float step_size, bc2_sqrt, decay, one_m_b1, beta2, one_m_b2, eps, grad_scale;
};

#if ETE_DYNAMIC_CODE_AVX512
constexpr int64_t kPrefetch = 512;  // 2 KiB ahead: 46 -> 38 ms for 32M elements on Zen 5

// The largest of the 16 lanes (none NaN).
float lanes_max(__m512 v) {
    alignas(64) float lane[16];
    _mm512_store_ps(lane, v);
    return *std::max_element(lane, lane + 16);
}

// The scalar step_block below, 16 lanes at a time (this file is compiled without contraction;
// vector sqrt and division are correctly rounded, as the scalar ones), the maps read by gathers,
// and the codes by lanes_code (dynamic_code.h). Masked tails: lanes past the block compute on
// zeros and are not stored or counted. max(x, acc) with the new value first keeps the accumulator
// where the value is NaN, as std::max(acc, x) does.
void step_block(float* p, const float* g, uint8_t* mc, uint8_t* vc, float* ma, float* va, int64_t b,
                int64_t i0, int64_t i1, const Consts& k, float* m_new, float* v_new) {
    const float* sm = moment_map_signed().data();
    const float* um = bnb_dynamic_map_unsigned().data();
    const __m512 m_abs = _mm512_set1_ps(ma[b]), v_abs = _mm512_set1_ps(va[b]);
    const __m512 step = _mm512_set1_ps(k.step_size), bc2s = _mm512_set1_ps(k.bc2_sqrt);
    const __m512 decay = _mm512_set1_ps(k.decay), omb1 = _mm512_set1_ps(k.one_m_b1);
    const __m512 b2 = _mm512_set1_ps(k.beta2), omb2 = _mm512_set1_ps(k.one_m_b2);
    const __m512 eps = _mm512_set1_ps(k.eps), gs = _mm512_set1_ps(k.grad_scale);
    const bool scaled = k.grad_scale != 1.0f;
    __m512 m_max = _mm512_setzero_ps(), v_max = _mm512_setzero_ps();
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 mask = tail_mask(i1 - i);
        _mm_prefetch(reinterpret_cast<const char*>(g + i + kPrefetch), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetch), _MM_HINT_T0);
        __m512 gi = _mm512_maskz_loadu_ps(mask, g + i);
        if (scaled) gi = _mm512_mul_ps(gi, gs);
        const __m512i mq = _mm512_maskz_cvtepu8_epi32(kAll, _mm_maskz_loadu_epi8(mask, mc + i));
        const __m512i vq = _mm512_maskz_cvtepu8_epi32(kAll, _mm_maskz_loadu_epi8(mask, vc + i));
        __m512 m = _mm512_mul_ps(gather(mq, sm), m_abs);
        __m512 v = _mm512_mul_ps(gather(vq, um), v_abs);
        __m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, p + i), decay);
        m = _mm512_add_ps(m, _mm512_mul_ps(_mm512_sub_ps(gi, m), omb1));
        v = _mm512_add_ps(_mm512_mul_ps(v, b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
        const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(mask, v), bc2s), eps);
        pi = _mm512_sub_ps(pi, _mm512_mul_ps(step, _mm512_div_ps(m, denom)));
        _mm512_mask_storeu_ps(p + i, mask, pi);
        _mm512_mask_storeu_ps(m_new + (i - i0), mask, m);
        _mm512_mask_storeu_ps(v_new + (i - i0), mask, v);
        m_max = _mm512_mask_max_ps(m_max, mask, _mm512_abs_ps(m), m_max);
        v_max = _mm512_mask_max_ps(v_max, mask, v, v_max);
    }
    const float m_top = lanes_max(m_max), v_top = lanes_max(v_max);
    ma[b] = m_top;
    va[b] = v_top;
    const DynamicCoder &m_coder = moment_coder_signed(), &v_coder = moment_coder_unsigned();
    const __m512i m_zero = _mm512_set1_epi32(m_coder.code(0.0f));
    const __m512i v_zero = _mm512_set1_epi32(v_coder.code(0.0f));
    const __m512 m_div = _mm512_set1_ps(m_top), v_div = _mm512_set1_ps(v_top);
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 mask = tail_mask(i1 - i);
        const __m512 m = _mm512_maskz_loadu_ps(mask, m_new + (i - i0));
        const __m512 v = _mm512_maskz_loadu_ps(mask, v_new + (i - i0));
        const __m512i mq = m_top == 0.0f ? m_zero : lanes_code(_mm512_div_ps(m, m_div), m_coder);
        const __m512i vq = v_top == 0.0f ? v_zero : lanes_code(_mm512_div_ps(v, v_div), v_coder);
        _mm512_mask_cvtepi32_storeu_epi8(mc + i, mask, mq);
        _mm512_mask_cvtepi32_storeu_epi8(vc + i, mask, vq);
    }
}
#else
// Block [i0, i1) of the operands; b its index. m_new, v_new: scratch of i1 - i0 floats.
void step_block(float* p, const float* g, uint8_t* mc, uint8_t* vc, float* ma, float* va, int64_t b,
                int64_t i0, int64_t i1, const Consts& k, float* m_new, float* v_new) {
    const float* sm = moment_map_signed().data();
    const float* um = bnb_dynamic_map_unsigned().data();
    const float m_abs = ma[b], v_abs = va[b];
    float m_max = 0.0f, v_max = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
        const float gi = k.grad_scale == 1.0f ? g[i] : g[i] * k.grad_scale;
        float m = sm[mc[i]] * m_abs, v = um[vc[i]] * v_abs;
        p[i] = p[i] * k.decay;
        m = m + (gi - m) * k.one_m_b1;
        v = v * k.beta2 + k.one_m_b2 * gi * gi;
        const float denom = std::sqrt(v) / k.bc2_sqrt + k.eps;
        p[i] = p[i] - k.step_size * (m / denom);
        m_new[i - i0] = m;
        v_new[i - i0] = v;
        m_max = std::max(m_max, std::fabs(m));
        v_max = std::max(v_max, v);
    }
    ma[b] = m_max;
    va[b] = v_max;
    const DynamicCoder &m_coder = moment_coder_signed(), &v_coder = moment_coder_unsigned();
    const uint8_t m_zero = m_coder.code(0.0f), v_zero = v_coder.code(0.0f);
    for (int64_t i = i0; i < i1; ++i) {
        mc[i] = m_max == 0.0f ? m_zero : m_coder.code(m_new[i - i0] / m_max);
        vc[i] = v_max == 0.0f ? v_zero : v_coder.code(v_new[i - i0] / v_max);
    }
}
#endif

}  // namespace

void CpuBackend::adamw8bit_step(Vec p, CVec g, Vec m_codes, Vec v_codes, Vec m_absmax, Vec v_absmax,
                                int64_t block, const AdamWStep& s, Vec p_compute) {
    Scope h(*this, "adamw8bit");
    const int64_t n = p.n, nb = block > 0 ? (n + block - 1) / block : 0;
    ETE_CHECK(block > 0 && block <= kMaxBlock, "adamw8bit_step: block {}: expected 1..{}", block,
              kMaxBlock);
    ETE_CHECK(g.n == n && m_codes.n == n && v_codes.n == n && m_absmax.n == nb &&
                  v_absmax.n == nb && (p_compute.empty() || p_compute.n == n),
              "adamw8bit_step: expected {} elements in p, g and the codes, {} absmax values, "
              "and the compute copy empty or of {}",
              n, nb, n);
    ETE_CHECK(p.dtype == DType::F32 && g.dtype == DType::F32 && m_codes.dtype == DType::U8 &&
                  v_codes.dtype == DType::U8 && m_absmax.dtype == DType::F32 &&
                  v_absmax.dtype == DType::F32,
              "adamw8bit_step: expected F32 parameters, gradients and absmax, U8 codes");
    p = h(p);
    g = h(g);
    m_codes = h(m_codes);
    v_codes = h(v_codes);
    m_absmax = h(m_absmax);
    v_absmax = h(v_absmax);
    p_compute = h(p_compute);
    const Consts k{s.lr / s.bc1,   std::sqrt(s.bc2), 1.0f - s.lr * s.weight_decay,
                   1.0f - s.beta1, s.beta2,          1.0f - s.beta2,
                   s.eps,          s.grad_scale};
    float* pp = elems<float>(p);
    const float* gp = elems<float>(g);
    auto* mc = static_cast<uint8_t*>(m_codes.data);
    auto* vc = static_cast<uint8_t*>(v_codes.data);
    float *ma = elems<float>(m_absmax), *va = elems<float>(v_absmax);
    auto update = [&](auto copy) {
        using C = std::remove_pointer_t<decltype(copy)>;
#pragma omp parallel if (n >= 1 << 15)
        {
            float m_new[kMaxBlock], v_new[kMaxBlock];
#pragma omp for schedule(static)
            for (int64_t b = 0; b < nb; ++b) {
                const int64_t i0 = b * block, i1 = std::min(n, i0 + block);
                step_block(pp, gp, mc, vc, ma, va, b, i0, i1, k, m_new, v_new);
                if constexpr (!std::is_same_v<C, void>)
                    for (int64_t i = i0; i < i1; ++i) store(copy[i], pp[i]);
            }
        }
    };
    if (p_compute.empty()) return update(static_cast<void*>(nullptr));
    with_float_type(p_compute.dtype, "adamw8bit_step", [&](auto t) {
        using C = decltype(t);
        update(elems<C>(p_compute));
    });
}

}  // namespace ete::cpu
