// ete/train/rank_controller.cpp
#include "ete/train/rank_controller.h"

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"

namespace ete {

RankController::RankController(RankRule rule, int rank) : rule_(rule), rank_(rank) {
    ETE_ASSERT(rule_.r_min >= 1 && rule_.r_min <= rank && rank <= rule_.r_max &&
               rule_.patience > 0);
}

std::optional<RankChange> RankController::observe(int64_t step, double loss, double rho) {
    ema_ = steps_ == 0 ? loss : 0.9 * ema_ + 0.1 * loss;
    if (steps_ == 0) window_ema_ = ema_;
    steps_ = step;
    if (std::isfinite(rho)) {
        rho_sum_ += rho;
        ++rho_n_;
    }
    if (step - window_start_ < rule_.patience) return std::nullopt;
    const double improvement = (window_ema_ - ema_) / std::max(std::fabs(window_ema_), 1e-12);
    const double rho_mean = rho_n_ ? rho_sum_ / double(rho_n_) : 0.0;
    const bool first = windows_++ == 0;
    window_start_ = step;
    window_ema_ = ema_;
    rho_sum_ = 0;
    rho_n_ = 0;
    if (first) return std::nullopt;
    RankChange c{rank_, rank_, "", improvement, rho_mean};
    if (rho_mean > rule_.grow_threshold && rank_ < rule_.r_max) {
        c.to = std::min(rule_.r_max, 2 * rank_);
        c.reason = "grow";
    } else if (improvement < rule_.shrink_threshold && rank_ > rule_.r_min) {
        c.to = std::max(rule_.r_min, rank_ / 2);
        c.reason = "shrink";
    } else {
        return std::nullopt;
    }
    rank_ = c.to;
    return c;
}

nlohmann::json RankController::state() const {
    return {{"rank", rank_},       {"ema", ema_},        {"window_ema", window_ema_},
            {"rho_sum", rho_sum_}, {"steps", steps_},    {"window_start", window_start_},
            {"rho_n", rho_n_},     {"windows", windows_}};
}

void RankController::restore(const nlohmann::json& j) {
    rank_ = j.at("rank");
    ema_ = j.at("ema");
    window_ema_ = j.at("window_ema");
    rho_sum_ = j.at("rho_sum");
    steps_ = j.at("steps");
    window_start_ = j.at("window_start");
    rho_n_ = j.at("rho_n");
    windows_ = j.at("windows");
    ETE_CHECK(rank_ >= rule_.r_min && rank_ <= rule_.r_max,
              "checkpoint: LoRA rank {} outside lora.r_min..r_max = {}..{}", rank_, rule_.r_min,
              rule_.r_max);
}

}  // namespace ete
