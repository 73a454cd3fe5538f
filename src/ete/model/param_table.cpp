// ete/model/param_table.cpp — ParamTable (model/param_store.h): the names, roles and offsets of
// a model's parameters, without their memory (readers of model files use it alone).
#include "ete/model/param_store.h"
#include "ete/model/shard.h"

namespace ete {

namespace {

int64_t role_key(ParamRole role, int layer, ParamRole base = ParamRole::TokenEmbed) {
    return (int64_t(role) * 256 + int64_t(base)) * 65536 + (layer + 1);
}

}  // namespace

ParamTable::ParamTable(std::vector<ParamSpec> specs, int tp_rank, int tp_size)
    : specs_(std::move(specs)), tp_rank_(tp_rank), tp_size_(tp_size) {
    ETE_ASSERT(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
    for (size_t i = 0; i < specs_.size(); ++i) {
        ParamSpec& s = specs_[i];
        ETE_CHECK(index_.emplace(s.name, int(i)).second, "duplicate parameter name '{}'", s.name);
        if (s.global_shape.empty()) s.global_shape = s.shape;  // a hand-made replicated spec
        ETE_ASSERT(s.shape == shard_shape(s.shard, s.global_shape, tp_size));
        roles_.emplace(role_key(s.role, s.layer, s.lora_base), int(i));
        ETE_ASSERT(s.nf4_block == 0 || (!s.trainable && s.shape.size() == 2));
        // No padding: fused groups (q|k|v, gate|up) must be contiguous to run as one GEMM.
        offsets_.push_back(s.trainable ? total_ : -1);
        if (s.trainable) total_ += shape_numel(s.shape);
    }
}

int ParamTable::index(const std::string& name) const {
    auto it = index_.find(name);
    ETE_CHECK(it != index_.end(), "parameter '{}' does not exist in this model", name);
    return it->second;
}

int ParamTable::find(ParamRole role, int layer) const {
    auto it = roles_.find(role_key(role, layer));
    return it == roles_.end() ? -1 : it->second;
}

int ParamTable::find_lora(ParamRole base, int layer, bool b) const {
    auto it = roles_.find(role_key(b ? ParamRole::LoraB : ParamRole::LoraA, layer, base));
    return it == roles_.end() ? -1 : it->second;
}

bool ParamTable::counts_in_norm(int i) const {
    const ParamSpec& s = specs_[size_t(i)];
    return s.trainable && !s.tied_copy && shard_owner(s.shard, tp_rank_, tp_size_);
}

}  // namespace ete
