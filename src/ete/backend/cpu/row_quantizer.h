// ete/backend/cpu/row_quantizer.h — the integer model's activation quantization of one row
// (core/fake_quant.h quantize_value), shared by the kernels that write integers: quantize_s8 and
// the fused producers (rmsnorm_quantize, swiglu_quantize), so they agree bit for bit.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ete/core/fake_quant.h"

namespace ete::cpu {

// quantize_value to the integer type Q (U8 holds q + 128) with one row's parameters.
template <typename Q>
struct RowQuantizer {
    float inv_s, z, qmin, qmax;
    RowQuantizer(const float* scale, const float* zero, bool per_tensor, int64_t r,
                 const QuantGrid& g)
        : inv_s(1.0f / scale[per_tensor ? 0 : r]),
          z(zero[per_tensor ? 0 : r]),
          qmin(float(g.qmin)),
          qmax(float(g.qmax)) {}
    [[gnu::always_inline]] Q operator()(float v) const {
        constexpr float offset = std::is_same_v<Q, uint8_t> ? 128.0f : 0.0f;
        return Q(int(quantize_value(v, inv_s, z, qmin, qmax) + offset));
    }
};

}  // namespace ete::cpu
