// ete/model/param_store.h — parameters and gradients in two contiguous f32 buffers.
//
// Offsets follow the ParamSpec table (execution order), so the gradient buffer can later be cut
// into all-reduce buckets in reverse execution order without copies.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ete/model/param_spec.h"

namespace ete {

class ParamStore {
  public:
    explicit ParamStore(std::vector<ParamSpec> specs);

    const std::vector<ParamSpec>& specs() const { return specs_; }
    int64_t numel() const { return total_; }
    int index(const std::string& name) const;  // throws if unknown
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    int64_t offset(int i) const { return offsets_[size_t(i)]; }

    float* param(int i) { return params_.f32() + offsets_[size_t(i)]; }
    const float* param(int i) const { return params_.f32() + offsets_[size_t(i)]; }
    float* grad(int i) { return grads_.f32() + offsets_[size_t(i)]; }
    float* param(const std::string& name) { return param(index(name)); }
    float* grad(const std::string& name) { return grad(index(name)); }
    Tensor param_tensor(int i);  // a view with the spec's shape

    float* params() { return params_.f32(); }
    const float* params() const { return params_.f32(); }
    float* grads() { return grads_.f32(); }
    void zero_grads() { grads_.fill_zero(); }

    // Initialises every parameter from its spec with the counter-based RNG keyed by
    // (seed, name, element index): the same seed gives the same model on any layout.
    void init(uint64_t seed);

  private:
    std::vector<ParamSpec> specs_;
    std::vector<int64_t> offsets_;
    std::unordered_map<std::string, int> index_;
    int64_t total_ = 0;
    Tensor params_, grads_;
};

}  // namespace ete

namespace ete {

// HF layout of a spec: the shape reversed when HF stores it transposed (GPT-2 Conv1D).
Shape hf_shape(const ParamSpec& s);
// Copies a parameter from / to its HF layout (transposing GPT-2 Conv1D weights).
void param_from_hf(ParamStore& store, int i, const float* src);
void param_to_hf(const ParamStore& store, int i, float* dst);

}  // namespace ete
