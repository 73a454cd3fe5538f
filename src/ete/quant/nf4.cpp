// ete/quant/nf4.cpp — host NF4 quantization: the scalar reference, the fast path, double quant.
#include "ete/quant/nf4.h"

#include <algorithm>
#include <cmath>

#include "ete/core/dynamic_map.h"
#include "ete/core/error.h"

namespace ete {

namespace {

// Below this many elements one thread does the work (read by the omp pragmas).
[[maybe_unused]] constexpr int64_t kParallelMin = 1 << 16;

// The nearest map index of s (map sorted ascending); an exact tie goes to the lower index.
int nearest_index(const std::vector<float>& map, float s) {
    auto it = std::lower_bound(map.begin(), map.end(), s);  // first map value >= s
    if (it == map.begin()) return 0;
    if (it == map.end()) return int(map.size()) - 1;
    const int hi = int(it - map.begin()), lo = hi - 1;
    const double d_lo = double(s) - double(map[size_t(lo)]);
    const double d_hi = double(map[size_t(hi)]) - double(s);
    return d_hi < d_lo ? hi : lo;
}

// s = x · inv in fp32, clamped to [-1, 1].
inline float scaled(float x, float inv) {
    const float s = x * inv;
    return s < -1.0f ? -1.0f : (s > 1.0f ? 1.0f : s);
}

// Packs one code at element e (high nibble for even e).
inline void put_nibble(uint8_t* packed, int64_t e, int q) {
    uint8_t& b = packed[e >> 1];
    b = (e & 1) ? uint8_t((b & 0xf0) | q) : uint8_t((b & 0x0f) | (q << 4));
}

inline int get_nibble(const uint8_t* packed, int64_t e) {
    const uint8_t b = packed[e >> 1];
    return (e & 1) ? (b & 0x0f) : (b >> 4);
}

// Quantizes the absmax vector of t in place of t.absmax (double quantization).
void double_quantize(Nf4Tensor& t) {
    const std::vector<float>& a = t.absmax;
    const int64_t nb = int64_t(a.size());
    double sum = 0;
    for (float v : a) sum += v;
    t.offset = float(sum / double(nb));
    const auto& map = nf4_dynamic_map();
    t.nested_map.assign(map.begin(), map.end());
    const int nbs = t.nested_blocksize;
    const int64_t nn = (nb + nbs - 1) / nbs;
    t.nested_absmax.assign(size_t(nn), 0.0f);
    t.absmax_q.assign(size_t(nb), 0);
    const int zero = nearest_index(t.nested_map, 0.0f);
    std::vector<float> r(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) r[size_t(i)] = a[size_t(i)] - t.offset;
    for (int64_t j = 0; j < nn; ++j) {
        const int64_t b0 = j * nbs, b1 = std::min(nb, b0 + nbs);
        float m = 0.0f;
        for (int64_t i = b0; i < b1; ++i) m = std::max(m, std::fabs(r[size_t(i)]));
        t.nested_absmax[size_t(j)] = m;
        const float inv = m == 0.0f ? 0.0f : 1.0f / m;
        for (int64_t i = b0; i < b1; ++i) {
            t.absmax_q[size_t(i)] =
                uint8_t(m == 0.0f ? zero : nearest_index(t.nested_map, scaled(r[size_t(i)], inv)));
        }
    }
    t.absmax.clear();
    t.absmax.shrink_to_fit();
}

// A NaN or infinity would quantize to an arbitrary code (NaN compares false everywhere) and
// poison its block's absmax: refuse the tensor instead of writing a silently wrong model.
void check_finite(const float* x, int64_t n) {
    int bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t e = 0; e < n; ++e) bad |= std::fabs(x[e]) <= 3.4028235e38f ? 0 : 1;
    if (!bad) return;
    int64_t e = 0;
    while (std::isfinite(x[e])) ++e;
    throw_error(fmt::format("nf4 quantize: element {} is {}, expected a finite value", e, x[e]));
}

Nf4Tensor empty_tensor(const float* x, int64_t rows, int64_t cols, const Nf4Options& opt) {
    nf4_check_blocksize(opt.blocksize, "nf4 quantize");
    ETE_CHECK(rows >= 0 && cols >= 0, "nf4 quantize: shape ({}, {}) is negative", rows, cols);
    check_finite(x, rows * cols);
    Nf4Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.blocksize = opt.blocksize;
    t.packed.assign(size_t((rows * cols + 1) / 2), 0);
    t.absmax.assign(size_t(t.blocks()), 0.0f);
    return t;
}

Nf4Tensor finish(Nf4Tensor t, const Nf4Options& opt) {
    if (opt.double_quant && t.blocks() > 0) double_quantize(t);
    return t;
}

}  // namespace

const std::array<float, 256>& nf4_dynamic_map() {
    return bnb_dynamic_map_signed();
}

Nf4Buffer::Nf4Buffer(DeviceMemory& mem, const Nf4Tensor& t) {
    t.check("nf4 upload");
    auto put = [&](DeviceBuffer& buf, const void* host, size_t bytes) {
        buf = DeviceBuffer(mem, bytes);
        if (bytes) mem.upload(buf.data(), host, bytes);
    };
    put(packed_, t.packed.data(), t.packed.size());
    if (t.double_quant()) {
        put(absmax_, t.absmax_q.data(), t.absmax_q.size());
        put(nested_absmax_, t.nested_absmax.data(), t.nested_absmax.size() * 4);
        put(nested_map_, t.nested_map.data(), t.nested_map.size() * 4);
    } else {
        put(absmax_, t.absmax.data(), t.absmax.size() * 4);
    }
    view_ = t.view(packed_.data(), absmax_.data(), nested_absmax_.data(), nested_map_.data());
}

void nf4_check_blocksize(int64_t blocksize, const char* what) {
    ETE_CHECK(nf4_valid_blocksize(blocksize),
              "{}: NF4 block size {} is not a power of two in [{}, {}]", what, blocksize,
              kNf4MinBlock, kNf4MaxBlock);
}

std::vector<float> Nf4Tensor::block_absmax() const {
    if (!double_quant()) return absmax;
    const Nf4View v = view(packed.data(), absmax_q.data(), nested_absmax.data(), nested_map.data());
    std::vector<float> a(absmax_q.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = nf4_block_absmax(v, int64_t(i));
    return a;
}

size_t Nf4Tensor::storage_bytes() const {
    return packed.size() + absmax.size() * 4 + absmax_q.size() + nested_absmax.size() * 4 +
           nested_map.size() * 4 + (double_quant() ? 4 : 0);
}

Nf4View Nf4Tensor::view(const void* packed_at, const void* absmax_at, const void* nested_absmax_at,
                        const void* nested_map_at) const {
    Nf4View v;
    v.packed = packed_at;
    v.absmax = absmax_at;
    if (double_quant()) {
        v.nested_absmax = nested_absmax_at;
        v.nested_map = nested_map_at;
        v.offset = offset;
    }
    v.rows = rows;
    v.cols = cols;
    v.blocksize = blocksize;
    v.nested_blocksize = nested_blocksize;
    return v;
}

void Nf4Tensor::check(const char* what) const {
    nf4_check_blocksize(blocksize, what);
    ETE_CHECK(rows >= 0 && cols >= 0, "{}: negative shape ({}, {})", what, rows, cols);
    const size_t nb = size_t(blocks());
    ETE_CHECK(packed.size() == size_t((numel() + 1) / 2),
              "{}: {} packed bytes for {} elements, expected {}", what, packed.size(), numel(),
              (numel() + 1) / 2);
    if (!double_quant()) {
        ETE_CHECK(absmax.size() == nb, "{}: {} absmax values for {} blocks of {}", what,
                  absmax.size(), nb, blocksize);
        return;
    }
    ETE_CHECK(absmax.empty() && absmax_q.size() == nb,
              "{}: {} quantized absmax codes for {} blocks of {}", what, absmax_q.size(), nb,
              blocksize);
    ETE_CHECK(nested_blocksize > 0, "{}: nested block size {} is not positive", what,
              nested_blocksize);
    const size_t nn = (nb + size_t(nested_blocksize) - 1) / size_t(nested_blocksize);
    ETE_CHECK(nested_absmax.size() == nn, "{}: {} nested absmax values, expected {}", what,
              nested_absmax.size(), nn);
    ETE_CHECK(nested_map.size() == 256, "{}: the nested quant map has {} values, expected 256",
              what, nested_map.size());
}

Nf4Tensor nf4_quantize_ref(const float* x, int64_t rows, int64_t cols, Nf4Options opt) {
    Nf4Tensor t = empty_tensor(x, rows, cols, opt);
    const int64_t n = t.numel(), bs = t.blocksize;
    for (int64_t b = 0; b < t.blocks(); ++b) {
        const int64_t e0 = b * bs, e1 = std::min(n, e0 + bs);
        float m = 0.0f;
        for (int64_t e = e0; e < e1; ++e) m = std::max(m, std::fabs(x[e]));
        t.absmax[size_t(b)] = m;
        const float inv = m == 0.0f ? 0.0f : 1.0f / m;
        for (int64_t e = e0; e < e1; ++e) {
            put_nibble(t.packed.data(), e, m == 0.0f ? kNf4Zero : nf4_index(scaled(x[e], inv)));
        }
    }
    return finish(std::move(t), opt);
}

Nf4Tensor nf4_quantize(const float* x, int64_t rows, int64_t cols, Nf4Options opt) {
    Nf4Tensor t = empty_tensor(x, rows, cols, opt);
    const int64_t n = t.numel(), bs = t.blocksize, nb = t.blocks();
    uint8_t* packed = t.packed.data();
    float* absmax = t.absmax.data();
    // Whole blocks have an even element count (bs >= 32), so threads never share a byte.
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t e0 = b * bs, len = std::min(n, e0 + bs) - e0;
        const float* xb = x + e0;
        float m = 0.0f;
#pragma omp simd reduction(max : m)
        for (int64_t e = 0; e < len; ++e) m = std::max(m, std::fabs(xb[e]));
        absmax[b] = m;
        const float inv = m == 0.0f ? 0.0f : 1.0f / m;
        uint8_t q[kNf4MaxBlock];
#pragma omp simd
        for (int64_t e = 0; e < len; ++e) {
            const float s = scaled(xb[e], inv);
            int c = 0;
            for (int i = 0; i < 15; ++i) c += s > kNf4Mid[size_t(i)] ? 1 : 0;
            q[e] = uint8_t(m == 0.0f ? kNf4Zero : c);
        }
        uint8_t* pb = packed + e0 / 2;
        for (int64_t e = 0; e + 1 < len; e += 2) pb[e / 2] = uint8_t(q[e] << 4 | q[e + 1]);
        if (len & 1) pb[len / 2] = uint8_t(q[len - 1] << 4);
    }
    return finish(std::move(t), opt);
}

void nf4_dequantize_ref(const Nf4Tensor& t, float* out) {
    const std::vector<float> a = t.block_absmax();
    for (int64_t e = 0; e < t.numel(); ++e) {
        out[e] = kNf4Code[size_t(get_nibble(t.packed.data(), e))] * a[size_t(e / t.blocksize)];
    }
}

void nf4_dequantize(const Nf4Tensor& t, float* out) {
    const std::vector<float> a = t.block_absmax();
    const int64_t n = t.numel(), bs = t.blocksize, nb = t.blocks();
    const uint8_t* packed = t.packed.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t e0 = b * bs, len = std::min(n, e0 + bs) - e0;
        const float m = a[size_t(b)];
        const uint8_t* pb = packed + e0 / 2;
        float* ob = out + e0;
#pragma omp simd
        for (int64_t e = 0; e < len; ++e) {
            const uint8_t byte = pb[e >> 1];
            const int q = (e & 1) ? (byte & 0x0f) : (byte >> 4);
            ob[e] = kNf4Code[size_t(q)] * m;
        }
    }
}

}  // namespace ete
