// ete/core/fake_quant.h — the integer grids of quantization-aware training (DESIGN.md §6) and the
// scalar arithmetic every backend's fake-quant kernels and the observers (quant/observer.h) share,
// so that a kernel and its reference agree bit for bit.
//
// Grids. b-bit symmetric: [-(2^(b-1) - 1), 2^(b-1) - 1] with zero point 0 (8-bit: -127..127,
// 4-bit: -7..7); b-bit affine: [-2^(b-1), 2^(b-1) - 1] with an integral zero point (-128..127).
//
// Fake quantization, as PyTorch's fake_quantize_per_{tensor,channel}_affine computes it:
//   q = nearbyint(x · inv_s) + z with inv_s = 1 / s in fp32 (ties to even), clamped to
//   [qmin, qmax];  y = (q − z) · s.
// The straight-through backward passes dy where the unclamped q lay inside [qmin, qmax] (PyTorch's
// cachemask: the test is on the rounded value, so an x within half a step beyond the grid still
// passes) and zeroes it elsewhere. A NaN x gives a NaN y and a zero mask bit (never a finite
// value that would hide it from the anomaly checks).
//
// Scales come from a range [lo, hi] of observed values (MinMaxObserver's calculate_qparams):
// lo' = min(lo, 0), hi' = max(hi, 0);
//   symmetric: s = max(-lo', hi') / ((qmax - qmin) / 2), z = 0;
//   affine:    s = (hi' - lo') / (qmax - qmin), z = clamp(qmin - round(lo' / s), qmin, qmax);
//   per token (torchao's choose_qparams_per_token_asymmetric): s as affine, and z from whichever
//   end has the smaller rounding error: qmin - lo'/s when (qmin + lo'/s) + (qmax + hi'/s) > 0,
//   else qmax - hi'/s, clamped and rounded;
// every s at least kMinScale (float32 epsilon), so a zero-range tensor never divides by zero.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ete {

// torch.finfo(torch.float32).eps: the smallest scale an observer gives.
inline constexpr float kMinScale = 1.1920928955078125e-07f;

enum class QParamRule : uint8_t {
    Symmetric,  // z = 0
    Affine,     // MinMaxObserver's zero point
    PerToken,   // torchao's per-token zero point (the smaller rounding error)
};

struct QuantGrid {
    int qmin = -127, qmax = 127;
    QParamRule rule = QParamRule::Symmetric;

    // The b-bit grid (2 <= bits <= 8) for a rule, as the file header gives it.
    static QuantGrid of(int bits, QParamRule rule) {
        const int half = 1 << (bits - 1);
        QuantGrid g;
        g.rule = rule;
        g.qmin = rule == QParamRule::Symmetric ? -(half - 1) : -half;
        g.qmax = half - 1;
        return g;
    }
};

// Scale and zero point of a range (the file header), in fp32 as PyTorch computes them.
inline void quant_params(float lo, float hi, const QuantGrid& g, float* scale, float* zero) {
    const float lo0 = std::min(lo, 0.0f), hi0 = std::max(hi, 0.0f);
    const float qmin = float(g.qmin), qmax = float(g.qmax);
    if (g.rule == QParamRule::Symmetric) {
        *scale = std::max(std::max(-lo0, hi0) / ((qmax - qmin) / 2), kMinScale);
        *zero = 0.0f;
        return;
    }
    const float s = std::max((hi0 - lo0) / (qmax - qmin), kMinScale);
    float z;
    if (g.rule == QParamRule::Affine) {
        z = qmin - std::nearbyint(lo0 / s);
    } else {
        const float dmin = lo0 / s, dmax = hi0 / s;
        z = (qmin + dmin) + (qmax + dmax) > 0 ? qmin - dmin : qmax - dmax;
    }
    *scale = s;
    *zero = std::nearbyint(std::clamp(z, qmin, qmax));
}

// One element's fake quantization; *inside = the STE mask bit. inv_s = 1.0f / s.
inline float fake_quant_value(float x, float s, float inv_s, float z, float qmin, float qmax,
                              bool* inside) {
    float q = std::nearbyint(x * inv_s) + z;
    *inside = q >= qmin && q <= qmax;
    q = q < qmin ? qmin : (q > qmax ? qmax : q);  // NaN stays NaN
    return (q - z) * s;
}

// LSQ's slope of fake_quant_value in its scale (Esser et al., "Learned Step Size Quantization"):
// y = (clamp(round(x / s) + z) - z) · s with round passed straight through, so ∂y/∂s is
// round(x / s) - x / s where the value lay inside the grid and the clamped end (q - z) outside.
// A NaN x gives NaN.
inline float lsq_scale_slope(float x, float inv_s, float z, float qmin, float qmax) {
    float q = std::nearbyint(x * inv_s) + z;
    const bool inside = q >= qmin && q <= qmax;
    q = q < qmin ? qmin : (q > qmax ? qmax : q);
    return inside ? (q - z) - x * inv_s : q - z;
}

// The integer an element quantizes to (quantize_s8, the integer model): the q of
// fake_quant_value, clamped; a NaN (which no integer can hold) gives the zero point, i.e. 0.
inline float quantize_value(float x, float inv_s, float z, float qmin, float qmax) {
    float q = std::nearbyint(x * inv_s) + z;
    q = q < qmin ? qmin : (q > qmax ? qmax : q);
    return q == q ? q : z;
}

// One element of dequantize_s32: the exact integer bracket scaled once, plus beta · y through
// one fused multiply-add (spelt out, so that no compiler contraction makes a kernel and its
// reference round differently).
inline float dequant_value(int32_t bracket, float a_scale, float w_scale, float beta, float y) {
    const float v = float(bracket) * (a_scale * w_scale);
    return beta == 0.0f ? v : std::fma(beta, y, v);
}

// The STE mask of a (rows, cols) operand: one bit per element, each row padded to whole bytes
// (so rows can be written in parallel); element (r, c) is bit c % 8 of byte r · row_bytes + c / 8.
inline int64_t fake_quant_mask_row_bytes(int64_t cols) {
    return (cols + 7) / 8;
}
inline int64_t fake_quant_mask_bytes(int64_t rows, int64_t cols) {
    return rows * fake_quant_mask_row_bytes(cols);
}

}  // namespace ete
