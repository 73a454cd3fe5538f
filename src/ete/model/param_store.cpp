// ete/model/param_store.cpp
#include "ete/model/param_store.h"

#include <algorithm>

#include "ete/core/rng.h"

namespace ete {

ParamStore::ParamStore(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
    for (size_t i = 0; i < specs_.size(); ++i) {
        ETE_CHECK(index_.emplace(specs_[i].name, int(i)).second, "duplicate parameter name '{}'",
                  specs_[i].name);
        offsets_.push_back(total_);
        // No padding: fused groups (q|k|v, gate|up) must be contiguous to run as one GEMM.
        total_ += shape_numel(specs_[i].shape);
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
        int64_t n = shape_numel(s.shape);
        CounterRng rng(seed, s.name);
        for (int64_t k = 0; k < n; ++k) {
            p[k] = s.init == ParamInit::Ones    ? 1.0f
                   : s.init == ParamInit::Zeros ? 0.0f
                                                : s.init_std * rng.normal(uint64_t(k));
        }
    }
}

}  // namespace ete

namespace ete {

Shape hf_shape(const ParamSpec& s) {
    if (!s.hf_transposed) return s.shape;
    return Shape(s.shape.rbegin(), s.shape.rend());
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
