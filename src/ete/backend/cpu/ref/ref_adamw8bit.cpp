// ete/backend/cpu/ref/ref_adamw8bit.cpp — the scalar reference of Backend::adamw8bit_step, in
// three plain passes over the whole tensor: dequantize both moments (core/dynamic_map.h's host
// reference), step every element as ref::adamw_step, requantize block by block. Compiled without
// floating-point contraction (src/ete/CMakeLists.txt), as the CPU kernel and the reference
// script's float32 NumPy: all three agree bit for bit.
#include <cmath>
#include <vector>

#include "ete/backend/cpu/ref/ref_kernels.h"
#include "ete/core/dynamic_map.h"

namespace ete::ref {

void adamw8bit_step(float* p, const float* g, uint8_t* mc, uint8_t* vc, float* ma, float* va,
                    int64_t n, int64_t block, const AdamWStep& s) {
    const float* sm = moment_map_signed().data();
    const float* um = bnb_dynamic_map_unsigned().data();
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
        const int64_t len = std::min(block, n - b0);
        dequantize_block(mc + b0, len, ma[b], sm, m.data() + b0);
        dequantize_block(vc + b0, len, va[b], um, v.data() + b0);
    }
    const float step_size = s.lr / s.bc1, bc2_sqrt = std::sqrt(s.bc2);
    for (int64_t i = 0; i < n; ++i) {
        const float gi = s.grad_scale == 1.0f ? g[i] : g[i] * s.grad_scale;
        p[i] = p[i] * (1.0f - s.lr * s.weight_decay);
        m[size_t(i)] = m[size_t(i)] + (gi - m[size_t(i)]) * (1.0f - s.beta1);
        v[size_t(i)] = v[size_t(i)] * s.beta2 + (1.0f - s.beta2) * gi * gi;
        const float denom = std::sqrt(v[size_t(i)]) / bc2_sqrt + s.eps;
        p[i] = p[i] - step_size * (m[size_t(i)] / denom);
    }
    for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
        const int64_t len = std::min(block, n - b0);
        ma[b] = quantize_block(m.data() + b0, len, sm, true, mc + b0);
        va[b] = quantize_block(v.data() + b0, len, um, false, vc + b0);
    }
}

}  // namespace ete::ref
