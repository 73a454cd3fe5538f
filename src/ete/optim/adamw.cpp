// ete/optim/adamw.cpp
#include "ete/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"

namespace ete {

AdamW::AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg)
    : AdamW(store, backend, cfg, 0, store.numel()) {}

AdamW::AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg, int64_t begin, int64_t end)
    : store_(store), be_(backend), cfg_(cfg), begin_(begin), end_(end) {
    ETE_ASSERT(0 <= begin && begin <= end && end <= store.numel());
    m_ = Tensor::zeros({end - begin});
    v_ = Tensor::zeros({end - begin});
}

void AdamW::step(double lr) {
    ++t_;
    float bc1 = float(1.0 - std::pow(cfg_.beta1, double(t_)));
    float bc2 = float(1.0 - std::pow(cfg_.beta2, double(t_)));
    const auto& specs = store_.specs();
    for (size_t i = 0; i < specs.size(); ++i) {
        if (!specs[i].trainable) continue;
        // The part of parameter i inside [begin_, end_).
        const int64_t off = store_.offset(int(i)), n = shape_numel(specs[i].shape);
        const int64_t lo = std::max(off, begin_), hi = std::min(off + n, end_);
        if (lo >= hi) continue;
        float wd = param_decays(specs[i]) ? float(cfg_.weight_decay) : 0.0f;
        be_.adamw_step(store_.params() + lo, store_.grads() + lo, m_.f32() + (lo - begin_),
                       v_.f32() + (lo - begin_), hi - lo, float(lr), float(cfg_.beta1),
                       float(cfg_.beta2), float(cfg_.eps), wd, bc1, bc2);
    }
}

double clip_grad_norm(ParamStore& store, Backend& backend, double clip) {
    double norm = std::sqrt(backend.sum_squares(store.grads(), store.numel()));
    if (clip > 0) {
        // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, computed in f32.
        float coef = float(clip) / (float(norm) + 1e-6f);
        if (coef < 1.0f) backend.scale(store.grads(), coef, store.numel());
    }
    return norm;
}

double clip_grad_norm(ParamStore& store, Backend& backend, double clip, Communicator* mp) {
    if (!mp || mp->size() == 1) return clip_grad_norm(store, backend, clip);
    double sq = 0;
    for (size_t i = 0; i < store.specs().size(); ++i)
        if (store.counts_in_norm(int(i)))
            sq += backend.sum_squares(store.grad(int(i)), store.numel(int(i)));
    mp->all_reduce(&sq, 1, DType::F64, ReduceOp::Sum);
    const double norm = std::sqrt(sq);
    if (clip > 0) {
        float coef = float(clip) / (float(norm) + 1e-6f);
        if (coef < 1.0f) backend.scale(store.grads(), coef, store.numel());
    }
    return norm;
}

LrSchedule lr_schedule_from_name(const std::string& name) {
    if (name == "constant") return LrSchedule::Constant;
    if (name == "cosine") return LrSchedule::Cosine;
    if (name == "linear") return LrSchedule::Linear;
    throw_error(fmt::format("train.lr_schedule = '{}': expected constant, cosine or linear", name));
}

double lr_at(LrSchedule s, int64_t step, int64_t total, int64_t warmup, double peak,
             double min_lr) {
    if (step < warmup) return peak * double(step + 1) / double(warmup);
    if (s == LrSchedule::Constant || total <= warmup + 1) return peak;
    double progress = double(step - warmup) / double(total - warmup - 1);  // 0 .. 1
    double k = s == LrSchedule::Cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
    return min_lr + (peak - min_lr) * k;
}

}  // namespace ete
