// ete/backend/cpu/loss.cpp — PLACEHOLDER: forwards to the reference kernels until the optimized
// versions land (tracked in this session's work; must not ship as-is).
#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete::cpu {

void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                    int V, float d_scale) {
    ref::cross_entropy_forward_backward(logits, losses, targets, N, V, d_scale);
}
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                           int V) {
    ref::cross_entropy_forward(losses, logits, targets, N, V);
}

}  // namespace ete::cpu
