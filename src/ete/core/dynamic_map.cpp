// ete/core/dynamic_map.cpp
#include "ete/core/dynamic_map.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ete/core/error.h"

namespace ete {

namespace {

std::array<float, 256> make_map(bool is_signed) {
    std::vector<double> v;
    for (int i = 0; i < 7; ++i) {
        const int n = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        const double scale = std::pow(10.0, i - 6);
        for (int j = 0; j + 1 < n; ++j) {
            const double lo = 0.1 + 0.9 * j / (n - 1), hi = 0.1 + 0.9 * (j + 1) / (n - 1);
            const double m = (lo + hi) / 2;
            v.push_back(scale * m);
            if (is_signed) v.push_back(-scale * m);
        }
    }
    v.push_back(0.0);
    v.push_back(1.0);
    std::sort(v.begin(), v.end());
    std::array<float, 256> out{};
    ETE_ASSERT(v.size() == out.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = float(v[i]);
    return out;
}

}  // namespace

const std::array<float, 256>& bnb_dynamic_map_signed() {
    static const std::array<float, 256> map = make_map(true);
    return map;
}

const std::array<float, 256>& bnb_dynamic_map_unsigned() {
    static const std::array<float, 256> map = make_map(false);
    return map;
}

const std::array<float, 256>& moment_map_signed() {
    static const std::array<float, 256> map = [] {
        std::array<float, 256> m = bnb_dynamic_map_signed();
        m[0] = -1.0f;
        return m;
    }();
    return map;
}

DynamicCoder::DynamicCoder(const std::array<float, 256>& map) : start_(size_t(1) << (32 - kShift)) {
    padded_.fill(std::numeric_limits<float>::infinity());
    std::copy(map.begin(), map.end(), padded_.begin());
    auto above = [&map](float x) {  // the number of map values <= x (dynamic_code's lo)
        return int(std::upper_bound(map.begin(), map.end(), x) - map.begin());
    };
    for (uint32_t key = 0; key < start_.size(); ++key) {
        const uint32_t first = key << kShift, last = first | ((1u << kShift) - 1);
        float a, b;
        std::memcpy(&a, &first, sizeof a);
        std::memcpy(&b, &last, sizeof b);
        if (!std::isfinite(a) || !std::isfinite(b)) continue;  // inf and NaN: never coded
        if (a > b) std::swap(a, b);                            // negative floats
        const int lo = above(a), hi = above(b);
        // 256 (every value below) is stored as 255: one more step reaches it.
        start_[key] = uint8_t(std::min(lo, 255));
        steps_ = std::max(steps_, hi - std::min(lo, 255));
    }
    ETE_CHECK(steps_ <= kSteps, "DynamicCoder: the map needs {} steps (expected <= {})", steps_,
              kSteps);
}

const DynamicCoder& moment_coder_signed() {
    static const DynamicCoder coder(moment_map_signed());
    return coder;
}

const DynamicCoder& moment_coder_unsigned() {
    static const DynamicCoder coder(bnb_dynamic_map_unsigned());
    return coder;
}

float quantize_block(const float* x, int64_t n, const float* map, bool is_signed, uint8_t* codes) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; ++i) a = std::max(a, is_signed ? std::fabs(x[i]) : x[i]);
    const uint8_t zero = dynamic_code(0.0f, map);
    for (int64_t i = 0; i < n; ++i) codes[i] = a == 0.0f ? zero : dynamic_code(x[i] / a, map);
    return a;
}

void dequantize_block(const uint8_t* codes, int64_t n, float absmax, const float* map, float* x) {
    for (int64_t i = 0; i < n; ++i) x[i] = map[codes[i]] * absmax;
}

}  // namespace ete
