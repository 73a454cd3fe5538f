// ete/quant/observer.h — the observers of quantization-aware training (DESIGN.md §6): a running
// range [lo, hi] per tensor or per channel, from which the scales and zero points of the fake
// quantization come (core/fake_quant.h quant_params).
//
// A batch reaches an observer as block ranges (the backend's min_max over finite elements only,
// so a NaN or an inf never widens a range): `blocks` values, a multiple of the observer's
// channels, each run of blocks / channels consecutive ones folding into one channel (one channel:
// the whole tensor; rows channels over per-row blocks: per channel). The batch range is then
//   min/max:         lo = min(lo, batch lo), hi = max(hi, batch hi);
//   moving average:  the first batch sets the range, later ones move it by the averaging
//                    constant c: lo += c · (batch lo − lo), hi likewise (PyTorch's
//                    MovingAverage(PerChannel)MinMaxObserver);
// a channel whose batch had no finite value keeps its range. Under tensor parallelism the caller
// reduces a batch range over the tp group (min of lo, max of hi) between batch_range and fold, so
// every shard folds the same numbers and keeps one scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ete/core/fake_quant.h"

namespace ete {

enum class ObserverKind { MinMax, MovingAverage };

// "minmax" or "moving_average"; throws naming `key` otherwise.
ObserverKind observer_kind_from_name(const std::string& name, const std::string& key);

class Observer {
  public:
    Observer() = default;
    Observer(int64_t channels, ObserverKind kind, float averaging_constant = 0.01f);

    int64_t channels() const { return int64_t(lo_.size()); }
    bool observed() const { return observed_; }  // any batch folded in yet
    const std::vector<float>& lo() const { return lo_; }
    const std::vector<float>& hi() const { return hi_; }

    // The batch's per-channel range from its block ranges (see the file header): lo and hi get
    // channels() values (+inf / -inf where a channel saw no finite value).
    void batch_range(const float* block_lo, const float* block_hi, int64_t blocks,
                     std::vector<float>* lo, std::vector<float>* hi) const;
    // Folds a per-channel batch range in (min/max or moving average).
    void fold(const std::vector<float>& lo, const std::vector<float>& hi);
    // Both, for a caller with nothing to reduce.
    void observe(const float* block_lo, const float* block_hi, int64_t blocks);

    // Per channel scale and zero point on grid g (an unobserved channel: the range [0, 0]).
    void params(const QuantGrid& g, std::vector<float>* scale, std::vector<float>* zero) const;

    // The state a checkpoint keeps: [observed, lo..., hi...] as floats; restore() checks the size
    // and, when observed, that each range is finite, lo <= hi and within ±kMaxObservedRange (a
    // wider one makes a scale overflow), throwing ete::Error naming `what`.
    static constexpr float kMaxObservedRange = 1e30f;
    std::vector<float> state() const;
    void restore(const std::vector<float>& state, const std::string& what);

  private:
    std::vector<float> lo_, hi_;
    ObserverKind kind_ = ObserverKind::MinMax;
    float c_ = 0.01f;
    bool observed_ = false;
};

}  // namespace ete
