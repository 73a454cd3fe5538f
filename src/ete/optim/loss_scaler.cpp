// ete/optim/loss_scaler.cpp
#include "ete/optim/loss_scaler.h"

#include <algorithm>

#include "ete/core/error.h"

namespace ete {

bool LossScaler::update(bool nonfinite) {
    if (!enabled_) return !nonfinite;
    if (nonfinite) {
        scale_ = std::max(kMinScale, scale_ * 0.5);
        good_ = 0;
        ++skipped_;
        return false;
    }
    if (++good_ >= window_) {
        scale_ *= 2.0;
        good_ = 0;
    }
    return true;
}

nlohmann::json LossScaler::state() const {
    return {{"scale", scale_}, {"good_steps", good_}, {"skipped", skipped_}, {"window", window_}};
}

void LossScaler::restore(const nlohmann::json& j) {
    try {
        scale_ = j.at("scale").get<double>();
        good_ = j.at("good_steps").get<int64_t>();
        skipped_ = j.at("skipped").get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
        throw_error(
            fmt::format("loss scaler state: expected scale, good_steps, skipped ({})", e.what()));
    }
    ETE_CHECK(scale_ >= kMinScale, "loss scaler state: scale {} is below {}", scale_, kMinScale);
}

}  // namespace ete
