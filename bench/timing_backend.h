// bench/timing_backend.h — a Backend decorator that times every kernel call by phase.
//
// The train benchmark builds the model on a TimingBackend wrapping the CPU backend, so one run
// gives both the step time and where it goes (GEMMs by role, attention, norms, ...). The cost is
// one extra virtual call and two clock reads per kernel call: a few hundred per step, well under
// 0.1% of a step of the bench model.
#pragma once

#include <array>
#include <chrono>
#include <string>

#include "ete/backend/backend.h"

namespace ete::bench {

enum class Phase {
    GemmFwd,       // y = x·Wᵀ (gemm NT), including the LM head logits
    GemmDx,        // d_x = d_y·W (gemm NN)
    GemmDw,        // d_W += d_yᵀ·x (gemm TN)
    AttnFwd,       // attention_forward
    AttnBwd,       // attention_backward
    Rope,          // rope forward + backward
    Norm,          // rmsnorm / layernorm forward + backward
    Activation,    // swiglu / gelu forward + backward
    CrossEntropy,  // softmax cross-entropy (+ its gradient)
    Embedding,     // token / position embedding forward + backward
    Elementwise,   // bias, add_inplace
    Clip,          // sum_squares + scale (global-norm clipping)
    Optimizer,     // adamw_step
    kCount
};
constexpr int kPhaseCount = int(Phase::kCount);

const char* phase_name(Phase p);

struct PhaseStats {
    double seconds = 0;
    double flops = 0;  // GEMM phases only: 2·M·N·K per call
    long calls = 0;
};

class TimingBackend final : public Backend {
  public:
    explicit TimingBackend(Backend& inner) : inner_(inner) {}

    void reset() { stats_ = {}; }
    const PhaseStats& stats(Phase p) const { return stats_[size_t(p)]; }

    std::string name() const override { return inner_.name(); }
    void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) override;
    void bias_forward(float* y, const float* b, int N, int C, int ldy) override;
    void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) override;
    void embedding_forward(float* out, const int32_t* ids, const float* table, int N,
                           int C) override;
    void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N,
                            int C) override;
    void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start, int B, int T,
                               int C) override;
    void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start, int B,
                                int T, int C) override;
    void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                         float eps) override;
    void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x,
                          const float* w, const float* rstd, int N, int C) override;
    void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                           const float* b, int N, int C, float eps) override;
    void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out, const float* x,
                            const float* w, const float* mean, const float* rstd, int N,
                            int C) override;
    void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) override;
    void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) override;
    void attention_forward(float* out, float* lse, const float* qkv, AttnDims d,
                           float scale) override;
    void attention_backward(float* d_qkv, const float* d_out, const float* out, const float* lse,
                            const float* qkv, AttnDims d, float scale) override;
    void swiglu_forward(float* out, const float* gate_up, int N, int F) override;
    void swiglu_backward(float* d_gate_up, const float* d_out, const float* gate_up, int N,
                         int F) override;
    void gelu_forward(float* out, const float* x, int64_t n) override;
    void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) override;
    void add_inplace(float* x, const float* y, int64_t n) override;
    void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                        int V, float d_scale) override;
    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                               int V) override;
    void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float bc1, float bc2) override;
    double sum_squares(const float* x, int64_t n) override;
    void scale(float* x, float s, int64_t n) override;

  private:
    // Runs f() and charges its wall time (and flops) to phase p.
    template <class F>
    void timed(Phase p, double flops, F&& f) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        PhaseStats& s = stats_[size_t(p)];
        s.seconds += dt.count();
        s.flops += flops;
        ++s.calls;
    }

    Backend& inner_;
    std::array<PhaseStats, kPhaseCount> stats_{};
};

}  // namespace ete::bench
