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
    const size_t bytes = size_t(end - begin) * sizeof(float);
    m_ = DeviceBuffer(be_, bytes);
    v_ = DeviceBuffer(be_, bytes);
    be_.fill_bytes(m_.data(), 0, bytes);
    be_.fill_bytes(v_.data(), 0, bytes);
}

void AdamW::release_moments() {
    m_.reset();
    v_.reset();
    released_ = true;
}

void AdamW::check_moments() const {
    ETE_CHECK(!released_, "AdamW: the moments were released (training is over)");
}

std::vector<float> AdamW::download_exp_avg() const {
    check_moments();
    std::vector<float> h(static_cast<size_t>(end_ - begin_));
    be_.download(h.data(), m_.data(), m_.bytes());
    return h;
}

std::vector<float> AdamW::download_exp_avg_sq() const {
    check_moments();
    std::vector<float> h(static_cast<size_t>(end_ - begin_));
    be_.download(h.data(), v_.data(), v_.bytes());
    return h;
}

void AdamW::download_range(const DeviceBuffer& b, int64_t first, int64_t n, float* out) const {
    check_moments();
    ETE_CHECK(first >= begin_ && n >= 0 && first + n <= end_,
              "AdamW: moments [{}, {}) outside this optimizer's [{}, {})", first, first + n, begin_,
              end_);
    be_.download(out, static_cast<const char*>(b.data()) + size_t(first - begin_) * sizeof(float),
                 size_t(n) * sizeof(float));
}

void AdamW::upload_moments(int64_t first, int64_t n, const float* m, const float* v) {
    check_moments();
    ETE_CHECK(first >= begin_ && n >= 0 && first + n <= end_,
              "AdamW: moments [{}, {}) outside this optimizer's [{}, {})", first, first + n, begin_,
              end_);
    const size_t at = size_t(first - begin_) * sizeof(float), bytes = size_t(n) * sizeof(float);
    if (m) be_.upload(static_cast<char*>(m_.data()) + at, m, bytes);
    if (v) be_.upload(static_cast<char*>(v_.data()) + at, v, bytes);
}

void AdamW::download_exp_avg(int64_t first, int64_t n, float* out) const {
    download_range(m_, first, n, out);
}

void AdamW::download_exp_avg_sq(int64_t first, int64_t n, float* out) const {
    download_range(v_, first, n, out);
}

void AdamW::upload_moments(const float* m, const float* v) {
    check_moments();
    be_.upload(m_.data(), m, m_.bytes());
    be_.upload(v_.data(), v, v_.bytes());
}

void AdamW::step(double lr, float grad_scale) {
    check_moments();
    ++t_;
    float bc1 = float(1.0 - std::pow(cfg_.beta1, double(t_)));
    float bc2 = float(1.0 - std::pow(cfg_.beta2, double(t_)));
    const auto& specs = store_.specs();
    Vec p = store_.masters(), g = store_.grads(), copy = store_.compute_copy();
    for (size_t i = 0; i < specs.size(); ++i) {
        if (!specs[i].trainable) continue;
        // The part of parameter i inside [begin_, end_).
        const int64_t off = store_.offset(int(i)), n = shape_numel(specs[i].shape);
        const int64_t lo = std::max(off, begin_), hi = std::min(off + n, end_);
        if (lo >= hi) continue;
        float wd = param_decays(specs[i]) ? float(cfg_.weight_decay) : 0.0f;
        AdamWStep s{float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), wd, bc1,
                    bc2,       grad_scale};
        be_.adamw_step(p.slice(lo, hi - lo), g.slice(lo, hi - lo),
                       exp_avg().slice(lo - begin_, hi - lo),
                       exp_avg_sq().slice(lo - begin_, hi - lo), s,
                       copy.empty() ? Vec{} : copy.slice(lo, hi - lo));
    }
}

float clip_coefficient(double norm, double clip) {
    if (clip <= 0) return 1.0f;
    // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, computed in f32.
    return std::min(1.0f, float(clip) / (float(norm) + 1e-6f));
}

double grad_norm(ParamStore& store, Backend& backend, Communicator* mp, bool* local_finite) {
    if (!mp || mp->size() == 1) {
        // One process holds each element once: every element is counted.
        const double sq = backend.sum_squares(store.grads());
        if (local_finite) *local_finite = std::isfinite(sq);
        return std::sqrt(sq);
    }
    double sq = 0;
    bool finite = true;
    for (int i = 0; i < store.size(); ++i) {
        if (!store.trainable(i)) continue;
        const double s = backend.sum_squares(store.grad(i).flat());
        finite = finite && std::isfinite(s);
        if (store.counts_in_norm(i)) sq += s;
    }
    if (local_finite) *local_finite = finite;
    mp->all_reduce(&sq, 1, DType::F64, ReduceOp::Sum);
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
