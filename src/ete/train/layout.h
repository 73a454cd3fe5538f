// ete/train/layout.h — moving whole flat buffers (weights, AdamW moments) between this rank's
// local layout (its pipeline stage's parameters, its tensor-parallel shards, in ParamStore
// order) and the logical whole model (param_specs(config) order, global shapes, no padding):
// its trainable parameters, the only ones flat buffers, checkpoints and moments hold (a LoRA
// run's adapters).
//
// Checkpoints and exported models always hold the logical model, so they load onto any layout.
// Gathering sums over the world: each logical element is written by exactly one rank (the
// dp-rank-0 replica's owner: ParamTable::counts_in_norm), every other rank contributes zeros.
// to_global needs one whole-model buffer per rank: LoRA rank changes (adapters only) use it;
// checkpoints and the final save move one tensor at a time instead (state_stream.h).
#pragma once

#include <string>
#include <vector>

#include "ete/model/param_store.h"
#include "ete/parallel/communicator.h"

namespace ete {

class LayoutMap {
  public:
    // local: this rank's store; global_specs: param_specs(config) without parallelism (frozen
    // entries are dropped).
    LayoutMap(const ParamTable& local, std::vector<ParamSpec> global_specs);
    int64_t global_numel() const { return global_numel_; }
    const std::vector<ParamSpec>& global_specs() const { return global_specs_; }

    // global (global_numel, zeroed by the caller) += this rank's owned elements of local.
    void scatter_owned(const float* local, float* global) const;
    // local = this rank's slice of global (padding 0), every local parameter.
    void gather_local(const float* global, float* local) const;

    // The whole logical buffer on every rank of world: owners are the ranks with writer = true
    // (the dp-rank-0 replica), summed over world.
    std::vector<float> to_global(const float* local, bool writer, Communicator& world) const;

  private:
    const ParamTable& local_;
    std::vector<ParamSpec> global_specs_;
    int64_t global_numel_ = 0;
    std::vector<int64_t> global_offset_;  // local parameter i -> its offset in the logical model
};

}  // namespace ete
