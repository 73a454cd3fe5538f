// tests/backend/device_buf.h — the harness of the backend conformance suite
// (conformance_test.cpp): host buffers copied into any backend's memory and back, and the
// comparisons of what comes back with the reference backend's answer.
//
// Bytes cross only through DeviceMemory (upload, download, fill_bytes, after synchronize): the
// host never loads or stores backend memory, so the same test runs on the CPU backend, on the
// guarded CPU backend (whose memory faults on any host access) and on a GPU. A buffer keeps its
// host twin's layout, padding columns (ld > cols) included, so a view of either spans the same
// elements and the padding can be checked after the op.
//
// Outputs start poisoned: every byte of every logical element 0xFF (a NaN in F32, BF16 and F16)
// for floats, 0xA5 for integers, so an element an op fails to write fails its comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "ete/backend/backend.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/core/device_memory.h"

namespace ete::backend_test {

inline constexpr int kPoisonFloat = 0xFF;  // a NaN in F32, BF16, F16
inline constexpr int kPoisonInt = 0xA5;    // -1515870811 as I32: no sum of these tests

// rows x cols integers (T = int8_t, uint8_t or int32_t for I8, U8, I32), rows ld apart: ids,
// targets, document starts, quantized activations, int32 sums, fake-quant masks.
template <typename T>
class Ints {
  public:
    Ints() = default;
    Ints(DType t, int64_t rows, int64_t cols, int64_t ld = -1, T fill = T(0))
        : dtype_(t),
          rows_(rows),
          cols_(cols),
          ld_(ld < 0 ? cols : ld),
          v_(size_t(rows * ld_), fill) {
        ETE_ASSERT(dtype_size(t) == sizeof(T));
    }
    // One row of values.
    static Ints row(DType t, const std::vector<T>& v) {
        Ints r(t, 1, int64_t(v.size()));
        r.v_ = v;
        return r;
    }
    // Every byte of the logical elements kPoisonInt; the padding holds `pad`.
    static Ints poisoned(DType t, int64_t rows, int64_t cols, int64_t ld = -1, T pad = T(17)) {
        Ints r(t, rows, cols, ld, pad);
        for (int64_t i = 0; i < rows; ++i)
            std::memset(&r.v_[size_t(i * r.ld_)], kPoisonInt, size_t(cols) * sizeof(T));
        return r;
    }

    DType dtype() const { return dtype_; }
    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    int64_t ld() const { return ld_; }
    T& at(int64_t r, int64_t c) { return v_[size_t(r * ld_ + c)]; }
    T at(int64_t r, int64_t c) const { return v_[size_t(r * ld_ + c)]; }
    const std::vector<T>& raw() const { return v_; }  // every element, padding included
    Mat mat() { return {v_.data(), dtype_, rows_, cols_, ld_}; }
    CMat cmat() const { return {v_.data(), dtype_, rows_, cols_, ld_}; }
    Vec vec() { return {v_.data(), dtype_, rows_ * ld_}; }
    CVec cvec() const { return {v_.data(), dtype_, rows_ * ld_}; }

  private:
    DType dtype_ = DType::I32;
    int64_t rows_ = 0, cols_ = 0, ld_ = 0;
    std::vector<T> v_;
};

// A float Buf whose logical elements are poison (NaN) and whose padding columns hold `pad`.
inline Buf poisoned(DType t, int64_t rows, int64_t cols, int64_t ld = -1, float pad = -7.0f) {
    Buf b = Buf::of(t, FVec(size_t(rows * cols), 0.0f), rows, cols, ld, pad);
    auto* p = static_cast<char*>(b.mat().data);
    const size_t e = dtype_size(t);
    for (int64_t r = 0; r < rows; ++r)
        std::memset(p + size_t(r * b.ld()) * e, kPoisonFloat, size_t(cols) * e);
    return b;
}

// A (rows, cols) matrix, rows ld apart, in a backend's memory: rows * ld elements, so it holds
// exactly the bytes of the host buffer it was made from.
class DevBuf {
  public:
    DevBuf(Backend& be, const Buf& host)
        : DevBuf(be, host.cmat().data, host.dtype(), host.rows(), host.cols(), host.ld()) {}
    template <typename T>
    DevBuf(Backend& be, const Ints<T>& host)
        : DevBuf(be, host.cmat().data, host.dtype(), host.rows(), host.cols(), host.ld()) {}

    Mat mat() const { return {buf_.data(), dtype_, rows_, cols_, ld_}; }
    CMat cmat() const { return mat(); }
    Vec vec() const { return {buf_.data(), dtype_, rows_ * ld_}; }
    CVec cvec() const { return vec(); }

    // Every byte back (padding included), once the backend has finished what was issued.
    Buf download() const {
        Buf b(dtype_, rows_, cols_, ld_);
        fetch(b.mat().data);
        return b;
    }
    template <typename T>
    Ints<T> download_ints() const {
        Ints<T> b(dtype_, rows_, cols_, ld_);
        fetch(b.mat().data);
        return b;
    }

  private:
    DevBuf(Backend& be, const void* host, DType t, int64_t rows, int64_t cols, int64_t ld)
        : be_(&be),
          dtype_(t),
          rows_(rows),
          cols_(cols),
          ld_(ld),
          buf_(be, size_t(rows * ld) * dtype_size(t)) {
        ETE_ASSERT(buf_.bytes() > 0);  // an empty view would mean "absent"
        be.upload(buf_.data(), host, buf_.bytes());
    }
    void fetch(void* host) const {
        be_->synchronize();
        be_->download(host, buf_.data(), buf_.bytes());
    }

    Backend* be_;
    DType dtype_;
    int64_t rows_, cols_, ld_;
    DeviceBuffer buf_;
};

// ---- comparisons of a downloaded output with the reference's ----

// The padding columns of got hold want's bytes (the reference never writes them).
inline void expect_padding_kept(const Buf& got, const Buf& want, const std::string& what) {
    ASSERT_EQ(got.ld(), want.ld()) << what;
    int bad = 0;
    for (int64_t r = 0; r < got.rows(); ++r)
        for (int64_t c = got.cols(); c < got.ld(); ++c)
            if (got.bits(r * got.ld() + c) != want.bits(r * want.ld() + c) && bad++ < 3)
                ADD_FAILURE() << what << ": padding (" << r << ", " << c << ") = " << got.at(r, c)
                              << ", want " << want.at(r, c) << " untouched";
    EXPECT_EQ(bad, 0) << what << ": padding overwritten";
}

// Exactly the reference's values: equal, the same sign of zero, or both NaN (a NaN's payload
// is not part of any op's contract). Padding kept.
inline void expect_exact(const Buf& got, const Buf& want, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    ASSERT_EQ(got.rows(), want.rows()) << what;
    ASSERT_EQ(got.cols(), want.cols()) << what;
    int bad = 0;
    for (int64_t r = 0; r < got.rows(); ++r)
        for (int64_t c = 0; c < got.cols(); ++c) {
            const double g = got.at(r, c), w = want.at(r, c);
            const bool same =
                std::isnan(w) ? std::isnan(g) : g == w && std::signbit(g) == std::signbit(w);
            if (!same && bad++ < 3)
                ADD_FAILURE() << what << " (" << r << ", " << c << "): got " << dump(g) << " want "
                              << dump(w);
        }
    EXPECT_EQ(bad, 0) << what << ": elements differ from the reference";
    expect_padding_kept(got, want, what);
}

// Integers: every element, padding included, equal.
template <typename T>
void expect_exact(const Ints<T>& got, const Ints<T>& want, const std::string& what) {
    ASSERT_EQ(got.raw().size(), want.raw().size()) << what;
    int bad = 0;
    for (int64_t r = 0; r < got.rows(); ++r)
        for (int64_t c = 0; c < got.ld(); ++c)
            if (got.at(r, c) != want.at(r, c) && bad++ < 3)
                ADD_FAILURE() << what << " (" << r << ", " << c << ")"
                              << (c >= got.cols() ? " (padding)" : "") << ": got "
                              << int64_t(got.at(r, c)) << " want " << int64_t(want.at(r, c));
    EXPECT_EQ(bad, 0) << what << ": integers differ from the reference";
}

// The f32 kernels' tolerance of an op: |got - want| <= rtol |want| + atol. A 16-bit output
// adds one rounding of its dtype on each side (eps(dtype) |want|, see backend_test_util.h).
struct Tol {
    double rtol = 0, atol = 0;
};

// Within tol (plus the output's rounding), padding kept; the worst error is logged under `what`
// (ETE_TEST_ERRORS=1).
inline void expect_near(const Buf& got, const Buf& want, Tol tol, const std::string& what) {
    expect_close_rounded(got, want, tol.rtol, tol.atol, what, "conformance " + what);
    expect_padding_kept(got, want, what);
}

// |got - want| <= tol[i] for each logical element i (row-major), padding kept.
inline void expect_within(const Buf& got, const Buf& want, const DVec& tol,
                          const std::string& what) {
    const DVec g = got.values(), w = want.values();
    ASSERT_EQ(g.size(), w.size()) << what;
    ASSERT_EQ(g.size(), tol.size()) << what;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        const double d = std::fabs(g[i] - w[i]);
        worst = std::max(worst, tol[i] > 0 ? d / tol[i] : d > 0 ? INFINITY : 0.0);
        if (!(d <= tol[i]) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << dump(g[i]) << " want " << dump(w[i])
                          << " (tolerance " << tol[i] << ")";
    }
    EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
    ErrorLog::get().note("conformance " + what + " (fraction of tol)", worst, 1.0);
    expect_padding_kept(got, want, what);
}

// The error bound of a sum of n terms whose magnitudes add up to abs_sum, formed in fp32 in any
// order ((n + 2) 2^-24 abs_sum on each side: n additions and the final scaling), then rounded
// once into `out` (one ulp of |want| for a 16-bit dtype; fp16 subnormals 2^-24 apart).
inline double sum_tol(double abs_sum, int64_t n, DType out, double want) {
    const double e16 = out == DType::F32 ? 0.0 : eps_of(out);
    return double(n + 2) * 0x1p-24 * abs_sum * (1 + e16) + e16 * std::fabs(want) + tiny_of(out);
}

// ---- what the conformance suites share (conformance_test.cpp, conformance_quant_test.cpp) ----

namespace {

constexpr DType kF32 = DType::F32, kBF16 = DType::BF16, kF16 = DType::F16;
constexpr DType kFloats[] = {kF32, kBF16, kF16};

// (rows, cols) of random values in [lo, hi) rounded to t, rows ld apart (padding -7).
Buf rnd(DType t, int64_t rows, int64_t cols, int64_t ld, uint32_t seed, double lo = -1.0,
        double hi = 1.0) {
    return Buf::of(t, random_vec(size_t(rows * cols), seed, lo, hi), rows, cols, ld);
}

// An F32 vector (one row).
Buf f32_row(const FVec& v) {
    return Buf::of(kF32, v);
}

std::string pair_name(DType a, DType b) {
    return std::string(dname(a)) + "/" + dname(b);
}

// Per-tensor or per-row scale and zero point (F32).
struct QParams {
    Buf s, z;
    QParams(int64_t n, float s0, int zmod) {
        FVec sv(static_cast<size_t>(n)), zv(static_cast<size_t>(n));
        for (size_t i = 0; i < sv.size(); ++i)
            sv[i] = s0 * (1 + 0.03f * float(i)), zv[i] = float(int(i) % zmod - zmod / 2);
        s = f32_row(sv);
        z = f32_row(zv);
    }
};

// A product's (M, N, K).
struct GemmDims {
    int M, N, K;
};

class Ops : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (GetParam() == "cuda") {
            const std::string why = cuda_unavailable_reason();
            if (!why.empty()) GTEST_SKIP() << why;
        }
        be_ = make_backend(GetParam());
    }
    Backend& be() { return *be_; }
    Backend& ref() { return *ref_; }
    DevBuf up(const Buf& b) { return DevBuf(*be_, b); }
    template <typename T>
    DevBuf up(const Ints<T>& b) {
        return DevBuf(*be_, b);
    }
    // The CPU backend's 16-bit GEMMs are oneDNN's; a build without it throws for them.
    bool gemm16_missing() const {
        return (GetParam() == "cpu" || GetParam() == "guarded") && !cpu::dnnl_available();
    }

    std::unique_ptr<Backend> be_;
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

}  // namespace

}  // namespace ete::backend_test
