// ete/core/dynamic_map.cpp
#include "ete/core/dynamic_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
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

namespace {

float float_of(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// The floats of a bucket, as the lowest and highest bit patterns of its sign: [first, last].
std::pair<uint32_t, uint32_t> bucket_bits(uint32_t sign, uint32_t mag) {
    constexpr uint32_t kLast = DynamicCoder::kBucketsPerSign - 1;
    constexpr uint32_t kStep = 1u << (23 - DynamicCoder::kMantissaBits);
    const uint32_t low = DynamicCoder::kMinExponent << 23;  // the first float of bucket 1
    const uint32_t first = mag == 0 ? 0 : low + (mag - 1) * kStep;
    const uint32_t last = mag == 0 ? low - 1 : mag == kLast ? 0x7fffffffu : first + kStep - 1;
    return {first | sign << 31, last | sign << 31};
}

}  // namespace

DynamicCoder::DynamicCoder(const std::array<float, 256>& map) : entries_(2 * kBucketsPerSign) {
    auto code_of = [&map](uint32_t bits) { return int(dynamic_code(float_of(bits), map.data())); };
    for (uint32_t sign = 0; sign < 2; ++sign) {
        for (uint32_t mag = 0; mag < kBucketsPerSign; ++mag) {
            auto [first, last] = bucket_bits(sign, mag);
            const bool clamped = mag == 0 || mag == kBucketsPerSign - 1;
            if (mag == kBucketsPerSign - 1) last = sign << 31 | 0x7f800000u;  // up to inf
            // The bucket's floats in value order: bit patterns grow with |x|, so negatives run
            // from `last` down.
            auto at = [&, first = first, last = last](uint32_t t) {
                return sign ? last - t : first + t;
            };
            const uint32_t end = last - first;
            const int lo = code_of(at(0)), hi = code_of(at(end));
            ETE_CHECK(hi - lo <= 1 && hi >= lo && (!clamped || hi == lo),
                      "DynamicCoder: bucket {} of sign {} spans codes {}..{} (expected two "
                      "neighbours at most, one in a clamped bucket: more mantissa bits)",
                      mag, sign, lo, hi);
            uint32_t a = 0;  // the first float in value order coded hi (codes do not decrease)
            if (hi != lo) {
                uint32_t z = end;
                while (a < z) {
                    const uint32_t mid = a + (z - a) / 2;
                    if (code_of(at(mid)) == hi) {
                        z = mid;
                    } else {
                        a = mid + 1;
                    }
                }
                ETE_ASSERT(a == rank(at(a)));
            }
            entries_[sign * kBucketsPerSign + mag] = uint32_t(lo) | uint32_t(hi) << 8 | a << 16;
        }
    }
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
