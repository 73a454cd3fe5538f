// ete/train/anomaly.cpp
#include "ete/train/anomaly.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"

namespace ete {

const char* anomaly_cause_name(AnomalyBit b) {
    switch (b) {
        case kNonFiniteLoss:
            return "nonfinite_loss";
        case kNonFiniteGrad:
            return "nonfinite_grad";
        case kLossSpike:
            return "loss_spike";
        case kOverflow:
            return "overflow";
        case kNonFiniteNorm:
            return "nonfinite_grad_norm";
    }
    return "unknown";
}

namespace {

const char* cause_words(AnomalyBit b) {
    switch (b) {
        case kNonFiniteLoss:
            return "non-finite loss";
        case kNonFiniteGrad:
            return "non-finite gradient";
        case kLossSpike:
            return "loss spike";
        case kOverflow:
            return "fp16 overflow";
        case kNonFiniteNorm:
            return "non-finite gradient norm";
    }
    return "unknown";
}

constexpr AnomalyBit kAllBits[] = {kNonFiniteLoss, kNonFiniteGrad, kNonFiniteNorm, kLossSpike,
                                   kOverflow};

}  // namespace

AnomalyVerdict combine_anomalies(const std::vector<uint32_t>& bits, double zscore) {
    AnomalyVerdict v;
    const bool element = std::any_of(bits.begin(), bits.end(), [](uint32_t b) {
        return (b & (kNonFiniteGrad | kOverflow)) != 0;
    });
    for (AnomalyBit b : kAllBits) {
        if (b == kNonFiniteNorm && element) continue;  // explained by the non-finite elements
        std::vector<int> ranks;
        for (size_t r = 0; r < bits.size(); ++r)
            if (bits[r] & b) ranks.push_back(int(r));
        if (ranks.empty()) continue;
        v.bits |= b;
        v.by_cause.emplace_back(b, std::move(ranks));
    }
    if (v.bits & kLossSpike) v.zscore = zscore;
    return v;
}

std::string AnomalyVerdict::describe() const {
    std::string out;
    for (const auto& [b, ranks] : by_cause) {
        if (!out.empty()) out += "; ";
        out += cause_words(b);
        if (b == kLossSpike) out += fmt::format(" (z = {:.1f})", zscore);
        out += fmt::format(" on rank {}", fmt::join(ranks, ", "));
    }
    return out;
}

nlohmann::json AnomalyVerdict::causes_json() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [b, ranks] : by_cause) j[anomaly_cause_name(b)] = ranks;
    return j;
}

std::optional<double> LossWindow::zscore(double loss) const {
    if (window_ <= 0 || losses_.size() < size_t(window_)) return std::nullopt;
    double mean = 0;
    for (double l : losses_) mean += l;
    mean /= double(losses_.size());
    double var = 0;
    for (double l : losses_) var += (l - mean) * (l - mean);
    const double sd =
        std::max({std::sqrt(var / double(losses_.size())), 1e-6 * std::fabs(mean), 1e-12});
    return (loss - mean) / sd;
}

void LossWindow::push(double loss) {
    if (window_ <= 0 || !std::isfinite(loss)) return;
    losses_.push_back(loss);
    while (losses_.size() > size_t(window_)) losses_.pop_front();
}

nlohmann::json LossWindow::state() const {
    return nlohmann::json(std::vector<double>(losses_.begin(), losses_.end()));
}

void LossWindow::restore(const nlohmann::json& j) {
    losses_.clear();
    for (const auto& x : j) push(x.get<double>());
}

void validate_anomaly(const AnomalyConfig& c) {
    ETE_CHECK(c.spike_zscore >= 0, "anomaly.spike_zscore = {}: expected >= 0 (0 = off)",
              c.spike_zscore);
    ETE_CHECK(c.window >= 2, "anomaly.window = {}: expected >= 2", c.window);
    ETE_CHECK(c.max_consecutive_skips >= 1, "anomaly.max_consecutive_skips = {}: expected >= 1",
              c.max_consecutive_skips);
    ETE_CHECK(c.on_repeated == "stop" || c.on_repeated == "rollback",
              "anomaly.on_repeated = '{}': expected stop or rollback", c.on_repeated);
    ETE_CHECK(c.max_rollbacks >= 0, "anomaly.max_rollbacks = {}: expected >= 0", c.max_rollbacks);
}

}  // namespace ete
