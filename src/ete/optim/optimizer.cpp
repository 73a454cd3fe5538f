// ete/optim/optimizer.cpp
#include "ete/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"
#include "ete/optim/adamw.h"
#include "ete/optim/adamw8bit.h"

namespace ete {

OptimizerKind optimizer_kind_from_name(const std::string& name) {
    if (name == "adamw") return OptimizerKind::AdamW;
    if (name == "adamw8bit") return OptimizerKind::AdamW8bit;
    throw_error(fmt::format("train.optimizer = '{}': expected adamw or adamw8bit", name));
}

const char* optimizer_name(OptimizerKind k) {
    return k == OptimizerKind::AdamW ? "adamw" : "adamw8bit";
}

Optimizer::Optimizer(ParamStore& store, Backend& backend, int64_t begin, int64_t end)
    : store_(store), be_(backend), begin_(begin), end_(end) {
    ETE_ASSERT(0 <= begin && begin <= end && end <= store.numel());
    ETE_ASSERT(begin >= store.flat_begin() && end <= store.flat_end());  // held by this store
    ETE_ASSERT(begin >= store.grad_begin() && end <= store.grad_end());
}

std::vector<float> Optimizer::download_state(int k) const {
    std::vector<float> h(size_t(end_ - begin_));
    download_state(k, begin_, end_ - begin_, h.data());
    return h;
}

void Optimizer::check_range(const char* what, int64_t first, int64_t n) const {
    ETE_CHECK(!released_, "{}: the optimizer state was released (training is over)", what);
    ETE_CHECK(first >= begin_ && n >= 0 && first + n <= end_,
              "{}: state [{}, {}) outside this optimizer's [{}, {})", what, first, first + n,
              begin_, end_);
}

std::vector<Optimizer::Segment> Optimizer::segments() const {
    std::vector<Segment> out;
    for (int i = 0; i < store_.size(); ++i) {
        if (!store_.trainable(i)) continue;
        const int64_t off = store_.offset(i);
        const int64_t lo = std::max(off, begin_), hi = std::min(off + store_.numel(i), end_);
        if (lo < hi) out.push_back({i, lo, hi});
    }
    return out;
}

AdamWStep adamw_step_of(const AdamWConfig& c, const ParamSpec& spec, double lr, float grad_scale,
                        int64_t t) {
    const float bc1 = float(1.0 - std::pow(c.beta1, double(t)));
    const float bc2 = float(1.0 - std::pow(c.beta2, double(t)));
    const float wd = param_decays(spec) ? float(c.weight_decay) : 0.0f;
    return {float(lr), float(c.beta1), float(c.beta2), float(c.eps), wd, bc1, bc2, grad_scale};
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, ParamStore& store,
                                          Backend& backend, int64_t begin, int64_t end) {
    if (c.kind == OptimizerKind::AdamW8bit)
        return std::make_unique<AdamW8bit>(store, backend, c.adamw, begin, end);
    return std::make_unique<AdamW>(store, backend, c.adamw, begin, end);
}

int64_t optimizer_state_bytes(OptimizerKind k, const std::vector<ParamSpec>& specs, int64_t begin,
                              int64_t end) {
    int64_t off = 0, bytes = 0;
    for (const ParamSpec& s : specs) {
        if (!s.trainable) continue;
        const int64_t n = shape_numel(s.shape);
        const int64_t lo = std::max(off, begin), hi = std::min(off + n, end);
        off += n;
        if (lo >= hi) continue;
        bytes += k == OptimizerKind::AdamW8bit ? AdamW8bit::segment_bytes(s, hi - lo)
                                               : 2 * (hi - lo) * int64_t(sizeof(float));
    }
    return bytes;
}

}  // namespace ete
