// ete/backend/cuda/optim.cu — AdamW in torch.optim.AdamW's operation order (backend/cpu/ref), one
// rounding per operation (the _rn intrinsics: no fused multiply-add), so a step matches the CPU
// reference bit for bit; the 16-bit compute copy is written in the same pass.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

__global__ void k_adamw(float* p, const float* g, float* m, float* v, int64_t n, Adam a, void* pc,
                        Ft pct) {
    const float step_size = __fdiv_rn(a.lr, a.bc1), bc2_sqrt = __fsqrt_rn(a.bc2);
    const float decay = __fsub_rn(1.0f, __fmul_rn(a.lr, a.weight_decay));
    const float one_b1 = __fsub_rn(1.0f, a.beta1), one_b2 = __fsub_rn(1.0f, a.beta2);
    ETE_GRID_STRIDE(i, n) {
        const float gi = a.grad_scale == 1.0f ? g[i] : __fmul_rn(g[i], a.grad_scale);
        float pi = __fmul_rn(p[i], decay);
        const float mi = __fadd_rn(m[i], __fmul_rn(__fsub_rn(gi, m[i]), one_b1));
        const float vi = __fadd_rn(__fmul_rn(v[i], a.beta2), __fmul_rn(__fmul_rn(one_b2, gi), gi));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), a.eps);
        pi = __fsub_rn(pi, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (pc) store(pc, pct, i, pi);
    }
}

}  // namespace

void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, int64_t n, Adam a,
           void* p_compute, Ft compute_t) {
    if (n == 0) return;
    k_adamw<<<grid_for(n), kThreads, 0, s>>>(p, g, m, v, n, a, p_compute, compute_t);
}

}  // namespace ete::cuda
