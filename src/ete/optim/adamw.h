// ete/optim/adamw.h — AdamW with decoupled weight decay, global-norm clipping, LR schedules.
//
// An Optimizer (optim/optimizer.h). Moments are F32 backend memory beside the flat trainable
// buffer (same offsets). Weight decay
// applies per ParamSpec (matrices only by default). The update follows torch.optim.AdamW's
// operation order so PyTorch goldens match to rounding; under mixed precision the same pass
// rewrites the parameters' compute copy.
#pragma once

#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/model/param_store.h"
#include "ete/optim/optimizer.h"
#include "ete/parallel/communicator.h"

namespace ete {

// AdamW with F32 moments: state "exp_avg" and "exp_avg_sq", backend memory at the flat buffer's
// offsets (minus begin).
class AdamW final : public Optimizer {
  public:
    AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg);
    // ZeRO: this optimizer owns only the flat elements [begin, end) of the store — its
    // moments cover that range and step() updates only those parameters (the caller then
    // gathers the parameters the other ranks updated).
    AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg, int64_t begin, int64_t end);
    OptimizerKind kind() const override { return OptimizerKind::AdamW; }
    const std::vector<std::string>& state_names() const override;
    void step(double lr, float grad_scale = 1.0f) override;
    void download_state(int k, int64_t first, int64_t n, float* out) const override;
    void upload_state(int k, int64_t first, int64_t n, const float* in) override;
    using Optimizer::download_state;
    using Optimizer::upload_state;
    size_t state_bytes() const override { return m_.bytes() + v_.bytes(); }
    void release_state() override;
    // The moments, (end - begin) F32 elements of backend memory each.
    Vec exp_avg() { return {m_.data(), DType::F32, end_ - begin_}; }
    Vec exp_avg_sq() { return {v_.data(), DType::F32, end_ - begin_}; }

  private:
    AdamWConfig cfg_;
    DeviceBuffer m_, v_;
};

// The global L2 norm of the gradients over the ranks of `mp` (tensor x pipeline parallel; null
// or size 1 = this rank's): the squared norm counts every element once
// (ParamTable::counts_in_norm) and is summed over mp. Non-finite when any gradient is.
// *local_finite (optional) says whether every gradient element THIS rank holds is finite — the
// copies that are not counted in the norm included (a replicated parameter on a tp rank > 0).
double grad_norm(ParamStore& store, Backend& backend, Communicator* mp,
                 bool* local_finite = nullptr);
// The same under ZeRO-2, where each replica of `dp` holds the summed gradients of its shard
// [begin, end) of the flat buffer only: the squares of this replica's shard, summed over dp and
// mp; *local_finite covers the shard.
double sharded_grad_norm(ParamStore& store, Backend& backend, Communicator* mp, Communicator& dp,
                         int64_t begin, int64_t end, bool* local_finite = nullptr);
// The clip coefficient torch uses for gradients of norm `norm`: min(1, clip / (norm + 1e-6))
// in f32; 1 when clip <= 0 (no clipping).
float clip_coefficient(double norm, double clip);

// Global L2 norm of all gradients; when clip > 0 and the norm exceeds it, scales the gradients
// by clip / (norm + 1e-6) exactly like torch.nn.utils.clip_grad_norm_. Returns the norm before
// clipping.
double clip_grad_norm(ParamStore& store, Backend& backend, double clip);
// The same over a model split across the ranks of `mp` (tensor x pipeline parallel; null or
// size 1 = the plain version): the squared norm counts every element once
// (ParamStore::counts_in_norm) and is summed over mp, so every rank clips by the global norm.
double clip_grad_norm(ParamStore& store, Backend& backend, double clip, Communicator* mp);

enum class LrSchedule { Constant, Cosine, Linear };
LrSchedule lr_schedule_from_name(const std::string& name);  // throws with the expected names

// lr at 0-based optimizer step `step` of `total`: linear warmup over `warmup` steps to `peak`,
// then constant, cosine or linear decay to `min_lr` at the last step.
double lr_at(LrSchedule s, int64_t step, int64_t total, int64_t warmup, double peak, double min_lr);

}  // namespace ete
