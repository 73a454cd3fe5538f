// bench/op_profile.h — where a training step's time goes: an OpProfiler (backend.h) that charges
// every backend op to a phase (GEMMs by role, attention, norms, ...).
//
// The train benchmark sets it on the CPU backend, whose ops report their own wall time (two clock
// reads per op, a few hundred per step: well under 0.1% of a step of the bench model).
#pragma once

#include <array>
#include <map>
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
    Elementwise,   // bias, add, copy, fill (residual copies, dtype conversions)
    Clip,          // sum_squares + scale (global-norm clipping)
    Optimizer,     // adamw_step
    kCount
};
constexpr int kPhaseCount = int(Phase::kCount);

const char* phase_name(Phase p);
Phase phase_of(const char* op);  // the phase an op name belongs to

struct PhaseStats {
    double seconds = 0;
    double flops = 0;  // GEMM phases only: 2·M·N·K per call
    long calls = 0;
};

class PhaseProfiler final : public OpProfiler {
  public:
    void record(const char* op, double seconds, double flops) override;
    void reset() {
        stats_ = {};
        by_op_.clear();
    }
    const PhaseStats& stats(Phase p) const { return stats_[size_t(p)]; }
    // The same by op name (ete_bench_train --ops).
    const std::map<std::string, PhaseStats>& by_op() const { return by_op_; }

  private:
    std::array<PhaseStats, kPhaseCount> stats_{};
    std::map<std::string, PhaseStats> by_op_;
};

}  // namespace ete::bench
