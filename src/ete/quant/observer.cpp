// ete/quant/observer.cpp
#include "ete/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}

ObserverKind observer_kind_from_name(const std::string& name, const std::string& key) {
    if (name == "minmax") return ObserverKind::MinMax;
    if (name == "moving_average") return ObserverKind::MovingAverage;
    throw_error(fmt::format("{} = '{}': expected minmax or moving_average", key, name));
}

Observer::Observer(int64_t channels, ObserverKind kind, float averaging_constant)
    : lo_(size_t(channels), kInf),
      hi_(size_t(channels), -kInf),
      kind_(kind),
      c_(averaging_constant) {
    ETE_CHECK(channels >= 1, "observer: {} channels, expected at least 1", channels);
    ETE_CHECK(averaging_constant > 0 && averaging_constant <= 1,
              "observer: averaging constant {}, expected in (0, 1]", averaging_constant);
}

void Observer::batch_range(const float* block_lo, const float* block_hi, int64_t blocks,
                           std::vector<float>* lo, std::vector<float>* hi) const {
    const int64_t ch = channels();
    ETE_CHECK(blocks >= ch && blocks % ch == 0,
              "observer: {} blocks for {} channels (expected a multiple)", blocks, ch);
    const int64_t run = blocks / ch;
    lo->assign(size_t(ch), kInf);
    hi->assign(size_t(ch), -kInf);
    for (int64_t b = 0; b < blocks; ++b) {
        float& l = (*lo)[size_t(b / run)];
        float& h = (*hi)[size_t(b / run)];
        l = std::min(l, block_lo[b]);
        h = std::max(h, block_hi[b]);
    }
}

void Observer::fold(const std::vector<float>& lo, const std::vector<float>& hi) {
    ETE_CHECK(lo.size() == lo_.size() && hi.size() == hi_.size(),
              "observer: a batch range of {} channels for {}", lo.size(), lo_.size());
    for (size_t i = 0; i < lo_.size(); ++i) {
        if (!(lo[i] <= hi[i])) continue;  // no finite value in this channel's batch
        if (kind_ == ObserverKind::MinMax || !(lo_[i] <= hi_[i])) {
            lo_[i] = std::min(lo_[i], lo[i]);
            hi_[i] = std::max(hi_[i], hi[i]);
        } else {
            // Rounded products (no fma): PyTorch's separate sub, mul and add.
            lo_[i] = lo_[i] + fp32_rounded(c_ * (lo[i] - lo_[i]));
            hi_[i] = hi_[i] + fp32_rounded(c_ * (hi[i] - hi_[i]));
        }
        observed_ = true;
    }
}

void Observer::observe(const float* block_lo, const float* block_hi, int64_t blocks) {
    std::vector<float> lo, hi;
    batch_range(block_lo, block_hi, blocks, &lo, &hi);
    fold(lo, hi);
}

void Observer::params(const QuantGrid& g, std::vector<float>* scale,
                      std::vector<float>* zero) const {
    scale->resize(lo_.size());
    zero->resize(lo_.size());
    for (size_t i = 0; i < lo_.size(); ++i) {
        const bool seen = lo_[i] <= hi_[i];
        quant_params(seen ? lo_[i] : 0.0f, seen ? hi_[i] : 0.0f, g, &(*scale)[i], &(*zero)[i]);
    }
}

std::vector<float> Observer::state() const {
    std::vector<float> s;
    s.reserve(1 + 2 * lo_.size());
    s.push_back(observed_ ? 1.0f : 0.0f);
    s.insert(s.end(), lo_.begin(), lo_.end());
    s.insert(s.end(), hi_.begin(), hi_.end());
    return s;
}

void Observer::restore(const std::vector<float>& state, const std::string& what) {
    ETE_CHECK(state.size() == 1 + 2 * lo_.size() && (state[0] == 0.0f || state[0] == 1.0f),
              "{}: observer state of {} values, expected {} (1 + 2 x {} channels)", what,
              state.size(), 1 + 2 * lo_.size(), lo_.size());
    const size_t n = lo_.size();
    if (state[0] == 1.0f)  // an observed range: finite, ordered, and of a size activations have
        for (size_t c = 0; c < n; ++c) {
            const float lo = state[1 + c], hi = state[1 + n + c];
            ETE_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi &&
                          std::fabs(lo) <= kMaxObservedRange && std::fabs(hi) <= kMaxObservedRange,
                      "{}: channel {} range [{}, {}]: expected finite lo <= hi within +-{}", what,
                      c, lo, hi, kMaxObservedRange);
        }
    observed_ = state[0] == 1.0f;
    std::copy(state.begin() + 1, state.begin() + 1 + long(n), lo_.begin());
    std::copy(state.begin() + 1 + long(n), state.end(), hi_.begin());
}

}  // namespace ete
