// ete/optim/adamw8bit.cpp
#include "ete/optim/adamw8bit.h"

#include <algorithm>

#include "ete/core/dynamic_map.h"
#include "ete/core/error.h"

namespace ete {

namespace {

const float* map_of(int k) {
    return k == 0 ? moment_map_signed().data() : bnb_dynamic_map_unsigned().data();
}

}  // namespace

bool AdamW8bit::quantized(const ParamSpec& s) {
    return shape_numel(s.global_shape.empty() ? s.shape : s.global_shape) >= kMin8bitSize;
}

int64_t AdamW8bit::segment_bytes(const ParamSpec& s, int64_t n) {
    if (!quantized(s)) return 2 * n * int64_t(sizeof(float));
    return 2 * (n + (n + kBlock - 1) / kBlock * int64_t(sizeof(float)));
}

AdamW8bit::AdamW8bit(ParamStore& store, Backend& backend, AdamWConfig cfg, int64_t begin,
                     int64_t end)
    : Optimizer(store, backend, begin, end), cfg_(cfg) {
    int64_t codes = 0, blocks = 0, f32 = 0;
    for (const Segment& sg : segments()) {
        Part p{sg.param, sg.lo, sg.hi, quantized(store.specs()[size_t(sg.param)]), 0, 0};
        if (p.q) {
            p.at = codes;
            p.block = blocks;
            codes += p.hi - p.lo;
            blocks += p.blocks();
        } else {
            p.at = f32;
            f32 += p.hi - p.lo;
        }
        parts_.push_back(p);
    }
    for (int k = 0; k < 2; ++k) {
        codes_[k] = DeviceBuffer(be_, size_t(codes));
        absmax_[k] = DeviceBuffer(be_, size_t(blocks) * sizeof(float));
        f32_[k] = DeviceBuffer(be_, size_t(f32) * sizeof(float));
        // Zero moments: the code of 0 (absmax 0 decodes anything to 0, but -0 would be stored).
        be_.fill_bytes(codes_[k].data(), dynamic_code(0.0f, map_of(k)), codes_[k].bytes());
        be_.fill_bytes(absmax_[k].data(), 0, absmax_[k].bytes());
        be_.fill_bytes(f32_[k].data(), 0, f32_[k].bytes());
    }
}

const std::vector<std::string>& AdamW8bit::state_names() const {
    static const std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
    return names;
}

size_t AdamW8bit::state_bytes() const {
    size_t b = 0;
    for (int k = 0; k < 2; ++k) b += codes_[k].bytes() + absmax_[k].bytes() + f32_[k].bytes();
    return b;
}

void AdamW8bit::release_state() {
    for (int k = 0; k < 2; ++k) {
        codes_[k].reset();
        absmax_[k].reset();
        f32_[k].reset();
    }
    released_ = true;
}

Vec AdamW8bit::codes(int k, const Part& p) const {
    return Vec{codes_[k].data(), DType::U8, int64_t(codes_[k].bytes())}.slice(p.at, p.hi - p.lo);
}

Vec AdamW8bit::absmax(int k, const Part& p) const {
    return Vec{absmax_[k].data(), DType::F32, int64_t(absmax_[k].bytes() / sizeof(float))}.slice(
        p.block, p.blocks());
}

Vec AdamW8bit::f32(int k, const Part& p) const {
    return Vec{f32_[k].data(), DType::F32, int64_t(f32_[k].bytes() / sizeof(float))}.slice(
        p.at, p.hi - p.lo);
}

void AdamW8bit::step(double lr, float grad_scale) {
    check_range("AdamW8bit", begin_, 0);
    ++t_;
    Vec p = store_.masters(), g = store_.grads(), copy = store_.compute_copy();
    for (const Part& part : parts_) {
        const AdamWStep s =
            adamw_step_of(cfg_, store_.specs()[size_t(part.param)], lr, grad_scale, t_);
        const int64_t lo = part.lo, n = part.hi - part.lo, at = lo - store_.flat_begin();
        const Vec c = copy.empty() ? Vec{} : copy.slice(at, n),
                  gp = g.slice(lo - store_.grad_begin(), n);
        if (part.q) {
            be_.adamw8bit_step(p.slice(at, n), gp, codes(0, part), codes(1, part), absmax(0, part),
                               absmax(1, part), kBlock, s, c);
        } else {
            be_.adamw_step(p.slice(at, n), gp, f32(0, part), f32(1, part), s, c);
        }
    }
}

void AdamW8bit::download_state(int k, int64_t first, int64_t n, float* out) const {
    check_range("AdamW8bit", first, n);
    for (const Part& part : parts_) {
        const int64_t lo = std::max(part.lo, first), hi = std::min(part.hi, first + n);
        if (lo >= hi) continue;
        float* dst = out + (lo - first);
        if (!part.q) {
            const Vec v = f32(k, part).slice(lo - part.lo, hi - lo);
            be_.download(dst, v.data, v.bytes());
            continue;
        }
        const int64_t len = part.hi - part.lo;
        std::vector<uint8_t> q(size_t(len), 0);
        std::vector<float> a(static_cast<size_t>(part.blocks())), x(static_cast<size_t>(len));
        be_.download(q.data(), codes(k, part).data, size_t(len));
        be_.download(a.data(), absmax(k, part).data, a.size() * sizeof(float));
        for (int64_t b = 0; b < part.blocks(); ++b) {
            const int64_t b0 = b * kBlock, bn = std::min(kBlock, len - b0);
            dequantize_block(q.data() + b0, bn, a[size_t(b)], map_of(k), x.data() + b0);
        }
        std::copy(x.begin() + (lo - part.lo), x.begin() + (hi - part.lo), dst);
    }
}

void AdamW8bit::upload_state(int k, int64_t first, int64_t n, const float* in) {
    check_range("AdamW8bit", first, n);
    for (const Part& part : parts_) {
        const int64_t lo = std::max(part.lo, first), hi = std::min(part.hi, first + n);
        if (lo >= hi) continue;
        const float* src = in + (lo - first);
        if (!part.q) {
            const Vec v = f32(k, part).slice(lo - part.lo, hi - lo);
            be_.upload(v.data, src, v.bytes());
            continue;
        }
        ETE_CHECK(lo == part.lo && hi == part.hi,
                  "AdamW8bit: a state upload of [{}, {}) cuts the blocks of '{}' ([{}, {}))", first,
                  first + n, store_.specs()[size_t(part.param)].name, part.lo, part.hi);
        const int64_t len = part.hi - part.lo;
        std::vector<uint8_t> q(static_cast<size_t>(len));
        std::vector<float> a(static_cast<size_t>(part.blocks()));
        for (int64_t b = 0; b < part.blocks(); ++b) {
            const int64_t b0 = b * kBlock, bn = std::min(kBlock, len - b0);
            a[size_t(b)] = quantize_block(src + b0, bn, map_of(k), k == 0, q.data() + b0);
        }
        be_.upload(codes(k, part).data, q.data(), size_t(len));
        be_.upload(absmax(k, part).data, a.data(), a.size() * sizeof(float));
    }
}

}  // namespace ete
