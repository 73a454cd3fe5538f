// ete/nn/int8_linear.cpp
#include "ete/nn/int8_linear.h"

#include "ete/core/error.h"

namespace ete {

Mat Int8Scratch::grow(DeviceBuffer& b, DType t, int64_t rows, int64_t cols) {
    const size_t bytes = size_t(rows * cols) * dtype_size(t);
    if (b.bytes() < bytes) b = DeviceBuffer(be_, bytes);
    return {b.data(), t, rows, cols};
}

Mat Int8Scratch::xq(int64_t rows, int64_t cols) {
    return grow(xq_, DType::U8, rows, cols);
}

Mat Int8Scratch::acc(int64_t rows, int64_t cols) {
    return grow(acc_, DType::I32, rows, cols);
}

Vec Int8Scratch::row_f32(int k, int64_t rows) {
    ETE_ASSERT(k >= 0 && k < 4);
    const Mat m = grow(rows_[k], DType::F32, rows, 1);
    return {m.data, DType::F32, rows};
}

Int8Weight::Int8Weight(Backend& be, const std::vector<int8_t>& q, int64_t out, int64_t in,
                       const std::vector<float>& scale, int64_t group, const Int8Input& input,
                       Int8Scratch& scratch)
    : out_(out), in_(in), group_(group), input_(input), scratch_(scratch) {
    ETE_CHECK(group >= 1 && in % group == 0 && int64_t(q.size()) == out * in &&
                  int64_t(scale.size()) == out * (in / group),
              "int8 linear ({}, {}): {} integers and {} scales for groups of {} (expected {} and "
              "{})",
              out, in, q.size(), scale.size(), group, out * in,
              out * (in / std::max<int64_t>(1, group)));
    const int64_t groups = in / group;
    // Scales and integer row sums group-major, so each group's are one contiguous vector.
    std::vector<float> s(size_t(groups * out));
    std::vector<int32_t> sum(size_t(groups * out), 0);
    for (int64_t n = 0; n < out; ++n)
        for (int64_t g = 0; g < groups; ++g) {
            s[size_t(g * out + n)] = scale[size_t(n * groups + g)];
            int32_t t = 0;
            for (int64_t k = g * group; k < (g + 1) * group; ++k) t += q[size_t(n * in + k)];
            sum[size_t(g * out + n)] = t;
        }
    q_ = DeviceBuffer(be, q.size());
    be.upload(q_.data(), q.data(), q.size());
    scale_ = DeviceBuffer(be, s.size() * sizeof(float));
    be.upload(scale_.data(), s.data(), s.size() * sizeof(float));
    sum_ = DeviceBuffer(be, sum.size() * sizeof(int32_t));
    be.upload(sum_.data(), sum.data(), sum.size() * sizeof(int32_t));
    const float act[2] = {input.scale, input.zero};
    act_ = DeviceBuffer(be, sizeof(act));
    be.upload(act_.data(), act, sizeof(act));
    if (!input.per_token()) {  // the fused product's scales: s_x · s_w, rounded as dequantize's
        std::vector<float> xs(s.size());
        for (size_t i = 0; i < s.size(); ++i) xs[i] = input.scale * s[i];
        xscale_ = DeviceBuffer(be, xs.size() * sizeof(float));
        be.upload(xscale_.data(), xs.data(), xs.size() * sizeof(float));
    }
    const CMat w{q_.data(), DType::I8, out, in};
    for (int64_t g = 0; g < groups; ++g)
        packed_.push_back(be.prepare_s8(w.col_slice(g * group, group)));
}

CVec Int8Weight::input_scale() const {
    if (input_.per_token()) return {};
    return {act_.data(), DType::F32, 1};
}

CVec Int8Weight::input_zero() const {
    if (input_.per_token()) return {};
    return {static_cast<const float*>(act_.data()) + 1, DType::F32, 1};
}

size_t Int8Weight::bytes() const {
    return q_.bytes() + scale_.bytes() + sum_.bytes();
}

void Int8Weight::product(Backend& be, Mat y, CMat x, float beta) const {
    ETE_CHECK(x.cols == in_ && y.cols == out_ && y.rows == x.rows,
              "int8 linear ({}, {}): x ({}, {}) into y ({}, {})", out_, in_, x.rows, x.cols, y.rows,
              y.cols);
    const int64_t N = x.rows;
    CVec a_scale{act_.data(), DType::F32, 1};
    CVec a_zero{static_cast<float*>(act_.data()) + 1, DType::F32, 1};
    const bool quantized = x.dtype == DType::U8;
    ETE_CHECK(!quantized || !input_.per_token(),
              "int8 linear ({}, {}): a quantized input needs a static input scale", out_, in_);
    if (input_.per_token()) {  // each row its own parameters, as fake quantization computed them
        Vec lo = scratch_.row_f32(0, N), hi = scratch_.row_f32(1, N);
        Vec s = scratch_.row_f32(2, N), z = scratch_.row_f32(3, N);
        be.min_max(lo, hi, x, x.cols);
        be.quant_params(s, z, lo, hi, input_.grid);
        a_scale = s;
        a_zero = z;
    }
    CMat xq = x;
    if (!quantized) {
        const Mat q = scratch_.xq(N, in_);
        be.quantize_s8(q, x, a_scale, a_zero, input_.grid);
        xq = q;
    }
    const int64_t groups = in_ / group_;
    if (!input_.per_token() && y.dtype == DType::F32) {  // one fused pass per group
        const int32_t zero = int32_t(input_.zero) + 128;
        for (int64_t g = 0; g < groups; ++g) {
            const CVec s{static_cast<float*>(xscale_.data()) + g * out_, DType::F32, out_};
            be.gemm_s8_scaled(xq.col_slice(g * group_, group_), *packed_[size_t(g)], y, s, zero,
                              g == 0 ? beta : 1.0f);
        }
        return;
    }
    const Mat acc = scratch_.acc(N, out_);
    for (int64_t g = 0; g < groups; ++g) {
        be.gemm_s8(xq.col_slice(g * group_, group_), *packed_[size_t(g)], acc);
        const CVec ws{static_cast<float*>(scale_.data()) + g * out_, DType::F32, out_};
        const CVec sum{static_cast<int32_t*>(sum_.data()) + g * out_, DType::I32, out_};
        be.dequantize_s32(y, acc, a_scale, a_zero, 128, ws, sum, g == 0 ? beta : 1.0f);
    }
}

}  // namespace ete
