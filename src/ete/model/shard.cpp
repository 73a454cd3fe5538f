// ete/model/shard.cpp — shard arithmetic (shard.h).
#include "ete/model/shard.h"

#include <algorithm>

namespace ete {

int shard_parts(const ShardRule& rule, int tp_size) {
    ETE_ASSERT(tp_size >= 1);
    if (rule.dim < 0) return 1;
    if (rule.max_parts <= 0 || tp_size <= rule.max_parts) return tp_size;
    ETE_ASSERT(tp_size % rule.max_parts == 0);  // ModelParallel::resolved checked tp % KV
    return rule.max_parts;
}

bool shard_owner(const ShardRule& rule, int tp_rank, int tp_size) {
    // Unequal groups replicate none: ModelParallel::resolved refuses tp > max_parts for them.
    ETE_ASSERT(rule.lead == 0 || shard_parts(rule, tp_size) == tp_size);
    return tp_rank % (tp_size / shard_parts(rule, tp_size)) == 0;
}

namespace {

// One group of the split dim: global rows [begin, begin + width), cut into `parts` parts of
// `local` rows each (padded), of which this rank holds part `part`.
struct Group {
    int64_t begin, width, parts, local, part;
};

std::vector<Group> split_groups(const ShardRule& rule, int64_t extent, int tp_rank, int tp_size) {
    const int64_t units = rule.groups + (rule.lead > 0 ? rule.lead - 1 : 0);
    ETE_ASSERT(rule.groups >= 1 && extent % units == 0);
    const int64_t g = extent / units;
    std::vector<Group> out;
    int64_t begin = 0;
    for (int k = 0; k < rule.groups; ++k) {
        const bool lead = k == 0 && rule.lead > 0;
        const int64_t width = lead ? rule.lead * g : g;
        const int64_t P = lead ? tp_size : shard_parts(rule, tp_size);
        const int64_t wp = rule.pad ? (width + P - 1) / P * P : width;
        ETE_ASSERT(wp % P == 0);  // unpadded splits (heads) were checked to divide
        out.push_back({begin, width, P, wp / P, tp_rank / (tp_size / P)});
        begin += width;
    }
    return out;
}

}  // namespace

int64_t shard_extent(const ShardRule& rule, int64_t extent, int tp_size) {
    if (rule.dim < 0) return extent;
    int64_t local = 0;
    for (const Group& g : split_groups(rule, extent, 0, tp_size)) local += g.local;
    return local;
}

Shape shard_shape(const ShardRule& rule, const Shape& global, int tp_size) {
    Shape local = global;
    if (rule.dim < 0) return local;
    ETE_ASSERT(size_t(rule.dim) < global.size());
    local[size_t(rule.dim)] = shard_extent(rule, global[size_t(rule.dim)], tp_size);
    return local;
}

std::vector<ShardRun> shard_runs(const ParamSpec& s, int tp_rank, int tp_size) {
    const int64_t n = shape_numel(s.shape);
    if (s.shard.dim < 0) return {{0, 0, n}};
    const Shape& gs = s.global_shape;
    const size_t d = size_t(s.shard.dim);
    int64_t outer = 1, inner = 1;
    for (size_t i = 0; i < d; ++i) outer *= gs[i];
    for (size_t i = d + 1; i < gs.size(); ++i) inner *= gs[i];
    const int64_t E = gs[d];
    const std::vector<Group> groups = split_groups(s.shard, E, tp_rank, tp_size);
    const int64_t el = shard_extent(s.shard, E, tp_size);  // local extent of the split dim
    std::vector<ShardRun> runs;
    // Appends a run, merging it into the previous one when both are contiguous.
    auto push = [&](int64_t local, int64_t global, int64_t len) {
        if (len == 0) return;
        if (!runs.empty()) {
            ShardRun& b = runs.back();
            bool both_pad = b.global < 0 && global < 0;
            bool contiguous = b.global >= 0 && global >= 0 && b.global + b.len == global;
            if (b.local + b.len == local && (both_pad || contiguous)) {
                b.len += len;
                return;
            }
        }
        runs.push_back({local, global, len});
    };
    for (int64_t o = 0; o < outer; ++o) {
        int64_t local = o * el * inner;
        for (const Group& g : groups) {
            const int64_t valid = std::clamp<int64_t>(g.width - g.part * g.local, 0, g.local);
            push(local, (o * E + g.begin + g.part * g.local) * inner, valid * inner);
            push(local + valid * inner, -1, (g.local - valid) * inner);
            local += g.local * inner;
        }
    }
    ETE_ASSERT(!runs.empty() && runs.back().local + runs.back().len == n);
    return runs;
}

bool shard_has_padding(const ParamSpec& s, int tp_size) {
    if (s.shard.dim < 0 || !s.shard.pad) return false;
    for (const Group& g : split_groups(s.shard, s.global_shape[size_t(s.shard.dim)], 0, tp_size))
        if (g.width % g.parts != 0) return true;
    return false;
}

void shard_from_global(const ParamSpec& s, int tp_rank, int tp_size, const float* global,
                       float* local) {
    for (const ShardRun& r : shard_runs(s, tp_rank, tp_size)) {
        if (r.global < 0) {
            std::fill_n(local + r.local, r.len, 0.0f);
        } else {
            std::copy_n(global + r.global, r.len, local + r.local);
        }
    }
}

void shard_to_global(const ParamSpec& s, int tp_rank, int tp_size, const float* local,
                     float* global) {
    for (const ShardRun& r : shard_runs(s, tp_rank, tp_size))
        if (r.global >= 0) std::copy_n(local + r.local, r.len, global + r.global);
}

void shard_zero_padding(const ParamSpec& s, int tp_rank, int tp_size, float* local) {
    for (const ShardRun& r : shard_runs(s, tp_rank, tp_size))
        if (r.global < 0) std::fill_n(local + r.local, r.len, 0.0f);
}

}  // namespace ete
