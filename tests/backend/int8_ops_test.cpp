// tests/backend/int8_ops_test.cpp — the integer model's ops (backend.h): quantize_s8 against the
// reference and against fake_quant's integers (values planted on rounding ties, on and beyond the
// grid's ends, NaN), per tensor and per row, I8 and U8; gemm_s8 on a prepared (packed) weight
// equal to the plain product on awkward shapes and repeated row counts; dequantize_s32 against the
// reference and an exact double computation, with zero points, offsets and beta; swiglu_quantize
// and rmsnorm_quantize against their two ops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_bounds.h"

namespace ete::backend_test {
namespace int8_ops_test {

std::vector<float> planted_values(int64_t n, float s, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 40.0f * s);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    // Ties (k + 0.5 steps), the ends of the grid and beyond, zero, NaN.
    const float planted[] = {0.5f * s,   -0.5f * s,   2.5f * s,   -3.5f * s,
                             127.0f * s, -128.0f * s, 127.5f * s, -128.5f * s,
                             300.0f * s, -300.0f * s, 0.0f,       NAN};
    for (size_t i = 0; i < std::size(planted) && i < v.size(); ++i)
        v[i * 7 % v.size()] = planted[i];
    return v;
}

TEST(Int8Ops, QuantizeMatchesTheReferenceAndFakeQuantsIntegers) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    for (const bool per_row : {false, true}) {
        const int64_t R = 37, C = 301, ld = C + 3;
        std::vector<float> x = planted_values(R * ld, 0.05f, 11 + per_row);
        std::vector<float> s(per_row ? R : 1), z(s.size());
        for (size_t i = 0; i < s.size(); ++i)
            s[i] = 0.05f * (1 + 0.01f * float(i)), z[i] = float(int(i % 9) - 4);
        const CMat X{x.data(), DType::F32, R, C, ld};
        const CVec S{s.data(), DType::F32, int64_t(s.size())},
            Z{z.data(), DType::F32, int64_t(z.size())};
        std::vector<int8_t> qi_ref(size_t(R * C)), qi_cpu = qi_ref;
        std::vector<uint8_t> qu_cpu(size_t(R * C));
        ref->quantize_s8({qi_ref.data(), DType::I8, R, C}, X, S, Z, g);
        cpu->quantize_s8({qi_cpu.data(), DType::I8, R, C}, X, S, Z, g);
        cpu->quantize_s8({qu_cpu.data(), DType::U8, R, C}, X, S, Z, g);
        EXPECT_EQ(qi_cpu, qi_ref);
        // fake_quant's output is (q - z) · s: its integers are q.
        std::vector<float> y(size_t(R * C));
        ref->fake_quant({y.data(), DType::F32, R, C}, X, S, Z, {}, C, g);
        for (int64_t r = 0; r < R; ++r)
            for (int64_t c = 0; c < C; ++c) {
                const size_t i = size_t(r * C + c);
                const int64_t k = per_row ? r : 0;
                EXPECT_EQ(int(qu_cpu[i]), int(qi_cpu[i]) + 128);
                if (std::isnan(x[size_t(r * ld + c)])) {
                    EXPECT_EQ(qi_ref[i], int8_t(z[size_t(k)])) << "NaN gives the zero point";
                    continue;
                }
                ASSERT_EQ(float(qi_ref[i]), std::nearbyint(y[i] / s[size_t(k)]) + z[size_t(k)])
                    << r << "," << c;
            }
    }
}

// swiglu_quantize is quantize_s8 of swiglu_forward's output: the CPU's one pass equals its two
// ops bit for bit (F32 and BF16 activations, per tensor and per row, U8 and I8, strided), and the
// reference's default (the two ops) equals the reference's two ops.
TEST(Int8Ops, SwigluQuantizeIsQuantizeOfSwiglu) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const int64_t R = 29, F = 173, ld = 2 * F + 5;
    for (const DType at : {DType::F32, DType::BF16})
        for (const bool per_row : {false, true})
            for (const DType qt : {DType::U8, DType::I8}) {
                SCOPED_TRACE(
                    fmt::format("{} per row {} {}", dtype_name(at), per_row, dtype_name(qt)));
                const Buf gu = Buf::of(at, random_vec(size_t(R * ld), 9, -6.0, 6.0), R, 2 * F, ld);
                std::vector<float> s(per_row ? R : 1), z(s.size());
                for (size_t i = 0; i < s.size(); ++i)
                    s[i] = 0.1f * (1 + 0.03f * float(i)), z[i] = float(int(i % 7) - 3);
                const CVec S{s.data(), DType::F32, int64_t(s.size())},
                    Z{z.data(), DType::F32, int64_t(z.size())};
                for (Backend* be : {cpu.get(), ref.get()}) {
                    Buf act(at, R, F);
                    std::vector<uint8_t> fused(size_t(R * F)), two(fused.size());
                    be->swiglu_quantize({fused.data(), qt, R, F}, gu.cmat(), S, Z, g);
                    be->swiglu_forward(act.mat(), gu.cmat());
                    be->quantize_s8({two.data(), qt, R, F}, act.cmat(), S, Z, g);
                    ASSERT_EQ(fused, two) << be->name();
                    int spread = 0;
                    for (uint8_t v : fused) spread += v != fused[0];
                    EXPECT_GT(spread, R * F / 2) << "the values span the grid";
                }
            }
}

// rmsnorm_quantize is quantize_s8 of rmsnorm_forward's F32 output: bit for bit on the CPU (F32
// and BF16 inputs, per tensor and per row, U8 and I8, strided) and on the reference's default.
TEST(Int8Ops, RmsnormQuantizeIsQuantizeOfTheNorm) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const int64_t R = 31, C = 200, ld = C + 9;
    const FVec w = random_vec(size_t(C), 4, 0.5, 1.5);
    for (const DType xt : {DType::F32, DType::BF16})
        for (const bool per_row : {false, true})
            for (const DType qt : {DType::U8, DType::I8}) {
                SCOPED_TRACE(
                    fmt::format("{} per row {} {}", dtype_name(xt), per_row, dtype_name(qt)));
                const Buf x = Buf::of(xt, random_vec(size_t(R * ld), 5, -3.0, 3.0), R, C, ld);
                std::vector<float> s(per_row ? R : 1), z(s.size());
                for (size_t i = 0; i < s.size(); ++i)
                    s[i] = 0.02f * (1 + 0.03f * float(i)), z[i] = float(int(i % 5) - 2);
                const CVec S{s.data(), DType::F32, int64_t(s.size())},
                    Z{z.data(), DType::F32, int64_t(z.size())};
                for (Backend* be : {cpu.get(), ref.get()}) {
                    std::vector<float> out(static_cast<size_t>(R * C)),
                        rstd(static_cast<size_t>(R));
                    std::vector<uint8_t> fused(size_t(R * C)), two(fused.size());
                    be->rmsnorm_quantize({fused.data(), qt, R, C}, x.cmat(), host_cvec(w), 1e-5f, S,
                                         Z, g);
                    be->rmsnorm_forward(host_mat(out, R, C), host_vec(rstd), x.cmat(), host_cvec(w),
                                        1e-5f);
                    be->quantize_s8({two.data(), qt, R, C}, host_cmat(out, R, C), S, Z, g);
                    ASSERT_EQ(fused, two) << be->name();
                    int spread = 0;
                    for (uint8_t v : fused) spread += v != fused[0];
                    EXPECT_GT(spread, R * C / 2) << "the values span the grid";
                }
            }
}

TEST(Int8Ops, QuantizeReadsBf16) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const QuantGrid g = QuantGrid::of(8, QParamRule::Symmetric);
    std::vector<float> xf = planted_values(64 * 40, 0.1f, 3);
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = f32_to_bf16(xf[i]);
    float s = 0.1f, z = 0.0f;
    std::vector<int8_t> a(xf.size()), b(xf.size());
    const CMat X{xb.data(), DType::BF16, 64, 40};
    ref->quantize_s8({a.data(), DType::I8, 64, 40}, X, {&s, DType::F32, 1}, {&z, DType::F32, 1}, g);
    cpu->quantize_s8({b.data(), DType::I8, 64, 40}, X, {&s, DType::F32, 1}, {&z, DType::F32, 1}, g);
    EXPECT_EQ(a, b);
    EXPECT_EQ(*std::max_element(a.begin(), a.end()), 127);
    EXPECT_EQ(*std::min_element(a.begin(), a.end()), -127);  // the symmetric grid's end
}

TEST(Int8Ops, PreparedWeightGivesThePlainProduct) {
    auto cpu = make_cpu_backend();
    auto ref = make_ref_backend();
    std::mt19937 gen(5);
    std::uniform_int_distribution<int> d(-128, 127);
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{67, 129}, {512, 1408}, {3, 5}}) {
        const int64_t ldw = K + 1;
        std::vector<int8_t> w(size_t(N * ldw));
        for (auto& v : w) v = int8_t(d(gen));
        const CMat W{w.data(), DType::I8, N, K, ldw};
        auto pc = cpu->prepare_s8(W);
        auto pr = ref->prepare_s8(W);
        for (const int64_t M : {1, 33, 256, 33}) {  // a row count again: the packed copy reused
            SCOPED_TRACE(fmt::format("{}x{}x{}", M, N, K));
            std::vector<uint8_t> a(size_t(M * K));
            for (auto& v : a) v = uint8_t(d(gen) + 128);
            const CMat A{a.data(), DType::U8, M, K};
            std::vector<int32_t> c1(size_t(M * N)), c2 = c1, c3 = c1;
            cpu->gemm_s8(A, W, {c1.data(), DType::I32, M, N});
            cpu->gemm_s8(A, *pc, {c2.data(), DType::I32, M, N});
            ref->gemm_s8(A, *pr, {c3.data(), DType::I32, M, N});
            EXPECT_EQ(c2, c1);
            EXPECT_EQ(c3, c1);
        }
        // Another backend's prepared weight multiplies through its plain view.
        std::vector<uint8_t> a(size_t(4 * K), 7);
        std::vector<int32_t> c1(size_t(4 * N)), c2 = c1;
        cpu->gemm_s8({a.data(), DType::U8, 4, K}, W, {c1.data(), DType::I32, 4, N});
        cpu->gemm_s8({a.data(), DType::U8, 4, K}, *pr, {c2.data(), DType::I32, 4, N});
        EXPECT_EQ(c2, c1);
    }
}

TEST(Int8Ops, DequantizeIsTheExactBracketScaledOnce) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const int64_t M = 19, N = 45, K = 1408;
    std::mt19937 gen(9);
    std::uniform_int_distribution<int> d(-2000000, 2000000);
    for (const bool per_row : {false, true})
        for (const int offset : {0, 128})
            for (const float beta : {0.0f, 1.0f}) {
                SCOPED_TRACE(fmt::format("per_row {} offset {} beta {}", per_row, offset, beta));
                std::vector<int32_t> acc(static_cast<size_t>(M * N)), wsum(static_cast<size_t>(N));
                for (auto& v : acc) v = d(gen);
                for (auto& v : wsum) v = d(gen) % (127 * K);
                acc[0] = 255 * 127 * int32_t(K);  // the largest product: no overflow
                wsum[0] = -127 * int32_t(K);
                std::vector<float> as(per_row ? M : 1), az(as.size()), ws(static_cast<size_t>(N));
                for (size_t i = 0; i < as.size(); ++i)
                    as[i] = 0.01f + 0.001f * float(i),
                    az[i] = offset ? 127.0f - float(i % 3) : -3.0f;
                for (size_t i = 0; i < ws.size(); ++i) ws[i] = 1e-3f * float(i + 1);
                std::vector<float> y0(size_t(M * (N + 2)), 0.25f), y1 = y0;
                const CVec AS{as.data(), DType::F32, int64_t(as.size())},
                    AZ{az.data(), DType::F32, int64_t(az.size())};
                const CVec WS{ws.data(), DType::F32, N}, WSUM{wsum.data(), DType::I32, N};
                const CMat A{acc.data(), DType::I32, M, N};
                ref->dequantize_s32({y0.data(), DType::F32, M, N, N + 2}, A, AS, AZ, offset, WS,
                                    WSUM, beta);
                cpu->dequantize_s32({y1.data(), DType::F32, M, N, N + 2}, A, AS, AZ, offset, WS,
                                    WSUM, beta);
                EXPECT_EQ(y1, y0);
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n) {
                        const size_t k = per_row ? size_t(m) : 0;
                        const double bracket = double(acc[size_t(m * N + n)]) -
                                               (double(az[k]) + offset) * double(wsum[size_t(n)]);
                        const double want = bracket * double(as[k]) * double(ws[size_t(n)]) +
                                            (beta != 0 ? 0.25 : 0.0);
                        // dequant_value: float(bracket) * (a_scale * w_scale), + beta y fused
                        const Ev y = rounded(f64(bracket)) * (f32(as[k]) * f32(ws[size_t(n)])) +
                                     f32(beta != 0 ? 0.25 : 0.0);
                        ASSERT_NEAR(y0[size_t(m * (N + 2) + n)], want, y.e);
                    }
                EXPECT_EQ(y0[size_t(N)], 0.25f);  // padding untouched
            }
}

// The fused product (oneDNN's output scales and source zero point where it has them): the exact
// bracket scaled once, within fp32 rounding of the reference and of the computation in double;
// repeated calls (the weight's primitive with its scales fixed) give the same numbers. Either
// side rounds the bracket into fp32, its product with the scale and the addition of beta y:
// within gamma_3 of |bracket scale| + |beta y| of the exact value, so within twice that of
// each other (the magnitude read off the reference's y: one more rounding).
TEST(Int8Ops, ScaledProductIsTheBracketScaledOnce) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> d(-128, 127);
    struct Shape {
        int64_t M, N, K;
    };
    for (const Shape sh :
         {Shape{1, 1, 1}, Shape{33, 67, 129}, Shape{256, 96, 512}, Shape{7, 512, 1408}})
        for (const DType at : {DType::U8, DType::I8})
            for (const float beta : {0.0f, 1.0f}) {
                SCOPED_TRACE(
                    fmt::format("{}x{}x{} {} beta {}", sh.M, sh.N, sh.K, dtype_name(at), beta));
                const bool u8 = at == DType::U8;
                const int32_t zero = u8 ? 131 : -5;
                std::vector<uint8_t> a(size_t(sh.M * sh.K));
                for (auto& v : a) v = uint8_t(d(gen) + (u8 ? 128 : 0));
                std::vector<int8_t> w(size_t(sh.N * sh.K));
                for (auto& v : w) v = int8_t(d(gen));
                std::vector<float> sc(static_cast<size_t>(sh.N));
                for (size_t i = 0; i < sc.size(); ++i) sc[i] = 1e-4f * float(i % 13 + 1);
                std::vector<float> y0(size_t(sh.M * sh.N), 0.5f), y1 = y0;
                const CMat A{a.data(), at, sh.M, sh.K}, W{w.data(), DType::I8, sh.N, sh.K};
                auto pr = ref->prepare_s8(W);
                auto pc = cpu->prepare_s8(W);
                const CVec S{sc.data(), DType::F32, sh.N};
                ref->gemm_s8_scaled(A, *pr, {y0.data(), DType::F32, sh.M, sh.N}, S, zero, beta);
                cpu->gemm_s8_scaled(A, *pc, {y1.data(), DType::F32, sh.M, sh.N}, S, zero, beta);
                // The second and third calls in a row run the weight's own primitive with these
                // scales fixed (brgemm where oneDNN has it): the same numbers. Other scales then
                // run their own, never the fixed one.
                for (int rep = 0; rep < 2; ++rep) {
                    std::vector<float> again(y1.size(), 0.5f);
                    cpu->gemm_s8_scaled(A, *pc, {again.data(), DType::F32, sh.M, sh.N}, S, zero,
                                        beta);
                    ASSERT_EQ(again, y1) << "call " << rep + 2;
                }
                std::vector<float> sc2(sc), y_other(y1.size(), 0.5f), y_ref(y1.size(), 0.5f);
                sc2[0] *= 2.0f;
                const CVec S2{sc2.data(), DType::F32, sh.N};
                cpu->gemm_s8_scaled(A, *pc, {y_other.data(), DType::F32, sh.M, sh.N}, S2, zero,
                                    beta);
                ref->gemm_s8_scaled(A, *pr, {y_ref.data(), DType::F32, sh.M, sh.N}, S2, zero, beta);
                const double y_old = beta != 0 ? 0.5 : 0.0;
                auto mag = [&](double y) { return std::fabs(y - y_old) + y_old; };
                const double two_sides = testing::reorder_worst(4);
                for (size_t i = 0; i < y_ref.size(); ++i)
                    ASSERT_NEAR(y_other[i], y_ref[i], two_sides * mag(y_ref[i])) << i;
                for (int64_t m = 0; m < sh.M; ++m)
                    for (int64_t n = 0; n < sh.N; ++n) {
                        double acc = 0;
                        for (int64_t k = 0; k < sh.K; ++k) {
                            const double x = u8 ? double(a[size_t(m * sh.K + k)])
                                                : double(int8_t(a[size_t(m * sh.K + k)]));
                            acc += (x - zero) * double(w[size_t(n * sh.K + k)]);
                        }
                        const double want = acc * double(sc[size_t(n)]) + y_old;
                        const size_t i = size_t(m * sh.N + n);
                        const double one_side = testing::gamma_worst(3) * mag(want);
                        ASSERT_NEAR(y0[i], want, one_side) << m << "," << n;
                        ASSERT_NEAR(y1[i], y0[i], two_sides * mag(y0[i])) << m << "," << n;
                    }
            }
}

TEST(Int8Ops, BadArgumentsAreNamed) {
    auto cpu = make_cpu_backend();
    std::vector<float> x(12), s(1, 1.0f), z(1, 0.0f);
    std::vector<int8_t> q(12);
    EXPECT_EQ(error_of([&] {
                  cpu->quantize_s8({q.data(), DType::I32, 3, 4}, {x.data(), DType::F32, 3, 4},
                                   {s.data(), DType::F32, 1}, {z.data(), DType::F32, 1},
                                   QuantGrid::of(8, QParamRule::Affine));
              }),
              "quantize_s8: q (3, 4) I32 for x (3, 4), expected I8 or U8 of x's shape");
    std::vector<int32_t> acc(12), wsum(4);
    std::vector<float> ws(3);
    EXPECT_EQ(error_of([&] {
                  cpu->dequantize_s32({x.data(), DType::F32, 3, 4}, {acc.data(), DType::I32, 3, 4},
                                      {s.data(), DType::F32, 1}, {z.data(), DType::F32, 1}, 128,
                                      {ws.data(), DType::F32, 3}, {wsum.data(), DType::I32, 4},
                                      0.0f);
              }),
              "dequantize_s32: w_scale (F32) and w_sum (I32) must have 4 (cols) entries, got 3 F32 "
              "and 4 I32");
}

}  // namespace int8_ops_test
}  // namespace ete::backend_test
