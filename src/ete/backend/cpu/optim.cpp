// ete/backend/cpu/optim.cpp — PLACEHOLDER: forwards to the reference kernels until the optimized
// versions land (tracked in this session's work; must not ship as-is).
#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete::cpu {

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float wd, float bc1, float bc2) {
    ref::adamw_step(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
}
double sum_squares(const float* x, int64_t n) {
    double a = 0;
    for (int64_t i = 0; i < n; ++i) a += double(x[i]) * x[i];
    return a;
}
void scale(float* x, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace ete::cpu
