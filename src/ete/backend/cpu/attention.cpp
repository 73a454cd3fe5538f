// ete/backend/cpu/attention.cpp — PLACEHOLDER: forwards to the reference kernels until the
// optimized versions land (tracked in this session's work; must not ship as-is).
#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete::cpu {

void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) {
    ref::rope_apply(qkv, cos, sin, d, 1);
}
void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) {
    ref::rope_apply(d_qkv, cos, sin, d, -1);
}
void attention_forward(float* out, float* lse, const float* qkv, AttnDims d, float scale) {
    ref::attention_forward(out, lse, qkv, d, scale);
}
void attention_backward(float* d_qkv, const float* d_out, const float* out, const float* lse,
                        const float* qkv, AttnDims d, float scale) {
    ref::attention_backward(d_qkv, d_out, out, lse, qkv, d, scale);
}

}  // namespace ete::cpu
