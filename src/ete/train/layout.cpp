// ete/train/layout.cpp
#include "ete/train/layout.h"

#include <unordered_map>

#include "ete/core/error.h"

#include "ete/model/shard.h"

namespace ete {

LayoutMap::LayoutMap(const ParamTable& local, std::vector<ParamSpec> global_specs)
    : local_(local), global_specs_(std::move(global_specs)) {
    // Frozen parameters (a LoRA base) are neither in the flat buffers nor in checkpoints.
    std::erase_if(global_specs_, [](const ParamSpec& s) { return !s.trainable; });
    std::unordered_map<std::string, int64_t> offset;
    for (const ParamSpec& s : global_specs_) {
        offset[s.name] = global_numel_;
        global_numel_ += shape_numel(s.shape);
    }
    for (const ParamSpec& s : local.specs()) {
        if (!s.trainable) {
            global_offset_.push_back(-1);
            continue;
        }
        auto it = offset.find(s.name);
        ETE_ASSERT(it != offset.end());
        global_offset_.push_back(it->second);
    }
}

void LayoutMap::scatter_owned(const float* local, float* global) const {
    for (size_t i = 0; i < global_offset_.size(); ++i) {
        // Frozen, or another rank owns these elements.
        if (global_offset_[i] < 0 || !local_.counts_in_norm(int(i))) continue;
        shard_to_global(local_.specs()[i], local_.tp_rank(), local_.tp_size(),
                        local + local_.offset(int(i)), global + global_offset_[i]);
    }
}

void LayoutMap::gather_local(const float* global, float* local) const {
    for (size_t i = 0; i < global_offset_.size(); ++i) {
        if (global_offset_[i] < 0) continue;
        shard_from_global(local_.specs()[i], local_.tp_rank(), local_.tp_size(),
                          global + global_offset_[i], local + local_.offset(int(i)));
    }
}

std::vector<float> LayoutMap::to_global(const float* local, bool writer,
                                        Communicator& world) const {
    std::vector<float> g(size_t(global_numel()), 0.0f);
    if (writer) scatter_owned(local, g.data());
    if (world.size() > 1) world.all_reduce(g.data(), g.size(), DType::F32, ReduceOp::Sum);
    return g;
}

}  // namespace ete
