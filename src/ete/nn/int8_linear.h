// ete/nn/int8_linear.h — the weight of an integer linear (the int8 model of `ete export int8` and
// `ete quantize --scheme w8a8|w4a8`; docs/qat.md): y = x·Wᵀ computed as
//
//   y[m, n] = s_x[m] · Σ_g s_w[n, g] · (Σ_{k ∈ g} (q_x[m, k] − z_x[m]) · q_w[n, k])
//
// with q_w the (out, in) weight integers on their symmetric grid (4-bit weights are held as int8
// values in −7..7), s_w one scale per output row and group of input columns (a per-channel weight
// is one group, a per-tensor one repeats its scale), and q_x, s_x, z_x the input's integers on the
// affine activation grid — one scale and zero point for the tensor (frozen from an observer) or
// per row (dynamic, per token). Each group is one int8 GEMM (backend gemm_s8 on a weight prepared
// once) whose exact I32 sums dequantize_s32 scales (adding the groups after the first); with a
// static input scale the two are one pass (gemm_s8_scaled: oneDNN's output scales and source
// zero point on CPU).
//
// These are the numbers fake quantization trained with: fq(x)·fq(W)ᵀ up to fp32 rounding (the
// integer sums are exact here, summed in fp32 there).
#pragma once

#include <memory>
#include <vector>

#include "ete/backend/backend.h"

namespace ete {

// How an integer linear's input is quantized.
struct Int8Input {
    QuantGrid grid = QuantGrid::of(8, QParamRule::Affine);  // PerToken rule = dynamic
    float scale = 1.0f, zero = 0.0f;                        // the frozen parameters (static)
    bool per_token() const { return grid.rule == QParamRule::PerToken; }
};

// Buffers one forward at a time shares across a model's integer linears (grown on demand).
class Int8Scratch {
  public:
    explicit Int8Scratch(Backend& be) : be_(be) {}
    Mat xq(int64_t rows, int64_t cols);   // U8
    Mat acc(int64_t rows, int64_t cols);  // I32
    Vec row_f32(int k, int64_t rows);     // k < 4: per-row ranges and parameters

  private:
    Mat grow(DeviceBuffer& b, DType t, int64_t rows, int64_t cols);
    Backend& be_;
    DeviceBuffer xq_, acc_, rows_[4];
};

class Int8Weight {
  public:
    // q: (out, in) host integers; scale: host, out × (in / group) (row n's groups together);
    // group divides in (group = in: per channel).
    Int8Weight(Backend& be, const std::vector<int8_t>& q, int64_t out, int64_t in,
               const std::vector<float>& scale, int64_t group, const Int8Input& input,
               Int8Scratch& scratch);
    int64_t out() const { return out_; }
    int64_t in() const { return in_; }
    size_t bytes() const;  // the weight's backend memory (integers, scales, sums)

    // y (N, out) = x (N, in) · Wᵀ + beta · y. x U8: already this weight's quantized input
    // (q + 128, from its static scale and zero point: a fused producer, swiglu_quantize).
    void product(Backend& be, Mat y, CMat x, float beta) const;
    // A static input's frozen scale and zero point (F32, one each, backend memory) — what a
    // producer quantizing for this weight uses — or empty views for a per-token input.
    CVec input_scale() const;
    CVec input_zero() const;
    const Int8Input& input() const { return input_; }

  private:
    int64_t out_, in_, group_;
    Int8Input input_;
    Int8Scratch& scratch_;
    DeviceBuffer q_, scale_, sum_, act_;  // scale_ and sum_ group-major: (groups, out)
    DeviceBuffer xscale_;  // a static input's s_x · s_w, group-major (gemm_s8_scaled)
    std::vector<std::unique_ptr<S8Weight>> packed_;  // one per group: q's (out, group) block
};

}  // namespace ete
