// ete/optim/loss_scaler.h — dynamic loss scaling for fp16 training (DESIGN.md §3, §9).
//
// fp16 gradients underflow unless the loss is scaled up before backward. The scaler multiplies
// the loss gradient by scale S, the step's gradients are checked for inf/NaN, and then either
// unscaled (×1/S, folded into clipping) and applied, or the step is skipped and S halved. After
// `window` clean steps in a row S doubles. S starts at 2^16 and stays a power of two, so
// scaling and unscaling are exact. Every rank must take the same decision: the caller feeds
// update() a non-finite flag that was all-reduced over the whole job. bf16 and fp32 runs keep it
// disabled (scale 1, never skips): bf16 has fp32's range and needs no scaling.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace ete {

class LossScaler {
  public:
    static constexpr double kInitScale = 65536.0;  // 2^16, as torch.cuda.amp.GradScaler
    static constexpr double kMinScale = 1.0;       // never below: a scale < 1 cannot help

    LossScaler() = default;  // disabled
    explicit LossScaler(int64_t window) : enabled_(true), window_(window) {}

    bool enabled() const { return enabled_; }
    double scale() const { return scale_; }
    int64_t good_steps() const { return good_; }  // clean steps since the last change
    int64_t skipped_total() const { return skipped_; }

    // The step's agreed verdict; returns whether the optimizer may step.
    bool update(bool nonfinite);

    // Checkpoint state (scale, counters) and its exact restore.
    nlohmann::json state() const;
    void restore(const nlohmann::json& j);

  private:
    bool enabled_ = false;
    int64_t window_ = 2000;
    double scale_ = 1.0;
    int64_t good_ = 0, skipped_ = 0;

  public:
    // Starts an enabled scaler at kInitScale (separate so the default stays a no-op).
    static LossScaler for_fp16(int64_t window) {
        LossScaler s(window);
        s.scale_ = kInitScale;
        return s;
    }
};

}  // namespace ete
