// ete/train/anomaly.h — anomalies every rank agrees on (docs/operations.md, Anomalies).
//
// Before the optimizer step each rank sets bits for what it saw: a non-finite local loss (its
// replica's share, on the last pipeline stage), a non-finite gradient among the elements it holds,
// an fp16 overflow (the loss scaler's business, not an anomaly), and rank 0 alone a loss spike
// (the global loss against a running window of taken steps). The bits of every rank are gathered
// into one verdict, identical on every rank, so every rank of every layout skips the same step and
// the log can say which ranks it came from. Pure logic: the trainer does the collective.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ete {

enum AnomalyBit : uint32_t {
    kNonFiniteLoss = 1u << 0,
    kNonFiniteGrad = 1u << 1,
    kLossSpike = 1u << 2,
    kOverflow = 1u << 3,  // fp16: a non-finite scaled gradient, skipped and the scale halved
    // Every element this rank holds is finite but the global norm is not (it overflowed): kept
    // only when no rank has a non-finite element, which would explain the norm.
    kNonFiniteNorm = 1u << 4,
};

// "nonfinite_loss", "nonfinite_grad", "loss_spike", "overflow", "nonfinite_grad_norm": the label
// of one bit.
const char* anomaly_cause_name(AnomalyBit b);

struct AnomalyConfig {
    double spike_zscore = 0;  // > 0: a loss this many standard deviations above the window skips
    int window = 100;         // taken steps in the spike window (spikes judged once it is full)
    int max_consecutive_skips = 5;     // anomaly skips in a row before on_repeated acts
    std::string on_repeated = "stop";  // stop | rollback
    int max_rollbacks = 3;             // rollbacks in one run before on_repeated acts as stop
};

// The agreed decision of one step: the union of every rank's bits, and for each bit the world
// ranks that raised it.
struct AnomalyVerdict {
    uint32_t bits = 0;
    std::vector<std::pair<AnomalyBit, std::vector<int>>> by_cause;  // causes in bit order
    double zscore = 0;                                              // with kLossSpike

    bool skip() const { return bits != 0; }
    // An anomaly proper (counts toward max_consecutive_skips): anything but an fp16 overflow alone.
    bool anomalous() const { return (bits & ~uint32_t(kOverflow)) != 0; }
    // "non-finite gradient on rank 1, 3; loss spike (z = 9.1) on rank 0"
    std::string describe() const;
    // metrics.jsonl: {"nonfinite_grad": [1, 3], ...}
    nlohmann::json causes_json() const;
};

// bits[r] = world rank r's bits.
AnomalyVerdict combine_anomalies(const std::vector<uint32_t>& bits, double zscore);

// The losses of the last `window` taken steps; z-score of a new one against them.
class LossWindow {
  public:
    explicit LossWindow(int window = 100) : window_(window) {}
    // (loss - mean) / sd once the window is full (sd floored at 1e-6 of |mean| and 1e-12, so a
    // flat loss does not turn noise into spikes), else nullopt.
    std::optional<double> zscore(double loss) const;
    void push(double loss);
    nlohmann::json state() const;
    void restore(const nlohmann::json& j);

  private:
    int window_;
    std::deque<double> losses_;
};

// Validates the [anomaly] keys (one-line errors naming the key).
void validate_anomaly(const AnomalyConfig& c);

}  // namespace ete
