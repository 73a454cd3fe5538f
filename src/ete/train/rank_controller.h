// ete/train/rank_controller.h — dynamic LoRA rank (lora.dynamic_rank): when to change the rank of
// every adapter, decided identically on every rank from all-reduced statistics.
//
// The rule, checked once per window of `patience` optimizer steps:
//   ema_t = 0.9·ema_{t-1} + 0.1·loss_t (ema_1 = loss_1), loss the step's global mean loss;
//   ρ_t   = ‖∇B‖_F / ‖B‖_F over every adapter's B (the step's all-reduced, unclipped gradients;
//           each element counted once over the mesh), averaged over the window: how hard the
//           loss still pushes the adapters relative to their size;
//   improvement = (ema at the window's start − ema now) / ema at the window's start.
// At the end of a window (none in the first one, whose ρ reflects B's zero start):
//   grow   to min(r_max, 2r) when mean ρ > grow_threshold        (still far from a fit);
//   shrink to max(r_min, r/2) when improvement < shrink_threshold (the loss has plateaued);
// and nothing otherwise. Grow wins when both hold. The state (rank, ema, window) is data:
// checkpoints carry it, so a resume decides exactly as the uninterrupted run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ete {

struct RankRule {
    int r_min = 2, r_max = 16;
    int64_t patience = 50;
    double shrink_threshold = 0.002;
    double grow_threshold = 1.0;
};

struct RankChange {
    int from = 0, to = 0;
    std::string reason;  // "grow" or "shrink"
    double improvement = 0, rho = 0;
};

class RankController {
  public:
    RankController(RankRule rule, int rank);
    int rank() const { return rank_; }
    // After optimizer step `step` (1-based).
    std::optional<RankChange> observe(int64_t step, double loss, double rho);
    nlohmann::json state() const;
    void restore(const nlohmann::json& j);

  private:
    RankRule rule_;
    int rank_;
    double ema_ = 0, window_ema_ = 0, rho_sum_ = 0;
    int64_t steps_ = 0, window_start_ = 0, rho_n_ = 0, windows_ = 0;
};

}  // namespace ete
