// ete/backend/cpu/cpu_backend.cpp — the optimized CPU Backend: forwards to ete::cpu kernels.
// Also check_doc_start (backend.h), the packed-rows validation every backend and the model share.
#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/core/error.h"

namespace ete {
namespace {

class CpuBackend final : public Backend {
  public:
    std::string name() const override { return "cpu"; }
    void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) override {
        cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    void bias_forward(float* y, const float* b, int N, int C, int ldy) override {
        cpu::bias_forward(y, b, N, C, ldy);
    }
    void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) override {
        cpu::bias_backward(d_b, d_y, N, C, ldy);
    }
    void embedding_forward(float* out, const int32_t* ids, const float* table, int N,
                           int C) override {
        cpu::embedding_forward(out, ids, table, N, C);
    }
    void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N,
                            int C) override {
        cpu::embedding_backward(d_table, d_out, ids, N, C);
    }
    void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start, int B, int T,
                               int C) override {
        cpu::pos_embedding_forward(out, wpe, doc_start, B, T, C);
    }
    void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start, int B,
                                int T, int C) override {
        cpu::pos_embedding_backward(d_wpe, d_out, doc_start, B, T, C);
    }
    void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                         float eps) override {
        cpu::rmsnorm_forward(out, rstd, x, w, N, C, eps);
    }
    void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x,
                          const float* w, const float* rstd, int N, int C) override {
        cpu::rmsnorm_backward(d_x, d_w, d_out, x, w, rstd, N, C);
    }
    void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                           const float* b, int N, int C, float eps) override {
        cpu::layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
    }
    void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out, const float* x,
                            const float* w, const float* mean, const float* rstd, int N,
                            int C) override {
        cpu::layernorm_backward(d_x, d_w, d_b, d_out, x, w, mean, rstd, N, C);
    }
    void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) override {
        cpu::rope_forward(qkv, cos, sin, d);
    }
    void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) override {
        cpu::rope_backward(d_qkv, cos, sin, d);
    }
    void attention_forward(float* out, float* lse, const float* qkv, AttnDims d,
                           float scale) override {
        cpu::attention_forward(out, lse, qkv, d, scale);
    }
    void attention_backward(float* d_qkv, const float* d_out, const float* out, const float* lse,
                            const float* qkv, AttnDims d, float scale) override {
        cpu::attention_backward(d_qkv, d_out, out, lse, qkv, d, scale);
    }
    void swiglu_forward(float* out, const float* gu, int N, int F) override {
        cpu::swiglu_forward(out, gu, N, F);
    }
    void swiglu_backward(float* d_gu, const float* d_out, const float* gu, int N, int F) override {
        cpu::swiglu_backward(d_gu, d_out, gu, N, F);
    }
    void gelu_forward(float* out, const float* x, int64_t n) override {
        cpu::gelu_forward(out, x, n);
    }
    void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) override {
        cpu::gelu_backward(d_x, d_out, x, n);
    }
    void add_inplace(float* x, const float* y, int64_t n) override { cpu::add_inplace(x, y, n); }
    void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                        int V, float d_scale) override {
        cpu::cross_entropy_forward_backward(logits, losses, targets, N, V, d_scale);
    }
    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                               int V) override {
        cpu::cross_entropy_forward(losses, logits, targets, N, V);
    }
    void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float wd, float bc1, float bc2) override {
        cpu::adamw_step(p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
    }
    double sum_squares(const float* x, int64_t n) override { return cpu::sum_squares(x, n); }
    void scale(float* x, float s, int64_t n) override { cpu::scale(x, s, n); }
};

}  // namespace

void check_doc_start(const int32_t* doc_start, int B, int T) {
    if (!doc_start) return;
    for (int b = 0; b < B; ++b) {
        const int32_t* s = doc_start + size_t(b) * T;
        ETE_CHECK(T == 0 || s[0] == 0,
                  "doc_start[row {}, position 0] = {}: expected 0 (a row starts a document)", b,
                  s[0]);
        for (int t = 1; t < T; ++t) {
            ETE_CHECK(s[t] == s[t - 1] || s[t] == t,
                      "doc_start[row {}, position {}] = {}: expected {} (the document of position "
                      "{}) or {} (a new document)",
                      b, t, s[t], s[t - 1], t - 1, t);
        }
    }
}

std::unique_ptr<Backend> make_cpu_backend() {
    return std::make_unique<CpuBackend>();
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
    if (name == "cpu") return make_cpu_backend();
    if (name == "ref") return make_ref_backend();
    if (name == "cuda") return make_cuda_backend();
    throw_error(fmt::format("backend '{}': expected one of cpu, ref, cuda", name));
}

}  // namespace ete
