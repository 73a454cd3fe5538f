// ete/nn/linear.h — the linear layer, y = x·Wᵀ + b, with W stored (out, in) like HF nn.Linear.
//
// Row strides (ldx, ldy) let several linears share one fused output buffer (q|k|v, gate|up)
// without copies. Gradient rule: d_W, d_b accumulate; d_x is written (or added with
// accumulate_dx, for inputs on the residual stream).
#pragma once

#include "ete/backend/backend.h"

namespace ete {

struct LinearShape {
    int N;    // rows (B*T)
    int in;   // input features
    int out;  // output features
};

// y(N, out) [row stride ldy] = x(N, in) [ldx] · W(out, in)ᵀ + b; with beta = 1 adds into y.
void linear_forward(Backend& be, float* y, int ldy, const float* x, int ldx, const float* W,
                    const float* b, LinearShape s, float beta = 0.0f);

// d_x(N, in) = d_y · W (d_x row stride is s.in); d_W += d_yᵀ · x; d_b += Σ_rows d_y.
// d_x may be null (first layer input that needs no gradient).
void linear_backward(Backend& be, float* d_x, const float* d_y, int ldy, const float* x, int ldx,
                     const float* W, float* d_W, float* d_b, LinearShape s);

}  // namespace ete
