// ete/optim/adamw.cpp
#include "ete/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"

namespace ete {

AdamW::AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg)
    : AdamW(store, backend, cfg, 0, store.numel()) {}

AdamW::AdamW(ParamStore& store, Backend& backend, AdamWConfig cfg, int64_t begin, int64_t end)
    : Optimizer(store, backend, begin, end), cfg_(cfg) {
    const size_t bytes = size_t(end - begin) * sizeof(float);
    m_ = DeviceBuffer(be_, bytes);
    v_ = DeviceBuffer(be_, bytes);
    be_.fill_bytes(m_.data(), 0, bytes);
    be_.fill_bytes(v_.data(), 0, bytes);
}

const std::vector<std::string>& AdamW::state_names() const {
    static const std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
    return names;
}

void AdamW::release_state() {
    m_.reset();
    v_.reset();
    released_ = true;
}

void AdamW::download_state(int k, int64_t first, int64_t n, float* out) const {
    check_range("AdamW", first, n);
    const DeviceBuffer& b = k == 0 ? m_ : v_;
    be_.download(out, static_cast<const char*>(b.data()) + size_t(first - begin_) * sizeof(float),
                 size_t(n) * sizeof(float));
}

void AdamW::upload_state(int k, int64_t first, int64_t n, const float* in) {
    check_range("AdamW", first, n);
    DeviceBuffer& b = k == 0 ? m_ : v_;
    be_.upload(static_cast<char*>(b.data()) + size_t(first - begin_) * sizeof(float), in,
               size_t(n) * sizeof(float));
}

void AdamW::step(double lr, float grad_scale) {
    check_range("AdamW", begin_, 0);
    ++t_;
    Vec p = store_.masters(), g = store_.grads(), copy = store_.compute_copy();
    for (const Segment& sg : segments()) {
        const AdamWStep s =
            adamw_step_of(cfg_, store_.specs()[size_t(sg.param)], lr, grad_scale, t_);
        const int64_t lo = sg.lo, n = sg.hi - sg.lo, at = lo - store_.flat_begin();
        be_.adamw_step(p.slice(at, n), g.slice(lo - store_.grad_begin(), n),
                       exp_avg().slice(lo - begin_, n), exp_avg_sq().slice(lo - begin_, n), s,
                       copy.empty() ? Vec{} : copy.slice(at, n));
    }
}

float clip_coefficient(double norm, double clip) {
    if (clip <= 0) return 1.0f;
    // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, computed in f32.
    return std::min(1.0f, float(clip) / (float(norm) + 1e-6f));
}

namespace {

// The squared norm of the gradients of flat elements [begin, end) that count in the norm, parameter
// by parameter; *finite: whether every one of those elements (counted or not) is finite.
double counted_squares(ParamStore& store, Backend& backend, int64_t begin, int64_t end,
                       bool* finite) {
    double sq = 0;
    *finite = true;
    for (int i = 0; i < store.size(); ++i) {
        if (!store.trainable(i)) continue;
        const int64_t lo = std::max(begin, store.offset(i));
        const int64_t hi = std::min(end, store.offset(i) + store.numel(i));
        if (lo >= hi) continue;
        const double s = backend.sum_squares(store.grads().slice(lo - store.grad_begin(), hi - lo));
        *finite = *finite && std::isfinite(s);
        if (store.counts_in_norm(i)) sq += s;
    }
    return sq;
}

}  // namespace

double grad_norm(ParamStore& store, Backend& backend, Communicator* mp, bool* local_finite) {
    if (!mp || mp->size() == 1) {
        // One process holds each element once: every element is counted.
        const double sq = backend.sum_squares(store.grads());
        if (local_finite) *local_finite = std::isfinite(sq);
        return std::sqrt(sq);
    }
    bool finite = true;
    double sq = counted_squares(store, backend, 0, store.numel(), &finite);
    if (local_finite) *local_finite = finite;
    mp->all_reduce(&sq, 1, DType::F64, ReduceOp::Sum);
    return std::sqrt(sq);
}

double sharded_grad_norm(ParamStore& store, Backend& backend, Communicator* mp, Communicator& dp,
                         int64_t begin, int64_t end, bool* local_finite) {
    bool finite = true;
    double sq = counted_squares(store, backend, begin, end, &finite);
    if (local_finite) *local_finite = finite;
    dp.all_reduce(&sq, 1, DType::F64, ReduceOp::Sum);
    if (mp && mp->size() > 1) mp->all_reduce(&sq, 1, DType::F64, ReduceOp::Sum);
    return std::sqrt(sq);
}

double clip_grad_norm(ParamStore& store, Backend& backend, double clip, Communicator* mp) {
    const double norm = grad_norm(store, backend, mp);
    const float coef = clip_coefficient(norm, clip);
    if (coef < 1.0f) backend.scale(store.grads(), coef);
    return norm;
}

double clip_grad_norm(ParamStore& store, Backend& backend, double clip) {
    return clip_grad_norm(store, backend, clip, nullptr);
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
