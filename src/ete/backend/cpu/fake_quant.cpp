// ete/backend/cpu/fake_quant.cpp — the QAT ops (backend.h, core/fake_quant.h): block min/max over
// finite elements, quantization parameters, fake quantization with its packed straight-through
// mask (AVX-512 where built for it: simd16.h), the three in one pass over each block
// (fake_quant_own_range), and the mask's backward. Rows run in parallel (the mask pads each row to
// whole bytes); each element goes through the same scalar function as the reference, so results are
// identical.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/simd16.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which a parallel region costs more
constexpr int64_t kChunk = 256;            // elements per inner loop (a multiple of 8)

// The range of the finite elements among in[0, n) (+inf, -inf when there are none).
template <typename X>
void block_range(const X* in, int64_t n, float* lo, float* hi) {
    // 16 running lanes, written so that they vectorise: a non-finite value (v - v is NaN for inf
    // and NaN) becomes +inf for the min and -inf for the max.
    constexpr float inf = std::numeric_limits<float>::infinity();
    float l[16], h[16];
    for (int k = 0; k < 16; ++k) l[k] = inf, h[k] = -inf;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
#pragma omp simd
        for (int k = 0; k < 16; ++k) {
            const float v = load(in[j + k]);
            const bool finite = v - v == 0.0f;
            const float vl = finite ? v : inf, vh = finite ? v : -inf;
            l[k] = vl < l[k] ? vl : l[k];
            h[k] = vh > h[k] ? vh : h[k];
        }
    }
    for (; j < n; ++j) {
        const float v = load(in[j]);
        if (v - v != 0.0f) continue;
        l[0] = std::min(l[0], v);
        h[0] = std::max(h[0], v);
    }
    float ml = inf, mh = -inf;
    for (int k = 0; k < 16; ++k) ml = std::min(ml, l[k]), mh = std::max(mh, h[k]);
    *lo = ml;
    *hi = mh;
}

// quant_params of a block's range, an empty one (lo > hi: no finite element) taken as [0, 0].
void range_params(float lo, float hi, const QuantGrid& g, float* s, float* z) {
    const bool empty = !(lo <= hi);
    ete::quant_params(empty ? 0.0f : lo, empty ? 0.0f : hi, g, s, z);
}

template <typename X>
void min_max_rows(float* lo, float* hi, const X* x, int64_t ld, int64_t rows, int64_t cols,
                  int64_t group) {
    const int64_t per_row = cols / group;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < per_row; ++b)
            block_range(x + r * ld + b * group, group, &lo[r * per_row + b], &hi[r * per_row + b]);
}

#if defined(ETE_SIMD16)
// fake_quant_value on 16 lanes: the same operations in the same order (the product rounded once,
// nearbyint in the current rounding mode, a NaN failing every comparison), the mask bits straight
// from the comparisons; bits (if any) from bit 0 of *bits on, lanes past n left 0.
template <typename Y, typename X>
void fake_quant_span16(Y* y, const X* x, int64_t n, float s, float inv_s, float z, float qmin,
                       float qmax, uint8_t* bits) {
    const __m512 vs = _mm512_set1_ps(s), vinv = _mm512_set1_ps(inv_s), vz = _mm512_set1_ps(z);
    const __m512 lo = _mm512_set1_ps(qmin), hi = _mm512_set1_ps(qmax);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = simd::first_lanes(n - j);
        __m512 q =
            _mm512_maskz_roundscale_ps(simd::kAll16, _mm512_mul_ps(simd::load16(x + j, k), vinv),
                                       _MM_FROUND_CUR_DIRECTION | _MM_FROUND_NO_EXC);
        q = _mm512_add_ps(q, vz);
        const __mmask16 in =
            _mm512_mask_cmp_ps_mask(k, q, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(q, hi, _CMP_LE_OQ);
        q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, lo, _CMP_LT_OQ), lo);
        q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, hi, _CMP_GT_OQ), hi);
        simd::store16(y + j, _mm512_mul_ps(_mm512_sub_ps(q, vz), vs), k);
        if (!bits) continue;
        bits[j / 8] = uint8_t(in);
        if (n - j > 8) bits[j / 8 + 1] = uint8_t(in >> 8);
    }
}
#endif

// One block of n <= kChunk elements: y, and the mask bits from bit 0 of *bits on (n % 8 == 0 or
// the row's last block).
template <typename Y, typename X>
void fake_quant_span(Y* y, const X* x, int64_t n, float s, float z, const QuantGrid& g,
                     uint8_t* bits) {
    const float inv_s = 1.0f / s, qmin = float(g.qmin), qmax = float(g.qmax);
#if defined(ETE_SIMD16)
    if constexpr (simd::kHas16<Y> && simd::kHas16<X>) {
        fake_quant_span16(y, x, n, s, inv_s, z, qmin, qmax, bits);
        return;
    }
#endif
    alignas(64) uint8_t inside[kChunk];
    // fake_quant_value written out so that it vectorises (the same operations in the same order,
    // so the same results as the reference).
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
        float q = std::nearbyint(load(x[j]) * inv_s) + z;
        inside[j] = uint8_t(q >= qmin) & uint8_t(q <= qmax);
        q = q < qmin ? qmin : (q > qmax ? qmax : q);
        store(y[j], (q - z) * s);
    }
    if (!bits) return;
    // Eight 0/1 bytes to one byte of bits: the multiply moves byte k's bit to bit 56 + k with no
    // two terms on one position (so no carries), and the top byte is the answer.
    for (int64_t k = 0; k < n; k += 8) {
        uint64_t u = 0;
        std::memcpy(&u, inside + k, size_t(std::min<int64_t>(8, n - k)));
        bits[k / 8] = uint8_t((u * 0x0102040810204080ULL) >> 56);
    }
}

template <typename Y, typename X>
void fake_quant_rows(Y* y, int64_t ldy, const X* x, int64_t ldx, int64_t rows, int64_t cols,
                     const float* scale, const float* zero, bool per_tensor, int64_t group,
                     uint8_t* mask, const QuantGrid& g) {
    const int64_t per_row = cols / group, row_bytes = fake_quant_mask_row_bytes(cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        // The padding bits of a row's last byte are 0 (a span merging bits one by one keeps them).
        if (mask && cols % 8 != 0) mask[r * row_bytes + row_bytes - 1] = 0;
        // Spans never cross a block, and start on a multiple of 8 within the row unless a block
        // does: then the bits go through a row-sized staging run of whole bytes.
        for (int64_t c0 = 0; c0 < cols;) {
            const int64_t b = c0 / group, block_end = (b + 1) * group;
            const int64_t n = std::min({kChunk, block_end - c0, cols - c0});
            const int64_t k = per_tensor ? 0 : r * per_row + b;
            uint8_t* bits = mask ? mask + r * row_bytes + c0 / 8 : nullptr;
            if (bits && (c0 % 8 != 0 || (n % 8 != 0 && c0 + n != cols))) {
                // A span that does not start or end on a byte: merge its bits one by one.
                const float s = scale[k], inv_s = 1.0f / s;
                for (int64_t j = 0; j < n; ++j) {
                    bool in;
                    const int64_t c = c0 + j;
                    store(y[r * ldy + c], fake_quant_value(load(x[r * ldx + c]), s, inv_s, zero[k],
                                                           float(g.qmin), float(g.qmax), &in));
                    uint8_t& byte = mask[r * row_bytes + c / 8];
                    byte = uint8_t((byte & ~(1u << (c % 8))) | (unsigned(in) << (c % 8)));
                }
            } else {
                fake_quant_span(y + r * ldy + c0, x + r * ldx + c0, n, scale[k], zero[k], g, bits);
            }
            c0 += n;
        }
    }
}

// fake_quant_own_range: each block's range, scale and fake quantization while it is in cache.
template <typename Y, typename X>
void fake_quant_own_range_rows(Y* y, int64_t ldy, const X* x, int64_t ldx, int64_t rows,
                               int64_t cols, float* scale, int64_t group, const QuantGrid& g) {
    const int64_t per_row = cols / group;
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < per_row; ++b) {
            const X* in = x + r * ldx + b * group;
            Y* out = y + r * ldy + b * group;
            float lo, hi, s, z;
            block_range(in, group, &lo, &hi);
            range_params(lo, hi, g, &s, &z);
            scale[r * per_row + b] = s;
            for (int64_t c = 0; c < group; c += kChunk)
                fake_quant_span(out + c, in + c, std::min(kChunk, group - c), s, z, g, nullptr);
        }
}

template <typename D, typename G>
void fake_quant_backward_rows(D* dx, int64_t lddx, const G* dy, int64_t lddy, int64_t rows,
                              int64_t cols, const uint8_t* mask) {
    const int64_t row_bytes = fake_quant_mask_row_bytes(cols);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* bits = mask + r * row_bytes;
#if defined(ETE_SIMD16)
        if constexpr (simd::kHas16<D> && simd::kHas16<G>) {
            // 16 columns a step: their two mask bytes are the lanes to keep, the others zero.
            for (int64_t c = 0; c < cols; c += 16) {
                const __mmask16 k = simd::first_lanes(cols - c);
                uint16_t keep = bits[c / 8];
                if (cols - c > 8) keep = uint16_t(keep | bits[c / 8 + 1] << 8);
                const __m512 v = simd::load16(dy + r * lddy + c, __mmask16(keep & k));
                simd::store16(dx + r * lddx + c, v, k);
            }
            continue;
        }
#endif
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            const bool keep = (bits[c >> 3] >> (c & 7)) & 1;
            store(dx[r * lddx + c], keep ? load(dy[r * lddy + c]) : 0.0f);
        }
    }
}

// Each block's Σ d_y · slope in double, in column order (the reference's sums); rows in parallel.
template <typename X, typename G>
void scale_grad_rows(float* d_scale, const X* x, int64_t ldx, const G* dy, int64_t lddy,
                     int64_t rows, int64_t cols, const float* scale, const float* zero,
                     bool per_tensor, int64_t group, const QuantGrid& g) {
    const int64_t per_row = cols / group;
    const float qmin = float(g.qmin), qmax = float(g.qmax);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < per_row; ++b) {
            const int64_t k = per_tensor ? 0 : r * per_row + b;
            const float inv_s = 1.0f / scale[k], z = zero[k];
            double sum = 0;
            for (int64_t c = b * group; c < (b + 1) * group; ++c)
                sum += double(load(dy[r * lddy + c])) *
                       double(lsq_scale_slope(load(x[r * ldx + c]), inv_s, z, qmin, qmax));
            d_scale[r * per_row + b] = float(sum);
        }
}

}  // namespace

void CpuBackend::min_max(Vec lo, Vec hi, CMat x, int64_t group) {
    Scope h(*this, "min_max");
    check_min_max_args(lo, hi, x, group);
    lo = h(lo);
    hi = h(hi);
    x = h(x);
    with_float_type(x.dtype, "min_max", [&](auto tx) {
        using X = decltype(tx);
        min_max_rows(elems<float>(lo), elems<float>(hi), elems<X>(x), x.ld, x.rows, x.cols, group);
    });
}

void CpuBackend::quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) {
    Scope h(*this, "quant_params");
    check_quant_params_args(scale, zero, lo, hi);
    float* s = elems<float>(h(scale));
    float* z = elems<float>(h(zero));
    const float* l = elems<float>(h(lo));
    const float* u = elems<float>(h(hi));
    for (int64_t i = 0; i < lo.n; ++i) range_params(l[i], u[i], g, &s[i], &z[i]);
}

void CpuBackend::fake_quant(Mat y, CMat x, CVec scale, CVec zero, Vec mask, int64_t group,
                            const QuantGrid& g) {
    Scope h(*this, "fake_quant");
    check_fake_quant_args(y, x, scale, zero, mask, group, g);
    y = h(y);
    x = h(x);
    const float* s = elems<float>(h(scale));
    const float* z = elems<float>(h(zero));
    uint8_t* m = mask.empty() ? nullptr : static_cast<uint8_t*>(h(mask).data);
    with_float_type(y.dtype, "fake_quant", [&](auto ty) {
        with_float_type(x.dtype, "fake_quant", [&](auto tx) {
            using Y = decltype(ty);
            using X = decltype(tx);
            fake_quant_rows(elems<Y>(y), y.ld, elems<X>(x), x.ld, x.rows, x.cols, s, z,
                            scale.n == 1, group, m, g);
        });
    });
}

void CpuBackend::fake_quant_own_range(Mat y, CMat x, Vec scale, int64_t group, const QuantGrid& g) {
    Scope h(*this, "fake_quant_own_range");
    check_fake_quant_own_range_args(y, x, scale, group, g);
    y = h(y);
    x = h(x);
    float* s = elems<float>(h(scale));
    with_float_type(y.dtype, "fake_quant_own_range", [&](auto ty) {
        with_float_type(x.dtype, "fake_quant_own_range", [&](auto tx) {
            using Y = decltype(ty);
            using X = decltype(tx);
            fake_quant_own_range_rows(elems<Y>(y), y.ld, elems<X>(x), x.ld, x.rows, x.cols, s,
                                      group, g);
        });
    });
}

void CpuBackend::fake_quant_backward(Mat d_x, CMat d_y, CVec mask) {
    Scope h(*this, "fake_quant_backward");
    check_fake_quant_backward_args(d_x, d_y, mask);
    d_x = h(d_x);
    d_y = h(d_y);
    const auto* m = static_cast<const uint8_t*>(h(mask).data);
    with_float_type(d_x.dtype, "fake_quant_backward", [&](auto td) {
        with_float_type(d_y.dtype, "fake_quant_backward", [&](auto tg) {
            using D = decltype(td);
            using G = decltype(tg);
            fake_quant_backward_rows(elems<D>(d_x), d_x.ld, elems<G>(d_y), d_y.ld, d_y.rows,
                                     d_y.cols, m);
        });
    });
}

void CpuBackend::fake_quant_scale_grad(Vec d_scale, CMat x, CMat d_y, CVec scale, CVec zero,
                                       int64_t group, const QuantGrid& g) {
    Scope h(*this, "fake_quant_scale_grad");
    check_fake_quant_scale_grad_args(d_scale, x, d_y, scale, zero, group, g);
    x = h(x);
    d_y = h(d_y);
    float* out = elems<float>(h(d_scale));
    const float* s = elems<float>(h(scale));
    const float* z = elems<float>(h(zero));
    with_float_type(x.dtype, "fake_quant_scale_grad", [&](auto tx) {
        with_float_type(d_y.dtype, "fake_quant_scale_grad", [&](auto tg) {
            using X = decltype(tx);
            using G = decltype(tg);
            scale_grad_rows(out, elems<X>(x), x.ld, elems<G>(d_y), d_y.ld, x.rows, x.cols, s, z,
                            scale.n == 1, group, g);
        });
    });
}

}  // namespace ete::cpu
