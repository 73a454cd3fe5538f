// ete/optim/adamw8bit.h — 8-bit AdamW (train.optimizer = "adamw8bit"): AdamW whose two moments
// are stored as bitsandbytes' blockwise 8-bit optimizers store them (Dettmers et al., "8-bit
// Optimizers via Block-wise Quantization", 2022).
//
// Format (core/dynamic_map.h): each parameter's moments in blocks of kBlock = 256 elements (as
// bitsandbytes' blockwise optimizers; a block never straddles two parameters, and under ZeRO a
// shard's part of a parameter starts a block), one byte per element — the first moment as an
// index into the signed dynamic map, the second into the unsigned one — and an fp32 absmax per
// block: 2 + 8/256 bytes per element instead of AdamW's 8. Dynamic maps spend their codes on
// seven decades (1e-7..1 of the block's absmax), which is where moments live; linear 8-bit codes
// would round most of a block's small second moments to zero. Parameters whose whole tensor has
// fewer than kMin8bitSize = 4096 elements (norms, biases, small adapters) keep F32 moments, as
// bitsandbytes' min_8bit_size does: they cost little and are the most sensitive.
//
// The update (Backend::adamw8bit_step, one pass per block) dequantizes, applies AdamW's own
// arithmetic (the same as AdamW's, torch.optim.AdamW's order) with the fresh fp32 moments, and
// requantizes them with the block's new absmax. The state names are AdamW's, the values the
// dequantized moments: checkpoints of either optimizer resume with the other, and a resume onto
// the same layout restores the same bytes.
#pragma once

#include <string>
#include <vector>

#include "ete/optim/adamw.h"

namespace ete {

class AdamW8bit final : public Optimizer {
  public:
    static constexpr int64_t kBlock = 256;
    static constexpr int64_t kMin8bitSize = 4096;

    AdamW8bit(ParamStore& store, Backend& backend, AdamWConfig cfg, int64_t begin, int64_t end);
    AdamW8bit(ParamStore& store, Backend& backend, AdamWConfig cfg)
        : AdamW8bit(store, backend, cfg, 0, store.numel()) {}
    OptimizerKind kind() const override { return OptimizerKind::AdamW8bit; }
    const std::vector<std::string>& state_names() const override;
    void step(double lr, float grad_scale = 1.0f) override;
    void download_state(int k, int64_t first, int64_t n, float* out) const override;
    void upload_state(int k, int64_t first, int64_t n, const float* in) override;
    using Optimizer::download_state;
    using Optimizer::upload_state;
    size_t state_bytes() const override;
    void release_state() override;

    // Whether a parameter keeps 8-bit moments (its whole tensor has >= kMin8bitSize elements, so
    // every layout decides alike).
    static bool quantized(const ParamSpec& s);
    // The state bytes of n elements of parameter s.
    static int64_t segment_bytes(const ParamSpec& s, int64_t n);

  private:
    // A parameter's part of the shard: 8-bit (codes at `at`, blocks from `block`) or F32
    // (moments at `at` of the F32 buffers).
    struct Part {
        int param;
        int64_t lo, hi;
        bool q;
        int64_t at, block;
        int64_t blocks() const { return (hi - lo + kBlock - 1) / kBlock; }
    };
    Vec codes(int k, const Part& p) const;
    Vec absmax(int k, const Part& p) const;
    Vec f32(int k, const Part& p) const;

    AdamWConfig cfg_;
    std::vector<Part> parts_;
    DeviceBuffer codes_[2], absmax_[2], f32_[2];
};

}  // namespace ete
