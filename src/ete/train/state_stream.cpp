// ete/train/state_stream.cpp
#include "ete/train/state_stream.h"

#include <algorithm>

#include "ete/core/error.h"
#include "ete/model/shard.h"

namespace ete {

namespace {

constexpr int64_t kDone = -1;  // the item rank 0 broadcasts when the save is over

}  // namespace

StateStream::StateStream(const LayoutMap& layout, ParamStore& store, Optimizer& opt,
                         Communicator& world, StreamRoles roles)
    : layout_(layout),
      ps_(store),
      opt_(opt),
      world_(world),
      roles_(roles),
      tensors_(int64_t(layout.global_specs().size())) {
    if (world_.size() == 1) roles_.solo = true;
}

CheckpointSource StateStream::source() {
    ETE_ASSERT(world_.rank() == 0);
    auto item_of = [this](int which) {
        return [this, which](int g, float* out) { fetch(which * tensors_ + g, out); };
    };
    CheckpointSource src{item_of(0), {}};
    for (int k = 0; k < opt_.state_count(); ++k)
        src.states.emplace_back(opt_.state_names()[size_t(k)], item_of(k + 1));
    return src;
}

void StateStream::fetch(int64_t item, float* out) {
    if (!roles_.solo) world_.broadcast(&item, 1, DType::I64, 0);
    contribute(item, out);
    const ParamSpec& s = layout_.global_specs()[size_t(item % tensors_)];
    if (!roles_.solo)
        world_.reduce(out, size_t(shape_numel(s.shape)), DType::F32, ReduceOp::Sum, 0);
}

void StateStream::finish() {
    if (finished_ || roles_.solo) return;
    finished_ = true;
    int64_t done = kDone;
    world_.broadcast(&done, 1, DType::I64, 0);
}

void StateStream::serve() {
    if (roles_.solo) return;
    std::vector<float> global;
    for (;;) {
        int64_t item = 0;
        world_.broadcast(&item, 1, DType::I64, 0);
        if (item == kDone) return;
        ETE_CHECK(item >= 0 && item < tensors_ * (1 + opt_.state_count()),
                  "checkpoint: rank 0 asked for tensor {} of {} (ranks disagree on the model)",
                  item, tensors_ * (1 + opt_.state_count()));
        const ParamSpec& s = layout_.global_specs()[size_t(item % tensors_)];
        global.resize(size_t(shape_numel(s.shape)));
        contribute(item, global.data());
        world_.reduce(global.data(), global.size(), DType::F32, ReduceOp::Sum, 0);
    }
}

void StateStream::contribute(int64_t item, float* out) {
    const int which = int(item / tensors_), g = int(item % tensors_);
    const ParamSpec& gs = layout_.global_specs()[size_t(g)];
    std::fill_n(out, shape_numel(gs.shape), -0.0f);
    if (!ps_.has(gs.name)) return;  // another pipeline stage's
    const int i = ps_.index(gs.name);
    if (!ps_.counts_in_norm(i)) return;  // another tensor-parallel rank's part (or a tied copy)
    if (!(which == 0 ? roles_.param_writer : roles_.state_writer)) return;
    const int64_t off = ps_.offset(i), n = ps_.numel(i);
    local_.assign(size_t(n), -0.0f);
    if (which == 0 && ps_.sharded() && ps_.trainable(i)) {
        ps_.download_owned(i, local_.data());  // ZeRO-3: this replica's part
    } else if (which == 0) {
        const std::vector<float> v = ps_.download(i);
        std::copy(v.begin(), v.end(), local_.begin());
    } else {
        const int64_t lo = std::max(off, opt_.shard_begin());
        const int64_t hi = std::min(off + n, opt_.shard_end());
        if (lo >= hi) return;  // another replica's shard
        opt_.download_state(which - 1, lo, hi - lo, local_.data() + (lo - off));
    }
    shard_to_global(ps_.specs()[size_t(i)], ps_.tp_rank(), ps_.tp_size(), local_.data(), out);
}

CheckpointSink StateStream::sink() {
    CheckpointSink s;
    s.param = [this](int g, const float* v) { take_param(g, v); };
    for (int k = 0; k < opt_.state_count(); ++k)
        s.states.emplace_back(opt_.state_names()[size_t(k)],
                              [this, k](int g, const float* v) { take_state(k, g, v); });
    return s;
}

void StateStream::take_param(int g, const float* global) {
    const std::string& name = layout_.global_specs()[size_t(g)].name;
    if (!ps_.has(name)) return;
    const int i = ps_.index(name);
    local_.resize(size_t(ps_.numel(i)));
    shard_from_global(ps_.specs()[size_t(i)], ps_.tp_rank(), ps_.tp_size(), global, local_.data());
    ps_.upload(i, local_.data());
}

void StateStream::take_state(int k, int g, const float* global) {
    const std::string& name = layout_.global_specs()[size_t(g)].name;
    if (!ps_.has(name)) return;
    const int i = ps_.index(name);
    const int64_t off = ps_.offset(i), n = ps_.numel(i);
    const int64_t lo = std::max(off, opt_.shard_begin()), hi = std::min(off + n, opt_.shard_end());
    if (lo >= hi) return;
    local_.resize(size_t(n));
    shard_from_global(ps_.specs()[size_t(i)], ps_.tp_rank(), ps_.tp_size(), global, local_.data());
    opt_.upload_state(k, lo, hi - lo, local_.data() + (lo - off));
}

}  // namespace ete
