// tests/backend/nf4_kernel_test.cpp — the NF4 backend ops: dequantize_nf4 against the scalar
// decoder (bit for bit, every output dtype, rows that start mid-byte and mid-block, double
// quantization or not), gemm_nf4 against dequantize + gemm (forward and input gradient, one tile
// and several), and the guarded backend giving the CPU backend's bytes.
#include <gtest/gtest.h>

#include "ete/quant/nf4.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

Nf4Tensor random_nf4(int64_t rows, int64_t cols, int blocksize, bool dq, uint32_t seed) {
    FVec w = random_vec(size_t(rows * cols), seed, -0.2, 0.2);
    for (int64_t r = 0; r < rows; r += 3) w[size_t(r * cols)] *= 4.0f;  // varied block absmax
    return nf4_quantize(w.data(), rows, cols, {blocksize, dq});
}

struct Shape3 {
    int64_t rows, cols;
    int blocksize;
    bool dq;
};

// Odd widths put row starts at odd elements (mid-byte) and inside blocks.
const Shape3 kShapes[] = {
    {13, 77, 32, true}, {9, 200, 64, false}, {6, 1000, 256, true}, {3, 4100, 4096, false}};

class Nf4Dequant : public ::testing::TestWithParam<DType> {};

TEST_P(Nf4Dequant, CpuMatchesTheScalarDecoderBitForBit) {
    const DType t = GetParam();
    auto cpu = make_cpu_backend();
    auto ref = make_ref_backend();
    for (const Shape3& s : kShapes) {
        SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols << " bs " << s.blocksize);
        const Nf4Tensor q = random_nf4(s.rows, s.cols, s.blocksize, s.dq, 5);
        const Nf4Buffer w(*cpu, q);
        std::vector<float> want(size_t(q.numel()));
        nf4_dequantize_ref(q, want.data());
        for (int64_t row0 : {int64_t(0), int64_t(1), s.rows - 2}) {
            const int64_t n = s.rows - row0;
            Buf a(t, n, s.cols, s.cols + 3), b(t, n, s.cols, s.cols + 3);
            cpu->dequantize_nf4(a.mat(), w.view(), row0);
            ref->dequantize_nf4(b.mat(), w.view(), row0);
            ASSERT_TRUE(a.same_bytes(b));
            Buf e = Buf::of(t, FVec(want.begin() + row0 * s.cols, want.end()), n, s.cols,
                            s.cols + 3, 0.0f);
            for (int64_t r = 0; r < n; ++r)
                for (int64_t c = 0; c < s.cols; ++c)
                    ASSERT_EQ(a.bits(r * a.ld() + c), e.bits(r * e.ld() + c)) << r << "," << c;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Nf4Dequant, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dname(info.param)); });

// c = a · op(W) by gemm_nf4 against the same product on the dequantized weight (gemm).
void check_gemm(Backend& be, DType t, int64_t M, const Nf4Tensor& q, bool trans_w, float beta) {
    const Nf4Buffer w(be, q);
    const int64_t K = trans_w ? q.cols : q.rows, N = trans_w ? q.rows : q.cols;
    Buf a = Buf::of(t, random_vec(size_t(M * K), 7), M, K);
    const FVec c0 = random_vec(size_t(M * N), 8);
    Buf c = Buf::of(DType::F32, c0, M, N), want = Buf::of(DType::F32, c0, M, N);
    Buf wd(t, q.rows, q.cols);
    be.dequantize_nf4(wd.mat(), w.view(), 0);
    be.gemm_nf4(a.cmat(), w.view(), trans_w, c.mat(), 0.5f, beta);
    be.gemm(a.cmat(), false, wd.cmat(), trans_w, want.mat(), 0.5f, beta);
    // The same products (one dequantized weight) summed in two orders: tiles of W's rows split K
    // for the input gradient, each tile's partial sum scaled by alpha and added into c (2 more
    // roundings per tile). K reaches 2101: the probabilistic bound (numerics.h) of two orders,
    // relative to 0.5 Σ|a w| + |beta c0|; the worst case (2K u, ~1% of |c| here) would pass a
    // decoded value off by one code.
    const int64_t tiles = q.rows * q.cols / (int64_t(4) << 20) + 2;  // of ~4M elements (nf4.cpp)
    const DVec g = c.values(), e = want.values();
    // 0.5 Σ_k |a w| by the reference backend's GEMM of the absolute values, not by a loop of the
    // test's own (M N K = 38M terms for the big weight: ~40 s a dtype in the unoptimized sanitizer
    // build); its fp32 rounding, at most K u ≈ 1.3e-4 of the sum, is lost in the bound's factor.
    auto absolute = [](const Buf& b) {
        FVec v = b.floats();
        for (float& x : v) x = std::fabs(x);
        return Buf::of(DType::F32, v, b.rows(), b.cols());
    };
    Buf mags(DType::F32, M, N);
    make_ref_backend()->gemm(absolute(a).cmat(), false, absolute(wd).cmat(), trans_w, mags.mat(),
                             0.5f, 0.0f);
    const DVec mv = mags.values();
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const size_t i = size_t(m * N + n);
            const double mag = mv[i] + (beta != 0 ? std::fabs(beta * c0[i]) : 0.0);
            const double tol = testing::reorder_prob(double(K + 2 * tiles + 2)) * mag;
            worst = std::max(worst, std::fabs(g[i] - e[i]) / tol);
            ASSERT_NEAR(g[i], e[i], tol) << i;
        }
    ErrorLog::get().note(std::string("gemm_nf4 vs dequantize+gemm ") + dname(t), worst, 1.0);
}

class Nf4Gemm : public ::testing::TestWithParam<DType> {};

TEST_P(Nf4Gemm, ForwardAndInputGradientEqualDequantizeThenGemm) {
    auto cpu = make_cpu_backend();
    for (bool dq : {false, true}) {
        const Nf4Tensor small = random_nf4(96, 130, 64, dq, 11);
        const Nf4Tensor big = random_nf4(2101, 2000, 64, dq, 12);  // > 4M elements: 2 tiles
        for (bool trans_w : {true, false}) {
            SCOPED_TRACE(::testing::Message() << "dq " << dq << " trans_w " << trans_w);
            check_gemm(*cpu, GetParam(), 17, small, trans_w, 0.0f);
            check_gemm(*cpu, GetParam(), 17, small, trans_w, 1.0f);
            check_gemm(*cpu, GetParam(), 9, big, trans_w, 1.0f);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Nf4Gemm, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dname(info.param)); });

TEST(Nf4Gemm, RefBackendAgrees) {
    auto ref = make_ref_backend();
    check_gemm(*ref, DType::F32, 5, random_nf4(40, 96, 32, true, 13), true, 0.0f);
    check_gemm(*ref, DType::F32, 5, random_nf4(40, 96, 32, false, 14), false, 1.0f);
}

TEST(Nf4Gemm, GuardedBackendGivesTheCpuBytes) {
    auto cpu = make_cpu_backend();
    auto guarded = make_guarded_backend();
    const Nf4Tensor q = random_nf4(50, 70, 64, true, 15);
    const FVec x = random_vec(size_t(6 * 70), 16);
    std::vector<float> out[2];
    Backend* bes[2] = {cpu.get(), guarded.get()};
    for (int k = 0; k < 2; ++k) {
        Backend& be = *bes[k];
        const Nf4Buffer w(be, q);
        testing::DeviceCopy xd(be, x), yd(be, std::vector<float>(6 * 50)),
            dd(be, std::vector<uint16_t>(50 * 70), DType::BF16);
        be.gemm_nf4(xd.mat(6, 70), w.view(), true, yd.mat(6, 50));
        be.dequantize_nf4(dd.mat(50, 70), w.view(), 0);
        out[k] = yd.download<float>();
        const auto d16 = dd.download<uint16_t>();
        out[k].insert(out[k].end(), d16.begin(), d16.end());
    }
    EXPECT_EQ(out[0], out[1]);
}

TEST(Nf4Gemm, ShapeMismatchIsAnError) {
    auto cpu = make_cpu_backend();
    const Nf4Buffer w(*cpu, random_nf4(8, 64, 64, false, 17));
    Buf a(DType::F32, 4, 63), c(DType::F32, 4, 8);
    EXPECT_NE(error_of([&] { cpu->gemm_nf4(a.cmat(), w.view(), true, c.mat()); }).find("gemm_nf4"),
              std::string::npos);
    Buf o(DType::F32, 3, 64);
    EXPECT_NE(error_of([&] { cpu->dequantize_nf4(o.mat(), w.view(), 6); }).find("rows [6, 9)"),
              std::string::npos);
}

}  // namespace
}  // namespace ete::backend_test
