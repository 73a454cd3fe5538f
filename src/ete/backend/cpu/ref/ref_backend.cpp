// ete/backend/cpu/ref/ref_backend.cpp — Backend over the scalar reference kernels (f32).
//
// The kernels trust doc_start; the Backend methods validate it first (an invalid one would make
// them read outside the tensors), as the CPU backend does.
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete {
namespace {

class RefBackend final : public Backend {
  public:
    std::string name() const override { return "ref"; }
    void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) override {
        ref::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    void bias_forward(float* y, const float* b, int N, int C, int ldy) override {
        ref::bias_forward(y, b, N, C, ldy);
    }
    void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) override {
        ref::bias_backward(d_b, d_y, N, C, ldy);
    }
    void embedding_forward(float* out, const int32_t* ids, const float* table, int N,
                           int C) override {
        ref::embedding_forward(out, ids, table, N, C);
    }
    void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N,
                            int C) override {
        ref::embedding_backward(d_table, d_out, ids, N, C);
    }
    void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start, int B, int T,
                               int C) override {
        check_doc_start(doc_start, B, T);
        ref::pos_embedding_forward(out, wpe, doc_start, B, T, C);
    }
    void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start, int B,
                                int T, int C) override {
        check_doc_start(doc_start, B, T);
        ref::pos_embedding_backward(d_wpe, d_out, doc_start, B, T, C);
    }
    void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                         float eps) override {
        ref::rmsnorm_forward(out, rstd, x, w, N, C, eps);
    }
    void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x,
                          const float* w, const float* rstd, int N, int C) override {
        ref::rmsnorm_backward(d_x, d_w, d_out, x, w, rstd, N, C);
    }
    void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                           const float* b, int N, int C, float eps) override {
        ref::layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
    }
    void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out, const float* x,
                            const float* w, const float* mean, const float* rstd, int N,
                            int C) override {
        ref::layernorm_backward(d_x, d_w, d_b, d_out, x, w, mean, rstd, N, C);
    }
    void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) override {
        check_doc_start(d.doc_start, d.B, d.T);
        ref::rope_apply(qkv, cos, sin, d, +1);
    }
    void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) override {
        check_doc_start(d.doc_start, d.B, d.T);
        ref::rope_apply(d_qkv, cos, sin, d, -1);
    }
    void attention_forward(float* out, float* lse, const float* qkv, AttnDims d,
                           float scale) override {
        check_doc_start(d.doc_start, d.B, d.T);
        ref::attention_forward(out, lse, qkv, d, scale);
    }
    void attention_backward(float* d_qkv, const float* d_out, const float* out, const float* lse,
                            const float* qkv, AttnDims d, float scale) override {
        check_doc_start(d.doc_start, d.B, d.T);
        ref::attention_backward(d_qkv, d_out, out, lse, qkv, d, scale);
    }
    void swiglu_forward(float* out, const float* gu, int N, int F) override {
        ref::swiglu_forward(out, gu, N, F);
    }
    void swiglu_backward(float* d_gu, const float* d_out, const float* gu, int N, int F) override {
        ref::swiglu_backward(d_gu, d_out, gu, N, F);
    }
    void gelu_forward(float* out, const float* x, int64_t n) override {
        ref::gelu_forward(out, x, n);
    }
    void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) override {
        ref::gelu_backward(d_x, d_out, x, n);
    }
    void add_inplace(float* x, const float* y, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    }
    void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                        int V, float d_scale) override {
        ref::cross_entropy_forward_backward(logits, losses, targets, N, V, d_scale);
    }
    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                               int V) override {
        ref::cross_entropy_forward(losses, logits, targets, N, V);
    }
    void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float wd, float bc1, float bc2) override {
        ref::adamw_step(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
    }
    double sum_squares(const float* x, int64_t n) override {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) acc += double(x[i]) * x[i];
        return acc;
    }
    void scale(float* x, float s, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() {
    return std::make_unique<RefBackend>();
}

}  // namespace ete
