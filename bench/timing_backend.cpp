// bench/timing_backend.cpp — forwarding overrides of TimingBackend, each charged to its phase.
#include "timing_backend.h"

namespace ete::bench {

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::GemmFwd:
            return "gemm forward y = x*W^T";
        case Phase::GemmDx:
            return "gemm d_x = d_y*W";
        case Phase::GemmDw:
            return "gemm d_W += d_y^T*x";
        case Phase::AttnFwd:
            return "attention forward";
        case Phase::AttnBwd:
            return "attention backward";
        case Phase::Rope:
            return "rope";
        case Phase::Norm:
            return "norms";
        case Phase::Activation:
            return "swiglu/gelu";
        case Phase::CrossEntropy:
            return "cross-entropy";
        case Phase::Embedding:
            return "embedding";
        case Phase::Elementwise:
            return "bias/add";
        case Phase::Clip:
            return "clip (norm + scale)";
        case Phase::Optimizer:
            return "adamw";
        case Phase::kCount:
            break;
    }
    return "?";
}

void TimingBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                         const float* A, int lda, const float* B, int ldb, float beta, float* C,
                         int ldc) {
    // The model's three roles differ by transposes: NT forward, NN d_x, TN d_W.
    Phase p = trans_a ? Phase::GemmDw : trans_b ? Phase::GemmFwd : Phase::GemmDx;
    timed(p, 2.0 * M * N * K,
          [&] { inner_.gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}

void TimingBackend::bias_forward(float* y, const float* b, int N, int C, int ldy) {
    timed(Phase::Elementwise, 0, [&] { inner_.bias_forward(y, b, N, C, ldy); });
}

void TimingBackend::bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) {
    timed(Phase::Elementwise, 0, [&] { inner_.bias_backward(d_b, d_y, N, C, ldy); });
}

void TimingBackend::embedding_forward(float* out, const int32_t* ids, const float* table, int N,
                                      int C) {
    timed(Phase::Embedding, 0, [&] { inner_.embedding_forward(out, ids, table, N, C); });
}

void TimingBackend::embedding_backward(float* d_table, const float* d_out, const int32_t* ids,
                                       int N, int C) {
    timed(Phase::Embedding, 0, [&] { inner_.embedding_backward(d_table, d_out, ids, N, C); });
}

void TimingBackend::pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start,
                                          int B, int T, int C) {
    timed(Phase::Embedding, 0, [&] { inner_.pos_embedding_forward(out, wpe, doc_start, B, T, C); });
}

void TimingBackend::pos_embedding_backward(float* d_wpe, const float* d_out,
                                           const int32_t* doc_start, int B, int T, int C) {
    timed(Phase::Embedding, 0,
          [&] { inner_.pos_embedding_backward(d_wpe, d_out, doc_start, B, T, C); });
}

void TimingBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N,
                                    int C, float eps) {
    timed(Phase::Norm, 0, [&] { inner_.rmsnorm_forward(out, rstd, x, w, N, C, eps); });
}

void TimingBackend::rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x,
                                     const float* w, const float* rstd, int N, int C) {
    timed(Phase::Norm, 0, [&] { inner_.rmsnorm_backward(d_x, d_w, d_out, x, w, rstd, N, C); });
}

void TimingBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* x,
                                      const float* w, const float* b, int N, int C, float eps) {
    timed(Phase::Norm, 0, [&] { inner_.layernorm_forward(out, mean, rstd, x, w, b, N, C, eps); });
}

void TimingBackend::layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out,
                                       const float* x, const float* w, const float* mean,
                                       const float* rstd, int N, int C) {
    timed(Phase::Norm, 0,
          [&] { inner_.layernorm_backward(d_x, d_w, d_b, d_out, x, w, mean, rstd, N, C); });
}

void TimingBackend::rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) {
    timed(Phase::Rope, 0, [&] { inner_.rope_forward(qkv, cos, sin, d); });
}

void TimingBackend::rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) {
    timed(Phase::Rope, 0, [&] { inner_.rope_backward(d_qkv, cos, sin, d); });
}

void TimingBackend::attention_forward(float* out, float* lse, const float* qkv, AttnDims d,
                                      float scale) {
    timed(Phase::AttnFwd, 0, [&] { inner_.attention_forward(out, lse, qkv, d, scale); });
}

void TimingBackend::attention_backward(float* d_qkv, const float* d_out, const float* out,
                                       const float* lse, const float* qkv, AttnDims d,
                                       float scale) {
    timed(Phase::AttnBwd, 0,
          [&] { inner_.attention_backward(d_qkv, d_out, out, lse, qkv, d, scale); });
}

void TimingBackend::swiglu_forward(float* out, const float* gate_up, int N, int F) {
    timed(Phase::Activation, 0, [&] { inner_.swiglu_forward(out, gate_up, N, F); });
}

void TimingBackend::swiglu_backward(float* d_gate_up, const float* d_out, const float* gate_up,
                                    int N, int F) {
    timed(Phase::Activation, 0, [&] { inner_.swiglu_backward(d_gate_up, d_out, gate_up, N, F); });
}

void TimingBackend::gelu_forward(float* out, const float* x, int64_t n) {
    timed(Phase::Activation, 0, [&] { inner_.gelu_forward(out, x, n); });
}

void TimingBackend::gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) {
    timed(Phase::Activation, 0, [&] { inner_.gelu_backward(d_x, d_out, x, n); });
}

void TimingBackend::add_inplace(float* x, const float* y, int64_t n) {
    timed(Phase::Elementwise, 0, [&] { inner_.add_inplace(x, y, n); });
}

void TimingBackend::cross_entropy_forward_backward(float* logits, float* losses,
                                                   const int32_t* targets, int N, int V,
                                                   float d_scale) {
    timed(Phase::CrossEntropy, 0,
          [&] { inner_.cross_entropy_forward_backward(logits, losses, targets, N, V, d_scale); });
}

void TimingBackend::cross_entropy_forward(float* losses, const float* logits,
                                          const int32_t* targets, int N, int V) {
    timed(Phase::CrossEntropy, 0,
          [&] { inner_.cross_entropy_forward(losses, logits, targets, N, V); });
}

void TimingBackend::adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                               float beta1, float beta2, float eps, float weight_decay, float bc1,
                               float bc2) {
    timed(Phase::Optimizer, 0,
          [&] { inner_.adamw_step(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2); });
}

double TimingBackend::sum_squares(const float* x, int64_t n) {
    double r = 0;
    timed(Phase::Clip, 0, [&] { r = inner_.sum_squares(x, n); });
    return r;
}

void TimingBackend::scale(float* x, float s, int64_t n) {
    timed(Phase::Clip, 0, [&] { inner_.scale(x, s, n); });
}

}  // namespace ete::bench
