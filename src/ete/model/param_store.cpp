// ete/model/param_store.cpp
#include "ete/model/param_store.h"

#include <algorithm>

#include "ete/core/rng.h"
#include "ete/model/shard.h"

namespace ete {

ParamStore::ParamStore(std::vector<ParamSpec> specs, int tp_rank, int tp_size)
    : specs_(std::move(specs)), tp_rank_(tp_rank), tp_size_(tp_size) {
    ETE_ASSERT(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
    for (size_t i = 0; i < specs_.size(); ++i) {
        ParamSpec& s = specs_[i];
        ETE_CHECK(index_.emplace(s.name, int(i)).second, "duplicate parameter name '{}'", s.name);
        if (s.global_shape.empty()) s.global_shape = s.shape;  // a hand-made replicated spec
        ETE_ASSERT(s.shape == shard_shape(s.shard, s.global_shape, tp_size));
        offsets_.push_back(total_);
        // No padding: fused groups (q|k|v, gate|up) must be contiguous to run as one GEMM.
        total_ += shape_numel(s.shape);
    }
    params_ = Tensor::zeros({total_});
    grads_ = Tensor::zeros({total_});
}

int ParamStore::index(const std::string& name) const {
    auto it = index_.find(name);
    ETE_CHECK(it != index_.end(), "parameter '{}' does not exist in this model", name);
    return it->second;
}

Tensor ParamStore::param_tensor(int i) {
    return Tensor::view(param(i), specs_[size_t(i)].shape);
}

void ParamStore::init(uint64_t seed) {
    for (size_t i = 0; i < specs_.size(); ++i) {
        const ParamSpec& s = specs_[i];
        float* p = param(int(i));
        CounterRng rng(seed, s.name);
        auto value = [&](int64_t global) {  // global < 0: padding
            if (global < 0 || s.init == ParamInit::Zeros) return 0.0f;
            return s.init == ParamInit::Ones ? 1.0f : s.init_std * rng.normal(uint64_t(global));
        };
        for (const ShardRun& r : shard_runs(s, tp_rank_, tp_size_))
            for (int64_t k = 0; k < r.len; ++k)
                p[r.local + k] = value(r.global < 0 ? -1 : r.global + k);
    }
}

bool ParamStore::counts_in_norm(int i) const {
    const ParamSpec& s = specs_[size_t(i)];
    return !s.tied_copy && shard_owner(s.shard, tp_rank_, tp_size_);
}

}  // namespace ete

namespace ete {

Shape hf_shape(const ParamSpec& s) {
    if (!s.hf_transposed) return s.shape;
    return Shape(s.shape.rbegin(), s.shape.rend());
}

Shape hf_global_shape(const ParamSpec& s) {
    if (!s.hf_transposed) return s.global_shape;
    return Shape(s.global_shape.rbegin(), s.global_shape.rend());
}

void param_from_hf(ParamStore& store, int i, const float* src) {
    const ParamSpec& s = store.specs()[size_t(i)];
    float* dst = store.param(i);
    int64_t n = shape_numel(s.shape);
    if (!s.hf_transposed) {
        std::copy(src, src + n, dst);
        return;
    }
    int64_t rows = s.shape[0], cols = s.shape[1];  // ETE (out, in) <- HF (in, out)
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
}

void param_to_hf(const ParamStore& store, int i, float* dst) {
    const ParamSpec& s = store.specs()[size_t(i)];
    const float* src = store.param(i);
    int64_t n = shape_numel(s.shape);
    if (!s.hf_transposed) {
        std::copy(src, src + n, dst);
        return;
    }
    int64_t rows = s.shape[0], cols = s.shape[1];
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

}  // namespace ete
