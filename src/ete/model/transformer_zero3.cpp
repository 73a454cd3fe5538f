// ete/model/transformer_zero3.cpp — ZeRO-3 inside the model: the trainable parameters sharded
// over the data-parallel replicas (ModelParallel::zero3), each group gathered into its window
// just before it runs and its gradient reduced into the owners' shards just after its backward
// (docs/parallel.md "ZeRO").
//
// A replica's shard is the contiguous one of parallel/zero.h (the same as stages 1 and 2, so the
// optimizer, the gradient norm and checkpoints see one layout at every stage). A group
// [a, a + n) of the flat layout therefore spans the shards of one or a few replicas: it is
// gathered by one broadcast from each of them (issued together) and its gradient reduced to each
// of them, piece by piece. Windows: with reshard (parallel.zero_reshard_after_forward) the groups
// alternate between two windows in execution order (embeddings, layers, head), so consecutive
// groups never share one, forward or backward; a tied embedding that is also this stage's head
// keeps a window of its own, since its gradient accumulates from the head's forward to the end
// of backward. Without reshard every group has its own window and is gathered once per forward.
#include <algorithm>
#include <tuple>

#include "ete/model/transformer.h"

namespace ete {

std::vector<ParamStore::ShardGroup> Transformer::zero3_groups(bool reshard) const {
    const std::vector<std::pair<int, int>> r = group_params();
    const bool tied_head = mp_.first_stage() && mp_.last_stage() &&
                           head_param() == params_.find(ParamRole::TokenEmbed);
    std::vector<ParamStore::ShardGroup> groups;
    int parity = 0;
    for (size_t k = 0; k < r.size(); ++k) {
        ParamStore::ShardGroup g;
        std::tie(g.offset, g.count) = flat_range(r[k].first, r[k].second);
        g.first = r[k].first, g.last = r[k].second;
        if (!reshard) {
            g.window = int(k);
        } else if (tied_head && k == 0) {
            g.window = 2;
        } else {
            g.window = parity;
            parity ^= 1;
        }
        groups.push_back(g);
    }
    // Window numbers in use, compacted (a one-group stage uses window 0 only).
    std::vector<int> used;
    for (const auto& g : groups) used.push_back(g.window);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (auto& g : groups)
        g.window = int(std::lower_bound(used.begin(), used.end(), g.window) - used.begin());
    return groups;
}

int64_t zero3_window_elements(const std::vector<ParamStore::ShardGroup>& groups) {
    std::vector<int64_t> cap;
    for (const ParamStore::ShardGroup& g : groups) {
        if (size_t(g.window) >= cap.size()) cap.resize(size_t(g.window) + 1, 0);
        cap[size_t(g.window)] = std::max(cap[size_t(g.window)], g.count);
    }
    int64_t n = 0;
    for (int64_t c : cap) n += c;
    return n;
}

void Transformer::shard_zero3() {
    zero3_ = zero_reduce_ = mp_.zero3;
    const std::vector<ParamStore::ShardGroup> groups = zero3_groups(mp_.zero3_reshard);
    params_.shard(groups, zero3_->size(), zero3_->rank());
    if (mp_.zero_reduce_bf16)
        zero_bf16_ = DeviceBuffer::zeroed(be_, size_t(zero_largest_group(groups)) * 2);
    int windows = 0;
    for (const auto& g : groups) windows = std::max(windows, g.window + 1);
    zero3_held_.assign(size_t(windows), -1);
    zero3_pending_.resize(size_t(windows));
}

int64_t zero_largest_group(const std::vector<ParamStore::ShardGroup>& groups) {
    int64_t n = 0;
    for (const ParamStore::ShardGroup& g : groups) n = std::max(n, g.count);
    return n;
}

void Transformer::shard_zero2() {
    zero_reduce_ = mp_.zero2;
    const std::vector<ParamStore::ShardGroup> groups = zero3_groups(true);
    params_.shard(groups, zero_reduce_->size(), zero_reduce_->rank(), false);
    if (mp_.zero_reduce_bf16)
        zero_bf16_ = DeviceBuffer::zeroed(be_, size_t(zero_largest_group(groups)) * 2);
}

void Transformer::zero3_stale() {
    for (size_t w = 0; w < zero3_held_.size(); ++w) {
        wait_all(zero3_pending_[w]);  // a prefetch still landing in the window
        zero3_pending_[w].clear();
        zero3_held_[w] = -1;
    }
}

namespace {

// The piece of group [offset, offset + count) that replica r of D holds, or an empty range.
ShardRange owned_piece(int64_t numel, int D, int r, int64_t offset, int64_t count) {
    const ShardRange s = zero_shard(numel, D, r);
    const int64_t lo = std::max(offset, s.begin), hi = std::min(offset + count, s.end);
    return lo < hi ? ShardRange{lo, hi} : ShardRange{lo, lo};
}

}  // namespace

// Starts gathering group g into its window: one broadcast from each replica holding a piece of
// it (the holder first copies its piece in), left in flight in zero3_pending_.
void Transformer::zero3_start_gather(int g) {
    const ParamStore::ShardGroup& sg = params_.group(g);
    const size_t w = size_t(sg.window);
    wait_all(zero3_pending_[w]);
    zero3_pending_[w].clear();
    zero3_held_[w] = g;
    ParamStore::Window win = params_.window(g);
    Communicator& dp = *zero3_;
    // Run by run (matrices as their 16-bit copy, converted by their holder), each from the
    // replicas whose shards hold a piece of it.
    for (const ParamStore::GatherRun& run : params_.gather_runs(g)) {
        const Vec to = run.compute ? win.compute : win.master;
        for (int r = 0; r < dp.size(); ++r) {
            const ShardRange p = owned_piece(params_.numel(), dp.size(), r, run.offset, run.count);
            if (p.size() == 0) continue;
            Vec piece = to.slice(p.begin - sg.offset, p.size());
            if (r == dp.rank())
                be_.copy(as_mat(piece),
                         as_mat(params_.masters().slice(p.begin - params_.flat_begin(), p.size())));
            zero3_pending_[w].push_back(
                dp.ibroadcast(piece.data, size_t(p.size()), piece.dtype, r));
        }
    }
    // A frozen base: each parameter whole from its owner (an NF4 weight part by part).
    for (const ParamStore::FrozenPiece& f : params_.frozen_pieces(g)) {
        if (f.bytes == 0) continue;
        const int64_t n = int64_t(f.bytes);
        if (f.home) be_.copy(Mat(f.window, DType::U8, 1, n), CMat(f.home, DType::U8, 1, n));
        zero3_pending_[w].push_back(dp.ibroadcast(f.window, f.bytes, DType::U8, f.owner));
    }
    if (gather_hook_) gather_hook_();
}

void Transformer::zero3_acquire(int g, int next) {
    if (!zero3_) return;
    const size_t w = size_t(params_.group(g).window);
    if (zero3_held_[w] != g) zero3_start_gather(g);
    if (!zero3_pending_[w].empty()) {  // gathered now, or a prefetch: complete it
        wait_all(zero3_pending_[w]);
        zero3_pending_[w].clear();
        ParamStore::Window win = params_.window(g);
        const int64_t at = params_.group(g).offset;
        for (const ParamStore::GatherRun& run : params_.gather_runs(g))
            if (!win.compute.empty() && !run.compute)  // the F32 runs' compute copy
                be_.copy(as_mat(win.compute.slice(run.offset - at, run.count)),
                         as_mat(win.master.slice(run.offset - at, run.count)));
    }
    // QAT: the group's fq(W) buffers from the masters it now holds, once a step.
    if (qat_ && !qat_zero3_weights_.empty()) qat_->update_weights(qat_zero3_weights_[size_t(g)]);
    // Prefetch the group that runs next while this one computes, into a window not in use.
    if (next >= 0 && next < params_.num_groups() &&
        params_.group(next).window != params_.group(g).window &&
        zero3_held_[size_t(params_.group(next).window)] != next)
        zero3_start_gather(next);
}

void Transformer::zero3_zero_grad(int g) {
    if (!zero_reduce_) return;
    const Vec grad = params_.window(g).grad;
    if (!grad.empty()) be_.fill(as_mat(grad), 0.0f);
}

void Transformer::zero3_reduce(int g) {
    const ParamStore::ShardGroup& sg = params_.group(g);
    const Vec grad = params_.window(g).grad;
    if (grad.empty()) return;
    Communicator& dp = *zero_reduce_;
    for (int r = 0; r < dp.size(); ++r) {
        const ShardRange p = owned_piece(params_.numel(), dp.size(), r, sg.offset, sg.count);
        if (p.size() == 0) continue;
        Vec piece = grad.slice(p.begin - sg.offset, p.size());
        if (zero_bf16_.data()) {  // parallel.grad_bf16: rounded to bf16, sent, widened back
            const Mat h{zero_bf16_.data(), DType::BF16, 1, p.size()};
            be_.copy(h, as_mat(piece));
            dp.reduce(h.data, size_t(p.size()), DType::BF16, ReduceOp::Sum, r);
            if (r == dp.rank()) be_.copy(as_mat(piece), h);
        } else {
            dp.reduce(piece.data, size_t(p.size()), DType::F32, ReduceOp::Sum, r);
        }
        if (r == dp.rank())
            be_.add(as_mat(params_.grads().slice(p.begin - params_.grad_begin(), p.size())),
                    as_mat(piece));
    }
}

}  // namespace ete
