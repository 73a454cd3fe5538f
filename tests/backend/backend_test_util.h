// tests/backend/backend_test_util.h — what the backend op tests share: random inputs, host
// buffers of any float dtype wrapped in views (the cpu and ref backends both address host
// memory) and the comparisons (bit for bit, elementwise bound, normalised error). The error
// estimates the bounds come from are in kernel_bounds.h.
//
// A 16-bit output adds eps(dtype) * |want| to the f32 computation's bound: an output rounded
// once to a 16-bit dtype lies within half an ulp of its exact value on both sides, so two
// roundings of nearly equal values differ by at most one ulp <= eps * |want| (eps = 2^-7 bf16,
// 2^-10 fp16: the ulp at 1).
//
// Set ETE_TEST_ERRORS=1 to print, at exit, the worst measured error of every (check, dtype).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/dtype.h"
#include "numerics.h"
#include "test_util.h"

namespace ete::backend_test {

using FVec = std::vector<float>;
using DVec = std::vector<double>;
using testing::host_cmat;
using testing::host_cvec;
using testing::host_mat;
using testing::host_vec;

template <typename T = float>
std::vector<T> random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(dist(gen));
    return v;
}

inline std::vector<int32_t> random_ids(int n, int V, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> dist(0, V - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& i : ids) i = dist(gen);
    return ids;
}

inline const char* dname(DType t) {
    return t == DType::F32 ? "F32" : t == DType::BF16 ? "BF16" : t == DType::F16 ? "F16" : "F64";
}

// The ulp at 1 of a float dtype: one rounding changes a value by at most eps * |value|.
inline double eps_of(DType t) {
    switch (t) {
        case DType::BF16:
            return 0x1p-7;
        case DType::F16:
            return 0x1p-10;
        case DType::F64:
            return 0x1p-52;
        default:
            return 0x1p-23;
    }
}
// The absolute floor of that bound: fp16 subnormals are multiples of 2^-24.
inline double tiny_of(DType t) {
    return t == DType::F16 ? 0x1p-24 : 0.0;
}

// ---- host buffers of one float dtype ----

// rows x cols elements of dtype F32, F64, BF16 or F16, rows ld apart. Elements are set and read
// as doubles; set() rounds once to nearest even (core/dtype.h), reads widen exactly.
class Buf {
  public:
    Buf() = default;
    Buf(DType t, int64_t rows, int64_t cols, int64_t ld = -1)
        : dtype_(t),
          rows_(rows),
          cols_(cols),
          ld_(ld < 0 ? cols : ld),
          raw_((size_t(std::max<int64_t>(rows * ld_, 1)) * dtype_size(t) + 7) / 8, 0) {}
    // v (rows * cols, row-major) rounded into t; padding columns hold `pad`.
    static Buf of(DType t, const FVec& v, int64_t rows, int64_t cols, int64_t ld = -1,
                  float pad = -7.0f) {
        Buf b(t, rows, cols, ld);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < b.ld_; ++c)
                b.put(r * b.ld_ + c, c < cols ? v[size_t(r * cols + c)] : pad);
        return b;
    }
    static Buf of(DType t, const FVec& v) { return of(t, v, 1, int64_t(v.size())); }

    DType dtype() const { return dtype_; }
    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    int64_t ld() const { return ld_; }
    Mat mat() { return {raw_.data(), dtype_, rows_, cols_, ld_}; }
    CMat cmat() const { return {raw_.data(), dtype_, rows_, cols_, ld_}; }
    Vec vec() { return {raw_.data(), dtype_, rows_ * ld_}; }
    CVec cvec() const { return {raw_.data(), dtype_, rows_ * ld_}; }

    double at(int64_t r, int64_t c) const { return get(r * ld_ + c); }
    void set(int64_t r, int64_t c, double v) { put(r * ld_ + c, v); }
    // The logical elements, row-major, widened.
    DVec values() const {
        DVec v;
        for (int64_t r = 0; r < rows_; ++r)
            for (int64_t c = 0; c < cols_; ++c) v.push_back(at(r, c));
        return v;
    }
    FVec floats() const {
        DVec d = values();
        return FVec(d.begin(), d.end());
    }
    // Every byte, padding included.
    bool same_bytes(const Buf& o) const {
        return raw_.size() == o.raw_.size() &&
               std::memcmp(raw_.data(), o.raw_.data(), raw_.size() * 8) == 0;
    }
    double get(int64_t i) const {
        const void* p = raw_.data();
        switch (dtype_) {
            case DType::F64:
                return static_cast<const double*>(p)[i];
            case DType::F32:
                return static_cast<const float*>(p)[i];
            case DType::BF16:
                return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
            default:
                return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        }
    }
    void put(int64_t i, double v) {
        void* p = raw_.data();
        switch (dtype_) {
            case DType::F64:
                static_cast<double*>(p)[i] = v;
                return;
            case DType::F32:
                static_cast<float*>(p)[i] = float(v);
                return;
            case DType::BF16:
                static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v));
                return;
            default:
                static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v));
        }
    }
    uint64_t bits(int64_t i) const {
        uint64_t b = 0;
        std::memcpy(&b, reinterpret_cast<const char*>(raw_.data()) + size_t(i) * dtype_size(dtype_),
                    dtype_size(dtype_));
        return b;
    }

  private:
    DType dtype_ = DType::F32;
    int64_t rows_ = 0, cols_ = 0, ld_ = 0;
    std::vector<uint64_t> raw_;  // 8-byte aligned storage
};

// ---- the worst errors, for ETE_TEST_ERRORS=1 ----

inline std::string dump(double v) {
    char s[64];
    std::snprintf(s, sizeof s, "%.9g", v);
    return s;
}

class ErrorLog {
  public:
    static ErrorLog& get() {
        static ErrorLog log;
        return log;
    }
    void note(const std::string& key, double err, double tol) {
        auto& e = worst_[key];
        e.first = std::max(e.first, err);
        e.second = tol;
    }
    ~ErrorLog() {
        const char* env = std::getenv("ETE_TEST_ERRORS");
        if (!env || std::string(env) != "1") return;
        std::printf("worst measured errors (check: worst / tolerance)\n");
        for (auto& [k, v] : worst_)
            std::printf("  %-58s %.3g%s\n", k.c_str(), v.first,
                        v.second > 0 ? (" / " + dump(v.second)).c_str() : "");
    }

  private:
    std::map<std::string, std::pair<double, double>> worst_;
};

// ---- comparisons ----

// Every byte of got equals want's (padding included); NaNs must match bit for bit too.
inline void expect_bitwise(const Buf& got, const Buf& want, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.rows() * got.ld(), want.rows() * want.ld()) << what;
    int bad = 0;
    for (int64_t i = 0; i < got.rows() * got.ld(); ++i)
        if (got.bits(i) != want.bits(i) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << dump(got.get(i)) << " want "
                          << dump(want.get(i));
    EXPECT_EQ(bad, 0) << what << ": elements not bit-identical";
}

inline void expect_bitwise(const FVec& got, const FVec& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << dump(got[i]) << " want "
                          << dump(want[i]);
    EXPECT_EQ(bad, 0) << what << ": elements not bit-identical";
}

// The padding columns [cols, ld) of every row still hold `pad`.
inline void expect_padding(const Buf& b, float pad, const std::string& what) {
    int bad = 0;
    for (int64_t r = 0; r < b.rows(); ++r)
        for (int64_t c = b.cols(); c < b.ld(); ++c)
            if (b.at(r, c) != double(pad) && bad++ < 3)
                ADD_FAILURE() << what << ": padding (" << r << ", " << c << ") = " << b.at(r, c);
    EXPECT_EQ(bad, 0) << what << ": padding overwritten";
}

// |got - want| <= atol + rtol * |want| over the logical elements; reports the first offenders
// and logs the worst |got - want| / (atol + rtol |want|) under `key` (when given).
inline void expect_close(const DVec& got, const DVec& want, double rtol, double atol,
                         const std::string& what, const std::string& key = "") {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(got[i] - want[i]), tol = atol + rtol * std::fabs(want[i]);
        worst = std::max(worst, tol > 0 ? d / tol : d > 0 ? INFINITY : 0.0);
        if (!(d <= tol) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << dump(got[i]) << " want "
                          << dump(want[i]) << " (tolerance " << tol << ")";
    }
    EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
    if (!key.empty()) ErrorLog::get().note(key + " (fraction of tol)", worst, 1.0);
}

inline void expect_close(const Buf& got, const Buf& want, double rtol, double atol,
                         const std::string& what, const std::string& key = "") {
    expect_close(got.values(), want.values(), rtol, atol, what, key);
}

// One ulp of dtype t at |x| (the spacing of t's values there; fp16 subnormals: 2^-24).
inline double ulp_at(DType t, double x) {
    const double a = std::fabs(x);
    if (a == 0) return t == DType::F16 ? 0x1p-24 : 0x1p-149;
    return std::max(eps_of(t) * std::exp2(std::floor(std::log2(a))), tiny_of(t));
}

// A 16-bit (or f32) output against the reference's: one rounding of each side (eps(dtype))
// on top of the f32 kernel's own tolerance (rtol32, atol32). Also logs the worst difference in
// ulps of the dtype, over the elements the atol does not dominate.
inline void expect_close_rounded(const Buf& got, const Buf& want, double rtol32, double atol32,
                                 const std::string& what, const std::string& key) {
    const DType t = want.dtype();
    const double rtol = (t == DType::F32 ? 0.0 : eps_of(t)) + rtol32;
    const std::string k = key + " " + dname(t);
    expect_close(got, want, rtol, atol32 + tiny_of(t), what, k);
    const DVec g = got.values(), w = want.values();
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i)
        if (eps_of(t) * std::fabs(w[i]) > atol32)
            worst = std::max(worst, std::fabs(g[i] - w[i]) / ulp_at(t, w[i]));
    ErrorLog::get().note(k + " (ulps)", worst, 0.0);
}

// max |a - b| / max |b| (b the reference); 0 when both are all zero, infinity when a holds a
// NaN or infinity (std::max would silently skip a NaN).
template <typename A, typename B>
double norm_err(const std::vector<A>& a, const std::vector<B>& b) {
    double diff = 0, mag = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(double(a[i]))) return INFINITY;
        diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
        mag = std::max(mag, std::abs(double(b[i])));
    }
    return mag > 0 ? diff / mag : diff;
}

// |got - want| <= bound[i] for every element (the estimates below); reports the first offenders
// and logs the worst |got - want| / bound under `key` (when given).
inline void expect_within_bound(const DVec& got, const DVec& want, const DVec& bound,
                                const std::string& what, const std::string& key = "") {
    ASSERT_EQ(got.size(), want.size()) << what;
    ASSERT_EQ(got.size(), bound.size()) << what;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double d = std::fabs(got[i] - want[i]);
        worst = std::max(worst, bound[i] > 0 ? d / bound[i] : d > 0 ? INFINITY : 0.0);
        if (!(d <= bound[i]) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << dump(got[i]) << " want "
                          << dump(want[i]) << " (bound " << bound[i] << ")";
    }
    EXPECT_EQ(bad, 0) << what << ": elements outside their error bound";
    if (!key.empty()) ErrorLog::get().note(key + " (fraction of bound)", worst, 1.0);
}

inline DVec dvec(const FVec& v) {
    return DVec(v.begin(), v.end());
}

// An output of dtype t against the reference's: the f32 computation's bound32[i], plus for a
// 16-bit t one rounding of each side into it (file header), logged under `key` + the dtype.
inline void expect_rounded_within(const Buf& got, const Buf& want, const DVec& bound32,
                                  const std::string& what, const std::string& key) {
    const DType t = want.dtype();
    const double e16 = t == DType::F32 ? 0.0 : eps_of(t);
    const DVec w = want.values();
    DVec bound(bound32.size());
    for (size_t i = 0; i < bound.size() && i < w.size(); ++i)
        bound[i] = (bound32[i] + e16 * std::fabs(w[i])) * (1 + e16) + tiny_of(t);
    expect_within_bound(got.values(), w, bound, what, key + " " + dname(t));
}

// ---- awkward sizes ----

struct Shape {
    int N, C;
};

// N in {1, 31, 32, 33} x C in {1, 7, 31, 32, 33, 64, 1000}: around the 16-lane vector width,
// plus one shape over the OpenMP thresholds.
inline std::vector<Shape> shapes() {
    std::vector<Shape> s;
    for (int n : {1, 31, 32, 33})
        for (int c : {1, 7, 31, 32, 33, 64, 1000}) s.push_back({n, c});
    s.push_back({300, 517});
    return s;
}

inline std::string name(Shape s) {
    return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
}

// doc_start (B*T) for B rows of T: row b cut into documents of the lengths kLengths cycled from
// offset b (1, 3, 7, 2, 13, ...); the last row is one whole-row document.
inline std::vector<int32_t> packed_starts(int B, int T) {
    const int kLengths[] = {1, 3, 7, 2, 13};
    std::vector<int32_t> s;
    for (int b = 0; b < B; ++b) {
        int start = 0, k = b;
        for (int t = 0; t < T; ++t) {
            if (b + 1 < B && t == start + kLengths[k % 5]) start = t, ++k;
            s.push_back(start);
        }
    }
    return s;
}

// Values every conversion must get right: signed zeros, infinities, NaN, fp16's largest finite
// value and the first that overflows it, fp16 subnormals and underflow, exact ties for bf16
// (1 + 2^-8, 1 + 3 * 2^-8) and fp16 (1 + 2^-11), and the largest float.
inline FVec conversion_inputs(size_t n, uint32_t seed) {
    FVec v = random_vec(n, seed, -70000.0, 70000.0);
    const float special[] = {
        0.0f,           -0.0f,           INFINITY,      -INFINITY, NAN,     65504.0f,
        65520.0f,       -65519.0f,       3.0e-6f,       -6.0e-8f,  2.9e-8f, 1.0f + 0x1p-8f,
        1.0f + 0x3p-8f, 1.0f + 0x1p-11f, 3.4028235e38f, 1e-30f};
    for (size_t i = 0; i < n; i += 3) v[i] = special[(i / 3) % 16];
    for (size_t i = 1; i < n; i += 5) v[i] *= 1e-4f;  // small values too
    return v;
}

// Mostly moderate values, with a sprinkle of large ones that saturate the sigmoid / exp.
inline FVec activation_inputs(size_t n, uint32_t seed) {
    FVec v = random_vec(n, seed, -6.0, 6.0);
    const float big[] = {-100.0f, -40.0f, -15.0f, 15.0f, 40.0f, 100.0f, 0.0f};
    for (size_t i = 0; i < n; i += 13) v[i] = big[(i / 13) % 7];
    return v;
}

// ---- attention inputs ----

// HF RoPE tables (T, D/2): angle t * base^(-2j/D).
template <typename T = float>
void rope_tables(int T_, int D, std::vector<T>& cos, std::vector<T>& sin) {
    int half = D / 2;
    cos.resize(size_t(T_) * half);
    sin.resize(size_t(T_) * half);
    for (int t = 0; t < T_; ++t)
        for (int j = 0; j < half; ++j) {
            double angle = t * std::pow(10000.0, -2.0 * j / D);
            cos[size_t(t) * half + j] = T(std::cos(angle));
            sin[size_t(t) * half + j] = T(std::sin(angle));
        }
}

// The q, k or v columns of every row of a (N, (H + 2KV) * D) tensor, as one vector.
enum class Part { kQ, kK, kV };
template <typename T>
std::vector<T> part_of(const std::vector<T>& qkv, const AttnDims& d, Part p) {
    int lo = p == Part::kQ ? 0 : p == Part::kK ? d.H * d.D : (d.H + d.KV) * d.D;
    int hi = p == Part::kQ ? d.H * d.D : p == Part::kK ? (d.H + d.KV) * d.D : d.qkv_stride();
    std::vector<T> r;
    for (size_t n = 0; n < size_t(d.B) * d.T; ++n)
        for (int c = lo; c < hi; ++c) r.push_back(qkv[n * d.qkv_stride() + c]);
    return r;
}

// doc_start (B*T) of rows cut into documents of the given lengths; the last document of a row is
// cut (or extended) to end at T. rows.size() == B.
inline std::vector<int32_t> starts_of(const std::vector<std::vector<int>>& rows, int T) {
    std::vector<int32_t> s;
    for (const auto& lengths : rows) {
        int start = 0, k = 0;
        for (int t = 0; t < T; ++t) {
            if (k < int(lengths.size()) && t == start + lengths[size_t(k)]) start = t, ++k;
            s.push_back(start);
        }
    }
    return s;
}

// Awkward packings, B = 4: documents of 1, 31 and 33 positions and one starting exactly on the
// 128 boundary (a forward key tile, a backward query chunk); one whole-row document; many short
// documents with one starting at 64; a document starting at 100, so the forward query tile 96..127
// starts at key 0 and its later queries have no live key in the whole first key tile.
inline const std::vector<std::vector<int>> kAwkwardRows = {
    {1, 31, 33, 63, 3}, {1 << 20}, {2, 1, 1, 60, 17, 1, 9, 40}, {100, 20}};

inline std::string describe(const AttnDims& d) {
    return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " H=" + std::to_string(d.H) +
           " KV=" + std::to_string(d.KV) + " D=" + std::to_string(d.D) +
           (d.doc_start.empty() ? "" : " packed") +
           (d.window > 0 ? " window=" + std::to_string(d.window) : "");
}

}  // namespace ete::backend_test
