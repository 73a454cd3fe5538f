// ete/model/param_store.h — parameters and gradients in two contiguous f32 buffers.
//
// Offsets follow the ParamSpec table (execution order), so the gradient buffer can be cut into
// all-reduce buckets in reverse execution order without copies. Under tensor parallelism the
// store holds one rank's shards (ParamSpec::shape) and knows that rank (tp_rank, tp_size).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ete/model/param_spec.h"

namespace ete {

class ParamStore {
  public:
    // specs as param_specs() built them for (tp_rank, tp_size).
    explicit ParamStore(std::vector<ParamSpec> specs, int tp_rank = 0, int tp_size = 1);

    const std::vector<ParamSpec>& specs() const { return specs_; }
    int64_t numel() const { return total_; }
    int index(const std::string& name) const;  // throws if unknown
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    int64_t offset(int i) const { return offsets_[size_t(i)]; }
    int64_t numel(int i) const { return shape_numel(specs_[size_t(i)].shape); }
    int tp_rank() const { return tp_rank_; }
    int tp_size() const { return tp_size_; }

    float* param(int i) { return params_.f32() + offsets_[size_t(i)]; }
    const float* param(int i) const { return params_.f32() + offsets_[size_t(i)]; }
    float* grad(int i) { return grads_.f32() + offsets_[size_t(i)]; }
    const float* grad(int i) const { return grads_.f32() + offsets_[size_t(i)]; }
    float* param(const std::string& name) { return param(index(name)); }
    float* grad(const std::string& name) { return grad(index(name)); }
    Tensor param_tensor(int i);  // a view with the spec's (local) shape

    float* params() { return params_.f32(); }
    const float* params() const { return params_.f32(); }
    float* grads() { return grads_.f32(); }
    const float* grads() const { return grads_.f32(); }
    void zero_grads() { grads_.fill_zero(); }

    // Initialises every parameter from its spec with the counter-based RNG keyed by
    // (seed, name, GLOBAL element index); padding elements are 0. The same seed gives the same
    // model on any layout: a tp shard is exactly a slice of the tp = 1 tensor.
    void init(uint64_t seed);

    // For a global gradient norm over the tp × pp ranks of a replica: whether parameter i's
    // elements are counted on this rank, so each element is counted exactly once — sharded ones
    // on every tp rank (padding is zero), replicated ones on tp rank 0 only, a kv head held by
    // several tp ranks on the first of them (shard_owner), a tied_copy never (stage 0 counts
    // the embedding, after the tied gradients were summed).
    bool counts_in_norm(int i) const;

  private:
    std::vector<ParamSpec> specs_;
    std::vector<int64_t> offsets_;
    std::unordered_map<std::string, int> index_;
    int64_t total_ = 0;
    int tp_rank_ = 0, tp_size_ = 1;
    Tensor params_, grads_;
};

}  // namespace ete

namespace ete {

// HF layout of a spec's local shape: the shape reversed when HF stores it transposed (GPT-2
// Conv1D). hf_global_shape: the same for the logical tensor.
Shape hf_shape(const ParamSpec& s);
Shape hf_global_shape(const ParamSpec& s);
// Copies a parameter from / to its HF layout (transposing GPT-2 Conv1D weights); local shapes.
void param_from_hf(ParamStore& store, int i, const float* src);
void param_to_hf(const ParamStore& store, int i, float* dst);

}  // namespace ete
