// ete/data/loader.h — deterministic, resumable next-token batches from one token shard.
//
// Windows: with T = seq_len, a window is T + 1 consecutive tokens; inputs are its first T tokens
// and targets its last T (inputs shifted by one). Training window w starts at token w*T, so
// consecutive training windows share one boundary token (the last target of w is the first
// input of w + 1, as in llm.c) and their inputs tile [0, Wt*T), their targets [1, Wt*T + 1).
// Validation windows sit after the training ones with one spare token in between, so no token
// of a validation window is ever a training input or target: validation window v starts at
// Wt*T + 1 + v*T. With frac = 0: W = floor((N - 1) / T) windows, all training. With frac > 0:
// W = floor((N - 2) / T), V = max(1, ceil(frac * W)) validation windows, Wt = W - V >= 1.
//
// Order: sample number g (counted from the start of training, over all replicas) is training
// window perm_e[g mod Wt] with epoch e = g / Wt, where perm_e is a Fisher-Yates shuffle driven by
// std::mt19937_64 seeded from a hash of (seed, e), with its own bounded draws so the order is the
// same with every standard library. The order is a pure function of (seed, g): a resumed run
// restarts at g, and data-parallel replicas take disjoint ranges of g (e.g. replica r of R, with
// B samples per replica and step, takes g in [(s*R + r)*B, (s*R + r + 1)*B) at step s).
// Without shuffling (data.shuffle = false) perm_e is the identity: every epoch reads the windows
// in file order, so a curriculum stays in order and a step's data is known from its number.
#pragma once

#include <cstdint>
#include <vector>

#include "ete/data/batch_source.h"
#include "ete/data/token_shard.h"

namespace ete {

// The permutation of [0, n) for `epoch`: the seeded Fisher-Yates shuffle described above. A pure
// function of (n, seed, epoch), shared by every BatchSource. n must be >= 1.
std::vector<uint64_t> shuffle_epoch_order(uint64_t n, uint64_t seed, uint64_t epoch);

// Training sample g -> item shuffle_epoch_order(n, seed, g / n)[g mod n] (or g mod n without
// shuffling), caching the current epoch's permutation (so, like the sources that own one, not
// thread-safe).
class EpochSchedule {
  public:
    EpochSchedule() = default;
    EpochSchedule(uint64_t n, uint64_t seed, bool shuffle = true)
        : n_(n), seed_(seed), shuffle_(shuffle) {}
    uint64_t at(uint64_t global_index);
    std::vector<uint64_t> order(uint64_t epoch) const;

  private:
    uint64_t n_ = 0, seed_ = 0, cached_epoch_ = UINT64_MAX;
    bool shuffle_ = true;
    std::vector<uint64_t> cached_;
};

class BatchSampler : public BatchSource {
  public:
    // `shard` must outlive the sampler. Throws when T <= 0, frac is outside [0, 1), or the shard
    // is too short for one training window (and one validation window when frac > 0).
    BatchSampler(const TokenShard& shard, int seq_len, double val_fraction, uint64_t seed,
                 bool shuffle = true);

    int seq_len() const { return seq_len_; }
    uint64_t num_train_windows() const { return num_train_; }
    uint64_t num_val_windows() const { return num_val_; }
    uint64_t num_train_samples() const override { return num_train_; }
    uint64_t num_val_samples() const override { return num_val_; }
    uint64_t train_window_start(uint64_t w) const;  // first token of training window w
    uint64_t val_window_start(uint64_t v) const;    // first token of validation window v

    // Training window of sample `global_index` (not thread-safe: caches one epoch's order).
    uint64_t sample(uint64_t global_index);
    // Rows i = 0..count-1 hold sample first_global_index + i. inputs, targets: (count, T).
    // Windows are not packed: doc_start is ignored.
    void fill_batch(uint64_t first_global_index, int count, int32_t* inputs, int32_t* targets,
                    int32_t* doc_start = nullptr) override;
    // Rows i hold validation window (first + i) mod V, in order.
    void fill_val_batch(uint64_t first, int count, int32_t* inputs, int32_t* targets,
                        int32_t* doc_start = nullptr) const override;

    // The permutation of training windows for epoch `e` (exposed for tests and inspection).
    std::vector<uint64_t> epoch_order(uint64_t epoch) const;

  private:
    void fill_window(uint64_t start, int32_t* inputs, int32_t* targets) const;

    const TokenShard* shard_;
    int seq_len_;
    uint64_t seed_;
    uint64_t num_train_ = 0, num_val_ = 0;
    EpochSchedule schedule_;
};

}  // namespace ete
