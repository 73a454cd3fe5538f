// ete/nn/linear.cpp
#include "ete/nn/linear.h"

namespace ete {

void linear_forward(Backend& be, float* y, int ldy, const float* x, int ldx, const float* W,
                    const float* b, LinearShape s, float beta) {
    be.gemm(false, true, s.N, s.out, s.in, 1.0f, x, ldx, W, s.in, beta, y, ldy);
    if (b) be.bias_forward(y, b, s.N, s.out, ldy);
}

void linear_backward(Backend& be, float* d_x, const float* d_y, int ldy, const float* x, int ldx,
                     const float* W, float* d_W, float* d_b, LinearShape s) {
    if (d_x) be.gemm(false, false, s.N, s.in, s.out, 1.0f, d_y, ldy, W, s.in, 0.0f, d_x, s.in);
    be.gemm(true, false, s.out, s.in, s.N, 1.0f, d_y, ldy, x, ldx, 1.0f, d_W, s.in);
    if (d_b) be.bias_backward(d_b, d_y, s.N, s.out, ldy);
}

}  // namespace ete
