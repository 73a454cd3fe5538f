// ete/model/qat_runtime.cpp
#include "ete/model/qat_runtime.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ete/core/error.h"
#include "ete/model/lora_spec.h"

namespace ete {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Vec f32_vec(const DeviceBuffer& b, int64_t n) {
    ETE_ASSERT(size_t(n) * sizeof(float) <= b.bytes());
    return {b.data(), DType::F32, n};
}

// lo/hi pairs packed for one MIN all-reduce: [lo..., -hi...].
void reduce_ranges(Communicator* c, std::vector<float>& lo, std::vector<float>& hi) {
    if (!c || c->size() == 1) return;
    std::vector<float> packed(lo);
    for (float h : hi) packed.push_back(-h);
    c->all_reduce(packed.data(), packed.size(), DType::F32, ReduceOp::Min);
    std::copy(packed.begin(), packed.begin() + long(lo.size()), lo.begin());
    for (size_t i = 0; i < hi.size(); ++i) hi[i] = -packed[lo.size() + i];
}

}  // namespace

QatRuntime::QatRuntime(const QatSpec& spec, Backend& be, Arch arch, int layers, Communicator* tp)
    : spec_(spec), be_(be), layers_(layers), tp_(tp) {
    using R = ParamRole;
    const std::vector<R> chosen = linear_roles(spec.linears, arch);
    auto any = [&](std::initializer_list<R> roles) {
        for (R r : roles)
            if (std::find(chosen.begin(), chosen.end(), r) != chosen.end()) return true;
        return false;
    };
    if (spec.has(QatPoint::LinearIn)) {
        linear_in_[kQatLn1] = any({R::Q, R::K, R::V, R::Qkv});
        linear_in_[kQatAtt] = any({R::AttnOut});
        linear_in_[kQatLn2] = any({R::Gate, R::Up, R::Fc});
        linear_in_[kQatAct] = any({R::Down});
        linear_in_head_ = spec.quantizes_head();
    }
    points_.assign(size_t(layers + 1) * kQatSites,
                   Point{Observer(1, spec.observer, spec.averaging_constant), kInf, -kInf});
    scales_ = DeviceBuffer(be_, points_.size() * 2 * sizeof(float));
    upload_scales();
}

bool QatRuntime::site_on(int s, int l) const {
    if (!spec_.enabled) return false;
    if (s == kQatFinalNorm) return spec_.has(QatPoint::PostNorm) || linear_in_head_;
    if (!spec_.quantizes_layer(l, layers_) || s < 0 || s >= kQatSites) return false;
    switch (s) {
        case kQatAttnOut:
            return spec_.has(QatPoint::AttnOut);
        case kQatFfnOut:
            return spec_.has(QatPoint::FfnOut);
        case kQatResidMid:
        case kQatResidOut:
            return spec_.has(QatPoint::Residual);
        default:
            return ((s == kQatLn1 || s == kQatLn2) && spec_.has(QatPoint::PostNorm)) ||
                   linear_in_[size_t(s)];
    }
}

// --- weights ---

void QatRuntime::add_weight(const std::string& name, CMat src, Mat dst, Mat grad, bool quantize,
                            bool split_cols, const LearnedScale& learned) {
    ETE_ASSERT(src.rows == dst.rows && src.cols == dst.cols);
    ETE_ASSERT(learned.empty() || (quantize && !grad.empty()));
    Weight w;
    w.name = name;
    w.src = src;
    w.dst = dst;
    w.grad = grad;
    w.quantize = quantize;
    w.split_cols = split_cols;
    w.group = src.cols;
    if (quantize) {
        switch (spec_.weight_granularity) {
            case QatGranularity::Tensor:
                w.per_tensor = true;
                break;
            case QatGranularity::Group:
                ETE_CHECK(src.cols % spec_.group_size == 0,
                          "qat.group_size = {}: {} has {} input columns on this rank (expected a "
                          "multiple; under tensor parallelism the columns are split)",
                          spec_.group_size, name, src.cols);
                w.group = spec_.group_size;
                break;
            default:
                break;
        }
        const int64_t blocks = src.rows * (src.cols / w.group);
        for (DeviceBuffer* b : {&w.lo, &w.hi})
            *b = DeviceBuffer(be_, size_t(blocks) * sizeof(float));
        const int64_t params = w.per_tensor ? 1 : blocks;
        for (DeviceBuffer* b : {&w.scale, &w.zero})
            *b = DeviceBuffer(be_, size_t(params) * sizeof(float));
        be_.fill(as_mat(f32_vec(w.zero, params)), 0.0f);  // the weight grid is symmetric
        if (!learned.empty()) {
            ETE_CHECK(learned.value.n >= params && learned.elements > 0,
                      "qat.learnable_scale: '{}' holds {} scales on this rank, its {} rows of {} "
                      "columns need {} (the layout splits its scales differently from it)",
                      name, learned.value.n, src.rows, src.cols, params);
            w.learned = learned;
            w.learned.value = learned.value.slice(0, params);  // an LM head's padding rows: none
            w.learned.grad = learned.grad.slice(0, params);
        }
    }
    weights_.push_back(std::move(w));
}

void QatRuntime::add_nf4_weight(const std::string& name, const Nf4View& w, Mat dst, bool quantize,
                                bool split_cols) {
    ETE_ASSERT(w.rows == dst.rows && w.cols == dst.cols);
    DeviceBuffer dense(be_, size_t(w.rows * w.cols) * dtype_size(dst.dtype));
    const CMat src{dense.data(), dst.dtype, w.rows, w.cols};
    add_weight(name, src, dst, Mat{}, quantize, split_cols);
    weights_.back().nf4 = &w;
    weights_.back().dense = std::move(dense);
}

size_t QatRuntime::weight_bytes() const {
    size_t bytes = 0;
    for (const Weight& w : weights_)
        for (const DeviceBuffer* b : {&w.lo, &w.hi, &w.scale, &w.zero, &w.mask, &w.dense})
            bytes += b->bytes();
    return bytes;
}

void QatRuntime::update_weight(Weight& w) {
    // A frozen weight's buffer changes only with the phase.
    if (w.grad.empty() && w.phase == int(fq_on_)) return;
    w.phase = int(fq_on_);
    if (w.nf4) {
        ETE_CHECK(!w.nf4->empty(), "qat: NF4 weight '{}' used before it was loaded", w.name);
        be_.dequantize_nf4({w.dense.data(), w.src.dtype, w.src.rows, w.src.cols}, *w.nf4, 0);
    }
    if (!w.quantize || !fq_on_) {
        be_.copy(w.dst, w.src);
        return;
    }
    const int64_t n = w.scale_count();
    if (!w.learned.empty() || !w.factors.empty()) {
        factor_scales(w);
    } else {
        ETE_CHECK(!spec_.learnable_scale,
                  "qat: '{}' has learned scales (qat.learnable_scale) but no factors were given",
                  w.name);
        if (!w.per_tensor && !reduce_range_over_tp(w)) {
            // Each block's scale from its own range (no reduction needed), in one pass.
            be_.fake_quant_own_range(w.dst, w.src, f32_vec(w.scale, n), w.group,
                                     spec_.weight_grid());
            return;
        }
        range_scales(w);
    }
    // Scales from the weight's own range put every finite value inside the grid (|w| ≤ the
    // range's end, and nearbyint(w · 1/s) rounds to at most qmax): the mask would be all ones,
    // so none is written and the gradient passes whole. Learned or given factors can clamp.
    Vec mask;
    if (w.masked()) {
        const int64_t bytes = fake_quant_mask_bytes(w.src.rows, w.src.cols);
        if (w.mask.bytes() == 0) w.mask = DeviceBuffer(be_, size_t(bytes));
        mask = {w.mask.data(), DType::U8, bytes};
    }
    be_.fake_quant(w.dst, w.src, f32_vec(w.scale, n), f32_vec(w.zero, n), mask, w.group,
                   spec_.weight_grid());
}

// A range split over tp (a row-parallel linear's channels, or any tensor taken whole) is
// reduced there, and so is its learned scales' gradient; a column-parallel channel or a group
// lies on one rank.
bool QatRuntime::reduce_range_over_tp(const Weight& w) const {
    const bool per_channel = spec_.weight_granularity == QatGranularity::Channel;
    return tp_ && tp_->size() > 1 && (w.per_tensor || (w.split_cols && per_channel));
}

void QatRuntime::range_scales(Weight& w) {
    const int64_t blocks = w.src.rows * (w.src.cols / w.group);
    Vec lo = f32_vec(w.lo, blocks), hi = f32_vec(w.hi, blocks);
    be_.min_max(lo, hi, w.src, w.group);
    const bool reduce_tp = reduce_range_over_tp(w);
    const int64_t n = w.scale_count();
    if (w.per_tensor || reduce_tp) {
        std::vector<float> l(static_cast<size_t>(blocks)), h(static_cast<size_t>(blocks));
        be_.download(l.data(), lo.data, lo.bytes());
        be_.download(h.data(), hi.data, hi.bytes());
        if (w.per_tensor) {
            l = {*std::min_element(l.begin(), l.end())};
            h = {*std::max_element(h.begin(), h.end())};
        }
        if (reduce_tp) reduce_ranges(tp_, l, h);
        be_.upload(lo.data, l.data(), l.size() * sizeof(float));
        be_.upload(hi.data, h.data(), h.size() * sizeof(float));
    }
    be_.quant_params(f32_vec(w.scale, n), f32_vec(w.zero, n), lo.slice(0, n), hi.slice(0, n),
                     spec_.weight_grid());
}

// The factors (learned: clamped to kMinScaleFactor in place, the same on every rank) times the
// range's scales (reduced as min/max QAT reduces them), each at least kMinScale.
void QatRuntime::factor_scales(Weight& w) {
    const size_t n = size_t(w.scale_count());
    range_scales(w);
    w.range.resize(n);
    be_.download(w.range.data(), w.scale.data(), n * sizeof(float));
    std::vector<float> m = w.factors;
    if (!w.learned.empty()) {
        m.resize(n);
        be_.download(m.data(), w.learned.value.data, n * sizeof(float));
        bool clamped = false;
        for (float& v : m)
            if (!(v >= kMinScaleFactor)) v = kMinScaleFactor, clamped = true;
        if (clamped) be_.upload(w.learned.value.data, m.data(), n * sizeof(float));
    }
    std::vector<float> s(n);
    for (size_t i = 0; i < n; ++i) s[i] = std::max(m[i] * w.range[i], kMinScale);
    be_.upload(w.scale.data(), s.data(), n * sizeof(float));
}

// LSQ's gradient of the scale factors from the gradient of fq(W) (summed over data parallelism
// already): Σ d(fq(W)) · slope per block, summed per tensor and over tp where a scale spans
// ranks, times 1/√(elements · qmax), times the range's scale (ds/dm).
void QatRuntime::learned_grad(Weight& w) {
    const int64_t blocks = w.src.rows * (w.src.cols / w.group), n = w.scale_count();
    Vec d = f32_vec(w.lo, blocks);  // scratch
    be_.fake_quant_scale_grad(d, w.src, w.grad, f32_vec(w.scale, n), f32_vec(w.zero, n), w.group,
                              spec_.weight_grid());
    std::vector<float> g(static_cast<size_t>(blocks));
    be_.download(g.data(), d.data, d.bytes());
    if (w.per_tensor) {
        double sum = 0;
        for (float v : g) sum += v;
        g = {float(sum)};
    }
    if (reduce_range_over_tp(w)) {
        tp_->all_reduce(g.data(), g.size(), DType::F32, ReduceOp::Sum);
        for (float& v : g) v /= float(w.learned.replicas);
    }
    const float gs = 1.0f / std::sqrt(float(w.learned.elements) * float(spec_.weight_grid().qmax));
    for (size_t i = 0; i < g.size(); ++i) g[i] *= gs * w.range[i];
    be_.upload(w.learned.grad.data, g.data(), g.size() * sizeof(float));
}

void QatRuntime::begin_step(int64_t step) {
    fq_on_ = spec_.fake_quant_at(step);
    observe_ = spec_.observe_at(step);
    for (Weight& w : weights_) {
        if (deferred_)
            w.stale = true;
        else
            update_weight(w);
    }
}

void QatRuntime::update_weights(const std::vector<int>& which) {
    for (int i : which) {
        Weight& w = weights_[size_t(i)];
        if (!w.stale) continue;
        update_weight(w);
        w.stale = false;
    }
}

void QatRuntime::finish_grads() {
    if (!fq_on_) return;
    for (Weight& w : weights_) {
        if (!w.quantize || w.grad.empty()) continue;
        if (!w.learned.empty()) learned_grad(w);
        if (!w.masked()) continue;       // range scales: the mask is all ones (update_weight)
        ETE_ASSERT(w.mask.bytes() > 0);  // written by this step's update_weight
        be_.fake_quant_backward(
            w.grad, w.grad,
            CVec{w.mask.data(), DType::U8, fake_quant_mask_bytes(w.src.rows, w.src.cols)});
    }
}

void QatRuntime::set_weight_scale_factors(const std::string& name, std::vector<float> factors) {
    for (Weight& w : weights_) {
        if (w.name != name || !w.quantize) continue;
        ETE_CHECK(int64_t(factors.size()) == w.scale_count(),
                  "qat: {} scale factors given for '{}', whose {} rows of {} columns have {}",
                  factors.size(), name, w.src.rows, w.src.cols, w.scale_count());
        ETE_CHECK(std::all_of(factors.begin(), factors.end(),
                              [](float v) { return std::isfinite(v) && v >= kMinScaleFactor; }),
                  "qat: a scale factor given for '{}' is not finite and at least {}", name,
                  kMinScaleFactor);
        w.factors = std::move(factors);
        w.phase = -1;  // rewritten at the next step
        return;
    }
    throw_error(
        fmt::format("qat: scale factors given for '{}', which is not a quantized weight", name));
}

std::vector<float> QatRuntime::weight_scales(const std::string& name) const {
    for (const Weight& w : weights_) {
        if (w.name != name || w.factors.empty()) continue;
        std::vector<float> s(static_cast<size_t>(w.scale_count()));
        be_.download(s.data(), w.scale.data(), s.size() * sizeof(float));
        return s;
    }
    return {};
}

// --- activations ---

void QatRuntime::ensure_scratch(int64_t n) {
    if (n <= scratch_n_) return;
    for (DeviceBuffer* b : {&lo_, &hi_, &tok_s_, &tok_z_})
        *b = DeviceBuffer(be_, size_t(n) * sizeof(float));
    scratch_n_ = n;
}

void QatRuntime::act_forward(int s, int l, Mat x, Vec mask, bool train) {
    if (!site_on(s, l)) return;
    const bool observe = train && observe_ && spec_.act_granularity == QatGranularity::Tensor;
    if (!fq_on_ && !observe) return;
    const int64_t N = x.rows;
    ensure_scratch(N);
    const QuantGrid g = spec_.act_grid();
    Vec lo = f32_vec(lo_, N), hi = f32_vec(hi_, N);
    if (spec_.act_granularity == QatGranularity::Token) {  // dynamic: each row its own scale
        be_.min_max(lo, hi, x, x.cols);
        Vec sc = f32_vec(tok_s_, N), z = f32_vec(tok_z_, N);
        be_.quant_params(sc, z, lo, hi, g);
        be_.fake_quant(x, x, sc, z, train ? mask : Vec{}, x.cols, g);
        return;
    }
    Point& p = points_[size_t(point_index(s, l))];
    if (observe) {
        be_.min_max(lo, hi, x, x.cols);
        std::vector<float> l_host(static_cast<size_t>(N)), h_host(static_cast<size_t>(N));
        be_.download(l_host.data(), lo.data, lo.bytes());
        be_.download(h_host.data(), hi.data, hi.bytes());
        p.step_lo = std::min(p.step_lo, *std::min_element(l_host.begin(), l_host.end()));
        p.step_hi = std::max(p.step_hi, *std::max_element(h_host.begin(), h_host.end()));
    }
    // A point starts quantizing once its observer has seen a step (the same on every rank).
    if (!fq_on_ || !(p.obs.observed() || p.fixed)) return;
    const int64_t k = &p - points_.data();
    const CVec sc{static_cast<float*>(scales_.data()) + 2 * k, DType::F32, 1};
    const CVec z{static_cast<float*>(scales_.data()) + 2 * k + 1, DType::F32, 1};
    be_.fake_quant(x, x, sc, z, train ? mask : Vec{}, x.cols, g);
}

void QatRuntime::act_backward(int s, int l, Mat d_x, CMat d_y, CVec mask) const {
    if (!site_on(s, l) || !fq_on_) return;
    be_.fake_quant_backward(d_x, d_y, mask);
}

std::vector<float> QatRuntime::step_ranges() const {
    std::vector<float> packed(2 * points_.size());
    for (size_t i = 0; i < points_.size(); ++i) {
        packed[i] = points_[i].step_lo;
        packed[points_.size() + i] = -points_[i].step_hi;
    }
    return packed;
}

void QatRuntime::end_step(const std::vector<float>& reduced) {
    ETE_ASSERT(reduced.size() == 2 * points_.size());
    for (size_t i = 0; i < points_.size(); ++i) {
        Point& p = points_[i];
        if (observe_) p.obs.fold({reduced[i]}, {-reduced[points_.size() + i]});
        p.step_lo = kInf;
        p.step_hi = -kInf;
    }
    upload_scales();
}

void QatRuntime::upload_scales() {
    std::vector<float> host(points_.size() * 2);
    std::vector<float> s, z;
    for (size_t i = 0; i < points_.size(); ++i) {
        points_[i].obs.params(spec_.act_grid(), &s, &z);
        host[2 * i] = points_[i].fixed ? points_[i].scale : s[0];
        host[2 * i + 1] = points_[i].fixed ? points_[i].zero : z[0];
    }
    be_.upload(scales_.data(), host.data(), host.size() * sizeof(float));
}

nlohmann::json QatRuntime::state() const {
    nlohmann::json j = nlohmann::json::object();
    for (int l = 0; l <= layers_; ++l)
        for (int s = 0; s < kQatSites; ++s) {
            const int site = l == layers_ ? kQatFinalNorm : s;
            if (!site_on(site, l) || spec_.act_granularity != QatGranularity::Tensor) continue;
            if (l == layers_ && s > 0) break;
            const std::string key = fmt::format("{}.{}", l, s);
            j[key] = points_[size_t(point_index(s, l))].obs.state();
        }
    return j;
}

void QatRuntime::restore(const nlohmann::json& state, const std::string& what) {
    for (const auto& [key, value] : state.items()) {
        int l = -1, s = -1;
        ETE_CHECK(std::sscanf(key.c_str(), "%d.%d", &l, &s) == 2 && l >= 0 && l <= layers_ &&
                      s >= 0 && s < kQatSites,
                  "{}: qat observer '{}' is not a point of this model", what, key);
        const std::string where = fmt::format("{} qat observer {}", what, key);
        ETE_CHECK(value.is_array() && std::all_of(value.begin(), value.end(),
                                                  [](const auto& v) { return v.is_number(); }),
                  "{}: expected an array of numbers", where);
        std::vector<float> st;
        for (const auto& v : value) st.push_back(float(v.template get<double>()));
        points_[size_t(point_index(s, l))].obs.restore(st, where);
    }
    upload_scales();
}

void QatRuntime::set_inference() {
    fq_on_ = true;
    observe_ = false;
    for (Weight& w : weights_) update_weight(w);
}

bool QatRuntime::point_observed(int s, int l) const {
    const Point& p = points_[size_t(point_index(s, l))];
    return p.fixed || p.obs.observed();
}

std::pair<float, float> QatRuntime::point_params(int s, int l) const {
    const Point& p = points_[size_t(point_index(s, l))];
    if (p.fixed) return {p.scale, p.zero};
    std::vector<float> sc, z;
    p.obs.params(spec_.act_grid(), &sc, &z);
    return {sc[0], z[0]};
}

void QatRuntime::set_point_params(int s, int l, float scale, float zero) {
    Point& p = points_[size_t(point_index(s, l))];
    p.fixed = true;
    p.scale = scale;
    p.zero = zero;
    upload_scales();
}

}  // namespace ete
