// ete/train/state_stream.h — a checkpoint's tensors moved between the files (the logical whole
// model, layout.h) and the ranks' backend memory one logical tensor at a time, on any layout: no
// rank ever holds the whole model or a whole optimizer state on the host (DESIGN.md §4, ZeRO).
//
// Saving: world rank 0 writes; save_checkpoint fetches each tensor from source(). Where rank 0
// holds every element itself (one process, or pure data parallelism without ZeRO) a fetch reads
// its own backend memory. Otherwise a fetch is collective: rank 0 broadcasts which tensor it
// wants, every rank fills the elements it owns (its tensor-parallel slice, its pipeline stage's
// tensors, its ZeRO shard of a state; the dp-rank-0 replica's copy of replicated values) and
// writes -0.0 everywhere else, and one reduce-sum to rank 0 assembles the tensor. x + (-0.0) is
// x for every x (+0.0 and -0.0 included), so the sum is bit-exact whatever order MPI adds in.
// The other ranks serve() until rank 0 says the save is over (finish(), also after a failed
// save, so a full disk never leaves them waiting).
//
// Loading: every rank reads the files tensor by tensor (sink()) and keeps its slice: the
// parameters it holds, and its ZeRO shard of each state.
#pragma once

#include <vector>

#include "ete/io/checkpoint.h"
#include "ete/optim/optimizer.h"
#include "ete/parallel/communicator.h"
#include "ete/train/layout.h"

namespace ete {

struct StreamRoles {
    // Rank 0 holds every element: fetches are local and nobody else takes part.
    bool solo = false;
    // This rank's parameters go into the files (the dp-rank-0 replica's).
    bool param_writer = false;
    // This rank's optimizer state does (its ZeRO shard on every replica; else dp rank 0's).
    bool state_writer = false;
};

class StateStream {
  public:
    StateStream(const LayoutMap& layout, ParamStore& store, Optimizer& opt, Communicator& world,
                StreamRoles roles);

    // World rank 0: what save_checkpoint fetches from. finish() when the save is over, whether it
    // succeeded or threw (idempotent).
    CheckpointSource source();
    void finish();
    // Every other rank: answers rank 0's fetches until it finishes (returns at once when solo).
    void serve();
    // Every rank: what load_checkpoint hands the file's tensors to.
    CheckpointSink sink();

  private:
    // Item = which * tensors + g: which = 0 for the parameter, k + 1 for state k.
    void fetch(int64_t item, float* out);
    // This rank's part of item's logical tensor into out (numel of the tensor), -0.0 elsewhere.
    void contribute(int64_t item, float* out);
    void take_param(int g, const float* global);
    void take_state(int k, int g, const float* global);

    const LayoutMap& layout_;
    ParamStore& ps_;
    Optimizer& opt_;
    Communicator& world_;
    StreamRoles roles_;
    int64_t tensors_;
    bool finished_ = false;
    std::vector<float> local_;  // one local parameter's values
};

}  // namespace ete
