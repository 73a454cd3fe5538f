// ete/model/param_store_zero3.cpp — a ParamStore sharded over data-parallel replicas (ZeRO-3):
// the shard of the flat buffers and the groups' windows (param_store.h).
#include <algorithm>
#include <array>

#include "ete/model/param_store.h"

namespace ete {

ParamStore::Place ParamStore::place(Flat which, int i) const {
    if (which == Flat::Grad ? !grads_sharded() : !sharded()) {
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

namespace {

size_t align64(size_t b) {
    return (b + 63) / 64 * 64;
}

// An NF4 weight's parts as stored: packed codes, absmax (8-bit with double quantization), the
// nested absmax and the 256-entry map.
std::array<size_t, 4> nf4_parts(const ParamSpec& s, bool dq) {
    const int64_t n = shape_numel(s.shape), blocks = (n + s.nf4_block - 1) / s.nf4_block;
    return {size_t((n + 1) / 2), size_t(blocks) * (dq ? 1 : 4),
            dq ? size_t((blocks + kNf4NestedBlock - 1) / kNf4NestedBlock) * 4 : 0,
            dq ? size_t(256 * 4) : 0};
}

}  // namespace

bool ParamStore::nf4_double_quant(int i) const {
    const ParamSpec& s = specs()[size_t(i)];
    // A tensor-parallel shard keeps its blocks' absmax in fp32 (model/nf4_shard.h).
    return s.nf4_double_quant && (tp_size() == 1 || s.shard.dim < 0);
}

size_t ParamStore::frozen_param_bytes(int i) const {
    const ParamSpec& s = specs()[size_t(i)];
    if (is_nf4(i)) {
        size_t n = 0;
        for (size_t b : nf4_parts(s, nf4_double_quant(i))) n += b;
        return n;
    }
    return size_t(ParamTable::numel(i)) * dtype_size(frozen_dtype(s, compute_));
}

size_t ParamStore::place_frozen(const ShardGroup& g, std::vector<size_t>& load,
                                std::vector<int>& owner, std::vector<size_t>& at) const {
    size_t bytes = 0;
    for (int i = g.first; i < g.last; ++i) {
        if (trainable(i)) continue;
        const size_t b = frozen_param_bytes(i);
        // To the replica holding the fewest frozen bytes so far (over every group placed).
        const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
        load[size_t(r)] += b;
        owner[size_t(i)] = r;
        at[size_t(i)] = bytes;
        bytes = align64(bytes + (is_nf4(i) ? 4 * 64 + b : b));  // NF4: each part 64-aligned
    }
    return bytes;
}

std::pair<size_t, size_t> ParamStore::zero3_frozen_bytes(const std::vector<ShardGroup>& groups,
                                                         int dp) const {
    std::vector<size_t> capacity, load(size_t(dp), 0);
    std::vector<int> owner(size_t(size()), -1);
    std::vector<size_t> at(size_t(size()), 0);
    for (const ShardGroup& g : groups) {
        const size_t bytes = place_frozen(g, load, owner, at);
        if (size_t(g.window) >= capacity.size()) capacity.resize(size_t(g.window) + 1, 0);
        capacity[size_t(g.window)] = std::max(capacity[size_t(g.window)], bytes);
    }
    size_t windows = 0;
    for (size_t c : capacity) windows += c;
    return {*std::max_element(load.begin(), load.end()), windows};
}

void ParamStore::shard(const std::vector<ShardGroup>& groups, int dp, int rank, bool params) {
    const ShardRange mine = zero_shard(numel(), dp, rank);
    ETE_CHECK(!groups.empty(), "ZeRO-3: no parameter groups");
    int64_t at = 0;
    int windows = 0, param = 0;
    for (const ShardGroup& g : groups) {
        ETE_CHECK(g.offset == at && g.count >= 0 && g.window >= 0 && g.first == param &&
                      g.last >= g.first,
                  "ZeRO-3: group at {} of {} elements (parameters [{}, {})) does not continue the "
                  "layout at {} (parameter {})",
                  g.offset, g.count, g.first, g.last, at, param);
        at += g.count;
        param = g.last;
        windows = std::max(windows, g.window + 1);
    }
    ETE_CHECK(at == numel() && param == size(),
              "ZeRO-3: the groups cover {} of {} elements, {} of {} parameters", at, numel(), param,
              size());
    groups_ = groups;
    grad_flat_ = mine;
    shard_rank_ = rank;
    const bool grads = !grads_released_;
    if (grads) grad_ = DeviceBuffer::zeroed(be_, size_t(mine.size()) * sizeof(float));
    windows_.clear();
    windows_.resize(size_t(windows));
    group_of_.assign(size_t(size()), -1);
    if (!params) {  // ZeRO-2: gradient windows only
        for (size_t g = 0; g < groups_.size(); ++g) {
            WindowBuffers& w = windows_[size_t(groups_[g].window)];
            w.capacity = std::max(w.capacity, groups_[g].count);
            for (int i = groups_[g].first; i < groups_[g].last; ++i) group_of_[size_t(i)] = int(g);
        }
        for (WindowBuffers& w : windows_)
            if (grads) w.grad = DeviceBuffer::zeroed(be_, size_t(w.capacity) * sizeof(float));
        return;
    }
    params_sharded_ = true;
    flat_ = mine;
    master_ = DeviceBuffer::zeroed(be_, size_t(mine.size()) * sizeof(float));
    compute_copy_.reset();
    frozen_owner_.assign(size_t(size()), -1);
    frozen_at_.assign(size_t(size()), 0);
    nf4_home_.clear();
    nf4_home_.resize(size_t(size()));
    std::vector<size_t> load(size_t(dp), 0);  // each replica's frozen bytes so far
    build_runs();
    for (size_t g = 0; g < groups_.size(); ++g) {
        WindowBuffers& w = windows_[size_t(groups_[g].window)];
        w.capacity = std::max(w.capacity, groups_[g].count);
        for (int i = groups_[g].first; i < groups_[g].last; ++i) group_of_[size_t(i)] = int(g);
        w.frozen_capacity =
            std::max(w.frozen_capacity, place_frozen(groups_[g], load, frozen_owner_, frozen_at_));
    }
    for (WindowBuffers& w : windows_) {
        const size_t n = size_t(w.capacity);
        w.master = DeviceBuffer::zeroed(be_, n * sizeof(float));
        if (compute_ != DType::F32) w.compute = DeviceBuffer::zeroed(be_, n * dtype_size(compute_));
        if (grads) w.grad = DeviceBuffer::zeroed(be_, n * sizeof(float));
        if (w.frozen_capacity) w.frozen = DeviceBuffer::zeroed(be_, w.frozen_capacity);
    }
    for (int i = 0; i < size(); ++i) {
        if (trainable(i)) continue;
        frozen_[size_t(i)].reset();  // a dense one's own buffer, on its owner only
        if (is_nf4(i))
            nf4_[size_t(i)] = Nf4Buffer::over(window_nf4_view(i));
        else if (frozen_owner_[size_t(i)] == rank)
            frozen_[size_t(i)] = DeviceBuffer::zeroed(be_, frozen_param_bytes(i));
    }
}

void ParamStore::build_runs() {
    runs_.assign(groups_.size(), {});
    for (size_t g = 0; g < groups_.size(); ++g) {
        for (int i = groups_[g].first; i < groups_[g].last; ++i) {
            if (!trainable(i) || ParamTable::numel(i) == 0) continue;
            std::vector<GatherRun>& runs = runs_[g];
            const bool c = gathered_compute(i);
            if (!runs.empty() && runs.back().compute == c)
                runs.back().count += ParamTable::numel(i);
            else
                runs.push_back({offset(i), ParamTable::numel(i), c});
        }
    }
}

const void* ParamStore::frozen_data(int i) const {
    if (!sharded()) return frozen_[size_t(i)].data();
    const WindowBuffers& w = windows_[size_t(groups_[size_t(group_of_[size_t(i)])].window)];
    return static_cast<const char*>(w.frozen.data()) + frozen_at_[size_t(i)];
}

Nf4View ParamStore::window_nf4_view(int i) const {
    const ParamSpec& s = specs()[size_t(i)];
    const std::array<size_t, 4> parts = nf4_parts(s, nf4_double_quant(i));
    const char* base = static_cast<const char*>(frozen_data(i));
    std::array<const void*, 4> at{};
    for (size_t k = 0, off = 0; k < 4; off += align64(parts[k]), ++k)
        at[k] = parts[k] ? base + off : nullptr;
    Nf4View v = nf4_[size_t(i)].view();  // its shape; the offset comes with the upload
    v.packed = at[0], v.absmax = at[1], v.nested_absmax = at[2], v.nested_map = at[3];
    v.rows = s.shape[0], v.cols = s.shape[1], v.blocksize = s.nf4_block;
    v.nested_blocksize = kNf4NestedBlock;
    return v;
}

void ParamStore::upload_nf4_sharded(int i, const Nf4Tensor& t) {
    const ParamSpec& s = specs()[size_t(i)];
    ETE_CHECK(t.blocksize == s.nf4_block && t.double_quant() == nf4_double_quant(i) &&
                  (!t.double_quant() || t.nested_blocksize == kNf4NestedBlock),
              "parameter '{}': an NF4 tensor of block size {}{} where this run's ZeRO-3 windows "
              "expect {}{} (lora.nf4_blocksize, lora.nf4_double_quant)",
              s.name, t.blocksize, t.double_quant() ? " with double quantization" : "", s.nf4_block,
              nf4_double_quant(i) ? " with double quantization" : "");
    Nf4View v = window_nf4_view(i);
    v.offset = t.offset;
    nf4_[size_t(i)] = Nf4Buffer::over(v);
    if (frozen_owner_[size_t(i)] == shard_rank_) nf4_home_[size_t(i)] = Nf4Buffer(be_, t);
}

std::vector<ParamStore::FrozenPiece> ParamStore::frozen_pieces(int g) const {
    std::vector<FrozenPiece> out;
    const ShardGroup& sg = groups_[size_t(g)];
    for (int i = sg.first; i < sg.last; ++i) {
        if (trainable(i)) continue;
        const int owner = frozen_owner_[size_t(i)];
        const bool mine = owner == shard_rank_;
        if (!is_nf4(i)) {
            out.push_back({const_cast<void*>(frozen_data(i)),
                           mine ? frozen_[size_t(i)].data() : nullptr, frozen_param_bytes(i),
                           owner});
            continue;
        }
        const Nf4View w = nf4_[size_t(i)].view(), h = nf4_home_[size_t(i)].view();
        const std::array<size_t, 4> parts = nf4_parts(specs()[size_t(i)], nf4_double_quant(i));
        const void* wp[4] = {w.packed, w.absmax, w.nested_absmax, w.nested_map};
        const void* hp[4] = {h.packed, h.absmax, h.nested_absmax, h.nested_map};
        ETE_CHECK(!mine || h.packed, "parameter '{}': its NF4 weight was never loaded",
                  specs()[size_t(i)].name);
        for (size_t k = 0; k < 4; ++k)
            if (parts[k])
                out.push_back({const_cast<void*>(wp[k]), mine ? hp[k] : nullptr, parts[k], owner});
    }
    return out;
}

ParamStore::Window ParamStore::window(int g) {
    const ShardGroup& s = groups_[size_t(g)];
    WindowBuffers& w = windows_[size_t(s.window)];
    Window out;
    if (w.master.data()) out.master = Vec{w.master.data(), DType::F32, s.count};
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
