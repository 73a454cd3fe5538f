// ete/backend/cpu/elementwise.cpp — PLACEHOLDER: forwards to the reference kernels until the
// optimized versions land (tracked in this session's work; must not ship as-is).
#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete::cpu {

void bias_forward(float* y, const float* b, int N, int C, int ldy) {
    ref::bias_forward(y, b, N, C, ldy);
}
void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) {
    ref::bias_backward(d_b, d_y, N, C, ldy);
}
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C) {
    ref::embedding_forward(out, ids, table, N, C);
}
void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N, int C) {
    ref::embedding_backward(d_table, d_out, ids, N, C);
}
void pos_embedding_forward(float* out, const float* wpe, int B, int T, int C) {
    ref::pos_embedding_forward(out, wpe, B, T, C);
}
void pos_embedding_backward(float* d_wpe, const float* d_out, int B, int T, int C) {
    ref::pos_embedding_backward(d_wpe, d_out, B, T, C);
}
void swiglu_forward(float* out, const float* gu, int N, int F) {
    ref::swiglu_forward(out, gu, N, F);
}
void swiglu_backward(float* d_gu, const float* d_out, const float* gu, int N, int F) {
    ref::swiglu_backward(d_gu, d_out, gu, N, F);
}
void gelu_forward(float* out, const float* x, int64_t n) {
    ref::gelu_forward(out, x, n);
}
void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) {
    ref::gelu_backward(d_x, d_out, x, n);
}
void add_inplace(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace ete::cpu
