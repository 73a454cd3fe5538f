// ete/backend/cpu/int8.cpp — the integer model's ops (backend.h): activations quantized to I8/U8,
// int8 GEMMs on weights packed once (oneDNN's blocked layout, cpu/dnnl_gemm.h), and the
// dequantization of their I32 products. Each element goes through the same scalar arithmetic as
// the reference (core/fake_quant.h quantize_value; an exact integer bracket, then one fp32
// product), so results are identical.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/row_quantizer.h"
#include "ete/backend/cpu/simd_math.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which a parallel region costs more

// A prepared weight: the view, and its packed copies.
class CpuS8Weight final : public S8Weight {
  public:
    CpuS8Weight(CMat w, CMat host)
        : S8Weight(w),
          packed_(static_cast<const int8_t*>(host.data), host.rows, host.cols, host.ld),
          sums_(size_t(host.rows), 0) {
        const auto* q = static_cast<const int8_t*>(host.data);
        for (int64_t n = 0; n < host.rows; ++n)
            for (int64_t k = 0; k < host.cols; ++k) sums_[size_t(n)] += q[n * host.ld + k];
    }
    const PackedS8& packed() const { return packed_; }
    const int32_t* row_sums() const { return sums_.data(); }

  private:
    PackedS8 packed_;
    std::vector<int32_t> sums_;  // Σ_k w[n, k]: the zero point's correction without oneDNN's
};

template <typename Q, typename X>
void quantize_rows(Q* q, int64_t ldq, const X* x, int64_t ldx, int64_t rows, int64_t cols,
                   const float* scale, const float* zero, bool per_tensor, const QuantGrid& g) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const RowQuantizer<Q> quant(scale, zero, per_tensor, r, g);
        const X* in = x + r * ldx;
        Q* out = q + r * ldq;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) out[c] = quant(load(in[c]));
    }
}

// quantize_rows of swiglu_value (rounded to A, as swiglu_forward stores it), one pass.
template <typename Q, typename A>
void swiglu_quantize_rows(Q* q, int64_t ldq, const A* gu, int64_t ldg, int64_t rows, int64_t F,
                          const float* scale, const float* zero, bool per_tensor,
                          const QuantGrid& g) {
#pragma omp parallel for schedule(static) if (rows * F >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        const RowQuantizer<Q> quant(scale, zero, per_tensor, r, g);
        const A* gate = gu + r * ldg;
        const A* up = gate + F;
        Q* out = q + r * ldq;
#pragma omp simd
        for (int64_t c = 0; c < F; ++c) {
            A v;  // rounded as swiglu_forward stores it (a plain copy for F32)
            store(v, swiglu_value(load(gate[c]), load(up[c])));
            out[c] = quant(load(v));
        }
    }
}

template <typename Y>
void dequantize_rows(Y* y, int64_t ldy, const int32_t* acc, int64_t lda, int64_t rows, int64_t cols,
                     const float* a_scale, const float* a_zero, bool per_tensor, int a_offset,
                     const float* w_scale, const int32_t* w_sum, float beta) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t m = 0; m < rows; ++m) {
        const int64_t k = per_tensor ? 0 : m;
        // The bracket in wrapping uint32 arithmetic: its true value fits int32 (backend.h).
        const uint32_t zo = uint32_t(int32_t(a_zero[k]) + a_offset);
        const float as = a_scale[k];
        const int32_t* a = acc + m * lda;
        Y* out = y + m * ldy;
#pragma omp simd
        for (int64_t n = 0; n < cols; ++n) {
            const int32_t d = int32_t(uint32_t(a[n]) - zo * uint32_t(w_sum[n]));
            store(out[n],
                  dequant_value(d, as, w_scale[n], beta, beta == 0.0f ? 0.0f : load(out[n])));
        }
    }
}

}  // namespace

std::unique_ptr<S8Weight> CpuBackend::prepare_s8(CMat w) {
    ETE_CHECK(w.dtype == DType::I8, "prepare_s8: w is {}, expected I8", dtype_name(w.dtype));
    Scope h(*this, "prepare_s8");
    return std::make_unique<CpuS8Weight>(w, h(w));
}

void CpuBackend::gemm_s8(CMat a, const S8Weight& w, Mat c) {
    const auto* cw = dynamic_cast<const CpuS8Weight*>(&w);
    if (!cw) return gemm_s8(a, w.plain(), c);  // prepared by another backend: the plain view
    const CMat p = w.plain();
    ETE_CHECK(c.dtype == DType::I32 && a.cols == p.cols && c.rows == a.rows && c.cols == p.rows,
              "gemm_s8: a ({}, {}) {} times a prepared w ({}, {}) transposed does not give c "
              "({}, {}) {} (expected I8 or U8 times I8 into I32)",
              a.rows, a.cols, dtype_name(a.dtype), p.rows, p.cols, c.rows, c.cols,
              dtype_name(c.dtype));
    Scope h(*this, "gemm_s8", 2.0 * double(a.rows) * double(p.rows) * double(a.cols));
    a = h(a);
    c = h(c);
    dnnl_gemm_s8_packed(a.rows, a.data, a.ld, a.dtype, cw->packed(), static_cast<int32_t*>(c.data),
                        c.ld);
}

void CpuBackend::gemm_s8_scaled(CMat a, const S8Weight& w, Mat y, CVec scale, int32_t zero,
                                float beta) {
    check_gemm_s8_scaled_args(a, w.plain(), y, scale, zero, beta);
    const auto* cw = dynamic_cast<const CpuS8Weight*>(&w);
    ETE_CHECK(cw, "gemm_s8_scaled: the weight was prepared by another backend");
    Scope h(*this, "gemm_s8", 2.0 * double(a.rows) * double(y.cols) * double(a.cols));
    a = h(a);
    y = h(y);
    const float* s = elems<float>(h(scale));
    auto* out = static_cast<float*>(y.data);
    if (dnnl_gemm_s8_scaled(a.rows, a.data, a.ld, a.dtype, cw->packed(), s, zero, beta, out, y.ld))
        return;
    // Without a fused kernel: the exact sums, then the bracket and its scale.
    thread_local std::vector<int32_t> acc;
    acc.resize(size_t(a.rows * y.cols));
    dnnl_gemm_s8_packed(a.rows, a.data, a.ld, a.dtype, cw->packed(), acc.data(), y.cols);
    const float one = 1.0f, z = float(zero);
    dequantize_rows(out, y.ld, acc.data(), y.cols, a.rows, y.cols, &one, &z, true, 0, s,
                    cw->row_sums(), beta);
}

void CpuBackend::quantize_s8(Mat q, CMat x, CVec scale, CVec zero, const QuantGrid& g) {
    Scope h(*this, "quantize_s8");
    check_quantize_s8_args(q, x, scale, zero, g);
    q = h(q);
    x = h(x);
    const float* s = elems<float>(h(scale));
    const float* z = elems<float>(h(zero));
    with_float_type(x.dtype, "quantize_s8", [&](auto tx) {
        with_s8_type(q.dtype, "quantize_s8", [&](auto tq) {
            using X = decltype(tx);
            using Q = decltype(tq);
            quantize_rows(static_cast<Q*>(q.data), q.ld, elems<X>(x), x.ld, x.rows, x.cols, s, z,
                          scale.n == 1, g);
        });
    });
}

void CpuBackend::swiglu_quantize(Mat q, CMat gate_up, CVec scale, CVec zero, const QuantGrid& g) {
    Scope h(*this, "swiglu_quantize");
    ETE_CHECK(gate_up.rows == q.rows && gate_up.cols == 2 * q.cols,
              "swiglu_quantize: gate_up ({}, {}) for q ({}, {})", gate_up.rows, gate_up.cols,
              q.rows, q.cols);
    check_quantize_s8_args(q, gate_up.col_slice(0, q.cols), scale, zero, g);
    q = h(q);
    gate_up = h(gate_up);
    const float* s = elems<float>(h(scale));
    const float* z = elems<float>(h(zero));
    with_float_type(gate_up.dtype, "swiglu_quantize", [&](auto ta) {
        with_s8_type(q.dtype, "swiglu_quantize", [&](auto tq) {
            using A = decltype(ta);
            using Q = decltype(tq);
            swiglu_quantize_rows(static_cast<Q*>(q.data), q.ld, elems<A>(gate_up), gate_up.ld,
                                 q.rows, q.cols, s, z, scale.n == 1, g);
        });
    });
}

void CpuBackend::dequantize_s32(Mat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                                CVec w_scale, CVec w_sum, float beta) {
    Scope h(*this, "dequantize_s32");
    check_dequantize_s32_args(y, acc, a_scale, a_zero, a_offset, w_scale, w_sum);
    y = h(y);
    acc = h(acc);
    const float* as = elems<float>(h(a_scale));
    const float* az = elems<float>(h(a_zero));
    const float* ws = elems<float>(h(w_scale));
    const auto* wsum = static_cast<const int32_t*>(h(w_sum).data);
    with_float_type(y.dtype, "dequantize_s32", [&](auto ty) {
        using Y = decltype(ty);
        dequantize_rows(elems<Y>(y), y.ld, static_cast<const int32_t*>(acc.data), acc.ld, acc.rows,
                        acc.cols, as, az, a_scale.n == 1, a_offset, ws, wsum, beta);
    });
}

}  // namespace ete::cpu
