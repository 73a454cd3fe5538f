// ete/optim/optimizer.h — the optimizer seam: an update rule over the flat trainable buffer with
// named per-element state (DESIGN.md §4).
//
// An optimizer owns the flat elements [begin, end) of a ParamStore (all of them, or with ZeRO
// this replica's shard) and keeps state for them in whatever dtype and block layout it likes
// (AdamW: two F32 moments; 8-bit AdamW: blockwise 8-bit codes with an absmax per block). Outside
// it the state is a list of named tensors of F32 values, one per element, at the parameters'
// offsets: checkpoints store them as `<name>.<parameter>` (AdamW's `exp_avg`, `exp_avg_sq`, the
// names PyTorch uses), ZeRO gathers them, a resume onto another layout re-slices them, a LoRA rank
// change resets them — all without knowing the optimizer. Uploading what was downloaded restores
// the same state bytes (8-bit AdamW's maps make requantization exact: core/dynamic_map.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/model/param_store.h"

namespace ete {

enum class OptimizerKind { AdamW, AdamW8bit };
// "adamw" | "adamw8bit"; anything else throws naming the expected values.
OptimizerKind optimizer_kind_from_name(const std::string& name);
const char* optimizer_name(OptimizerKind k);

struct AdamWConfig {
    double lr = 3e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
};

class Optimizer {
  public:
    virtual ~Optimizer() = default;
    virtual OptimizerKind kind() const = 0;
    // The state tensors' names, in checkpoint order.
    virtual const std::vector<std::string>& state_names() const = 0;
    // One update with learning rate lr; increments the step counter first (t starts at 1). The
    // gradients are read as g · grad_scale (clipping and unscaling folded into the update).
    virtual void step(double lr, float grad_scale = 1.0f) = 0;
    // State k's values of flat elements [first, first + n) (inside [begin, end)) as F32 into out;
    // elements of frozen parameters read 0.
    virtual void download_state(int k, int64_t first, int64_t n, float* out) const = 0;
    // State k of flat elements [first, first + n) from F32 values. A range must hold whole
    // parameters (or their whole part in this shard): a blockwise state is requantized per block.
    virtual void upload_state(int k, int64_t first, int64_t n, const float* in) = 0;
    // Backend bytes the state holds.
    virtual size_t state_bytes() const = 0;
    // Frees the state when training is over (the final save needs the memory); step(), the
    // downloads and uploads refuse to run afterwards.
    virtual void release_state() = 0;

    // The whole shard of state k (end - begin values), and back.
    std::vector<float> download_state(int k) const;
    void upload_state(int k, const float* in) { upload_state(k, begin_, end_ - begin_, in); }
    int state_count() const { return int(state_names().size()); }
    int64_t steps_taken() const { return t_; }
    void set_steps_taken(int64_t t) { t_ = t; }
    int64_t shard_begin() const { return begin_; }
    int64_t shard_end() const { return end_; }

  protected:
    Optimizer(ParamStore& store, Backend& backend, int64_t begin, int64_t end);
    // Throws when the state was released or [first, first + n) leaves [begin, end).
    void check_range(const char* what, int64_t first, int64_t n) const;
    // For each trainable parameter: the flat range [lo, hi) of it inside [begin, end) (empty
    // ranges skipped), with its spec index.
    struct Segment {
        int param;
        int64_t lo, hi;
    };
    std::vector<Segment> segments() const;

    ParamStore& store_;
    Backend& be_;
    int64_t begin_, end_;
    int64_t t_ = 0;
    bool released_ = false;
};

// Bias corrections 1 - beta^t in f32, and the AdamWStep of one parameter (weight decay for
// matrices only: param_decays).
AdamWStep adamw_step_of(const AdamWConfig& c, const ParamSpec& spec, double lr, float grad_scale,
                        int64_t t);

struct OptimizerConfig {
    OptimizerKind kind = OptimizerKind::AdamW;
    AdamWConfig adamw;
};

// The optimizer of `c.kind` over flat elements [begin, end) of store.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, ParamStore& store,
                                          Backend& backend, int64_t begin, int64_t end);

// The bytes of state one rank holds for flat elements [begin, end) of a store with these specs
// (trainable ones counted), without building it (the memory estimate).
int64_t optimizer_state_bytes(OptimizerKind k, const std::vector<ParamSpec>& specs, int64_t begin,
                              int64_t end);

}  // namespace ete
