// ete/model/param_store_zero3.cpp — a ParamStore sharded over data-parallel replicas (ZeRO-3):
// the shard of the flat buffers and the groups' windows (param_store.h).
#include <algorithm>

#include "ete/model/param_store.h"

namespace ete {

ParamStore::Place ParamStore::place(Flat which, int i) const {
    if (!sharded()) {
        void* base = which == Flat::Master    ? master_.data()
                     : which == Flat::Compute ? compute_copy_.data()
                                              : grad_.data();
        return {base, offset(i), numel()};
    }
    const ShardGroup& g = groups_[size_t(group_of_[size_t(i)])];
    const WindowBuffers& w = windows_[size_t(g.window)];
    void* base = which == Flat::Master    ? w.master.data()
                 : which == Flat::Compute ? w.compute.data()
                                          : w.grad.data();
    return {base, offset(i) - g.offset, w.capacity};
}

void ParamStore::shard(const std::vector<ShardGroup>& groups, ShardRange mine) {
    ETE_CHECK(!groups.empty() && mine.begin >= 0 && mine.end <= numel() && mine.size() >= 0,
              "ZeRO-3: shard [{}, {}) of {} elements in {} groups", mine.begin, mine.end, numel(),
              groups.size());
    int64_t at = 0;
    int windows = 0;
    for (const ShardGroup& g : groups) {
        ETE_CHECK(g.offset == at && g.count >= 0 && g.window >= 0,
                  "ZeRO-3: group at {} of {} elements does not continue the layout at {}", g.offset,
                  g.count, at);
        at += g.count;
        windows = std::max(windows, g.window + 1);
    }
    ETE_CHECK(at == numel(), "ZeRO-3: the groups cover {} of {} elements", at, numel());
    for (int i = 0; i < size(); ++i)
        ETE_CHECK(trainable(i) || !is_nf4(i),
                  "ZeRO-3: parameter '{}' is a frozen NF4 weight (not sharded yet)",
                  specs()[size_t(i)].name);
    groups_ = groups;
    flat_ = mine;
    const bool grads = !grads_released_;
    master_ = DeviceBuffer::zeroed(be_, size_t(mine.size()) * sizeof(float));
    if (grads) grad_ = DeviceBuffer::zeroed(be_, size_t(mine.size()) * sizeof(float));
    compute_copy_.reset();
    windows_.clear();
    windows_.resize(size_t(windows));
    for (const ShardGroup& g : groups_) {
        int64_t& cap = windows_[size_t(g.window)].capacity;
        cap = std::max(cap, g.count);
    }
    for (WindowBuffers& w : windows_) {
        const size_t n = size_t(w.capacity);
        w.master = DeviceBuffer::zeroed(be_, n * sizeof(float));
        if (compute_ != DType::F32) w.compute = DeviceBuffer::zeroed(be_, n * dtype_size(compute_));
        if (grads) w.grad = DeviceBuffer::zeroed(be_, n * sizeof(float));
    }
    group_of_.assign(size_t(size()), -1);
    size_t g = 0;
    for (int i = 0; i < size(); ++i) {
        if (!trainable(i)) continue;
        while (offset(i) >= groups_[g].offset + groups_[g].count) ++g;
        group_of_[size_t(i)] = int(g);
    }
}

ParamStore::Window ParamStore::window(int g) {
    const ShardGroup& s = groups_[size_t(g)];
    WindowBuffers& w = windows_[size_t(s.window)];
    Window out;
    out.master = Vec{w.master.data(), DType::F32, s.count};
    if (w.compute.data()) out.compute = Vec{w.compute.data(), compute_, s.count};
    if (w.grad.data()) out.grad = Vec{w.grad.data(), DType::F32, s.count};
    return out;
}

void ParamStore::download_owned(int i, float* out) const {
    ETE_ASSERT(trainable(i));
    const int64_t lo = std::max(offset(i), flat_.begin);
    const int64_t hi = std::min(offset(i) + ParamTable::numel(i), flat_.end);
    if (lo >= hi) return;
    be_.download(out + (lo - offset(i)),
                 static_cast<const float*>(master_.data()) + (lo - flat_.begin),
                 size_t(hi - lo) * sizeof(float));
}

}  // namespace ete
