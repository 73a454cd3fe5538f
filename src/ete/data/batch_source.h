// ete/data/batch_source.h — the interface the trainer draws (inputs, targets) batches from.
//
// Implementations: BatchSampler (pretraining windows of a token shard, loader.h) and SftDataset
// (instruction/chat examples with masked prompts, sft.h). Targets may hold -100 (the backend's
// kIgnoreIndex) at positions that carry no loss.
//
// Packed sources (packed() true) put several documents in one row and also fill doc_start
// (count, T): for each position, the index in its row of the first position of its document
// (AttnDims::doc_start in backend.h), so attention never crosses a document boundary and
// positions restart per document. Other sources ignore doc_start, which may then be null.
#pragma once

#include <cstdint>

namespace ete {

class BatchSource {
  public:
    virtual ~BatchSource() = default;
    virtual uint64_t num_train_samples() const = 0;  // samples per epoch
    virtual uint64_t num_val_samples() const = 0;
    virtual bool packed() const { return false; }
    // Sample `first_global_index + i` for i < count into inputs/targets, each (count, T). Global
    // indices count samples since the start of training (epoch = index / num_train_samples());
    // the order within an epoch is a permutation determined only by (seed, epoch), so a resumed
    // run restarts at its global index and replicas take disjoint index ranges.
    virtual void fill_batch(uint64_t first_global_index, int count, int32_t* inputs,
                            int32_t* targets, int32_t* doc_start) = 0;
    // Rows i hold validation sample (first + i) mod num_val_samples(), in order.
    virtual void fill_val_batch(uint64_t first, int count, int32_t* inputs, int32_t* targets,
                                int32_t* doc_start) const = 0;
};

}  // namespace ete
