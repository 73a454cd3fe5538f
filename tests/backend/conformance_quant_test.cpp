// tests/backend/conformance_quant_test.cpp — the conformance suite (conformance_test.cpp says
// what it checks and why) for the quantization ops: the integer model's products, quantization
// and dequantization, and quantization-aware training's observers, fake quantization and LSQ
// scale gradient. Same harness (device_buf.h), same backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_buf.h"
#include "ete/backend/backend.h"
#include "ete/core/fake_quant.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

class QuantOps : public Ops {};

// ---- the integer model ----

template <typename T>
Ints<T> random_ints(DType t, int64_t rows, int64_t cols, int64_t ld, int lo, int hi,
                    uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> d(lo, hi);
    Ints<T> r(t, rows, cols, ld, T(3));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) r.at(i, j) = T(d(gen));
    return r;
}

// An I8 or U8 activation and an I8 weight (N, K), strided, with the grids' extreme values at the
// start of every row (the largest products).
struct S8Operands {
    Ints<uint8_t> a;
    Ints<int8_t> w;
    S8Operands(DType at, int64_t M, int64_t N, int64_t K, uint32_t seed) {
        const bool u8 = at == DType::U8;
        a = random_ints<uint8_t>(at, M, K, K + 3, u8 ? 0 : -128, u8 ? 255 : 127, seed);
        w = random_ints<int8_t>(DType::I8, N, K, K + 5, -128, 127, seed + 1);
        for (int64_t m = 0; m < M; ++m) a.at(m, 0) = u8 ? 255 : uint8_t(-128);
        for (int64_t n = 0; n < N; ++n) w.at(n, 0) = -128;
    }
};

constexpr GemmDims kS8Dims[] = {{13, 21, 70}, {5, 3, 1}, {33, 67, 129}};

// Integer products are exact (backend.h), plain and with a prepared weight.
TEST_P(QuantOps, GemmS8IsExact) {
    uint32_t seed = 40;
    for (GemmDims d : kS8Dims)
        for (DType at : {DType::I8, DType::U8}) {
            SCOPED_TRACE(fmt::format("{}x{}x{} {}", d.M, d.N, d.K, dname(at)));
            const S8Operands o(at, d.M, d.N, d.K, seed += 2);
            const auto c0 = Ints<int32_t>::poisoned(DType::I32, d.M, d.N, d.N + 2);
            Ints<int32_t> want = c0;
            ref().gemm_s8(o.a.cmat(), o.w.cmat(), want.mat());
            DevBuf a = up(o.a), w = up(o.w), c = up(c0), c2 = up(c0);
            be().gemm_s8(a.cmat(), w.cmat(), c.mat());
            expect_exact(c.download_ints<int32_t>(), want, "gemm_s8");
            const auto prepared = be().prepare_s8(w.cmat());
            be().gemm_s8(a.cmat(), *prepared, c2.mat());
            expect_exact(c2.download_ints<int32_t>(), want, "gemm_s8 prepared");
        }
}

// y = scale[n] · (exact bracket) + beta · y: the bracket's conversion to fp32, the product and
// the addition are up to three fp32 roundings on each side (backend.h: "may differ from the
// reference's by fp32 rounding"): two evaluations within gamma_3 (|bracket · scale| + |beta · y|)
// of the exact value each.
TEST_P(QuantOps, GemmS8ScaledIsTheBracketScaledOnce) {
    uint32_t seed = 50;
    for (GemmDims d : kS8Dims)
        for (DType at : {DType::I8, DType::U8})
            for (float beta : {0.0f, 1.0f}) {
                SCOPED_TRACE(fmt::format("{}x{}x{} {} beta={}", d.M, d.N, d.K, dname(at), beta));
                const bool u8 = at == DType::U8;
                const int32_t zero = u8 ? 131 : -5;
                const S8Operands o(at, d.M, d.N, d.K, seed += 2);
                FVec sc(size_t(d.N));
                for (size_t i = 0; i < sc.size(); ++i) sc[i] = 1e-3f * float(i % 13 + 1);
                const Buf s = f32_row(sc);
                const Buf y0 = beta != 0 ? rnd(kF32, d.M, d.N, d.N + 2, seed)
                                         : poisoned(kF32, d.M, d.N, d.N + 2);
                Buf want = y0;
                ref().gemm_s8_scaled(o.a.cmat(), *ref().prepare_s8(o.w.cmat()), want.mat(),
                                     s.cvec(), zero, beta);
                DevBuf a = up(o.a), w = up(o.w), sd = up(s), y = up(y0);
                be().gemm_s8_scaled(a.cmat(), *be().prepare_s8(w.cmat()), y.mat(), sd.cvec(), zero,
                                    beta);
                DVec tol;
                for (int m = 0; m < d.M; ++m)
                    for (int n = 0; n < d.N; ++n) {
                        double bracket = 0;
                        for (int k = 0; k < d.K; ++k) {
                            const double x =
                                u8 ? double(o.a.at(m, k)) : double(int8_t(o.a.at(m, k)));
                            bracket += (x - zero) * double(o.w.at(n, k));
                        }
                        const double yv = beta != 0 ? std::fabs(y0.at(m, n)) : 0.0;
                        tol.push_back(testing::reorder_worst(3) *
                                      (std::fabs(bracket * sc[size_t(n)]) + yv));
                    }
                expect_within(y.download(), want, tol, "gemm_s8_scaled");
            }
}

// Rounding ties (k + 0.5 steps), the ends of the grid and beyond, zero and NaN among normal
// values of scale s (int8_ops_test.cpp).
FVec planted_values(int64_t n, float s, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 40.0f * s);
    FVec v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    const float planted[] = {0.5f * s,   -0.5f * s,   2.5f * s,   -3.5f * s,
                             127.0f * s, -128.0f * s, 127.5f * s, -128.5f * s,
                             300.0f * s, -300.0f * s, 0.0f,       NAN};
    for (size_t i = 0; i < std::size(planted); ++i) v[i * 7 % v.size()] = planted[i];
    return v;
}

// quantize_s8's integers are quantize_value's (core/fake_quant.h): exact.
TEST_P(QuantOps, QuantizeS8IsExact) {
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const int64_t R = 13, C = 45;
    for (DType xt : kFloats)
        for (bool per_row : {false, true})
            for (DType qt : {DType::I8, DType::U8}) {
                SCOPED_TRACE(fmt::format("{} per_row={} {}", dname(xt), per_row, dname(qt)));
                const Buf x = Buf::of(xt, planted_values(R * C, 0.05f, 60), R, C, C + 3);
                const QParams p(per_row ? R : 1, 0.05f, 9);
                const auto q0 = Ints<uint8_t>::poisoned(qt, R, C, C + 2);
                Ints<uint8_t> want = q0;
                ref().quantize_s8(want.mat(), x.cmat(), p.s.cvec(), p.z.cvec(), g);
                DevBuf xd = up(x), s = up(p.s), z = up(p.z), q = up(q0);
                be().quantize_s8(q.mat(), xd.cmat(), s.cvec(), z.cvec(), g);
                expect_exact(q.download_ints<uint8_t>(), want, "quantize_s8");
            }
}

// y = a_scale · w_scale · (exact bracket) + beta · y: the bracket's conversion, the scales'
// product, their product and the fused addition are up to four fp32 roundings on each side:
// two evaluations within gamma_4 (|value| + |beta · y|) each, plus a 16-bit y's own rounding.
TEST_P(QuantOps, DequantizeS32) {
    const int64_t M = 13, N = 21;
    const auto acc = random_ints<int32_t>(DType::I32, M, N, N + 2, -2000000, 2000000, 70);
    const auto wsum = random_ints<int32_t>(DType::I32, 1, N, N, -127 * 70, 127 * 70, 71);
    FVec ws(static_cast<size_t>(N));
    for (size_t i = 0; i < ws.size(); ++i) ws[i] = 1e-3f * float(i + 1);
    const Buf wsb = f32_row(ws);
    for (bool per_row : {false, true})
        for (int offset : {0, 128})
            for (float beta : {0.0f, 1.0f})
                for (DType yt : {kF32, kBF16}) {
                    SCOPED_TRACE(fmt::format("per_row={} offset={} beta={} {}", per_row, offset,
                                             beta, dname(yt)));
                    const QParams a(per_row ? M : 1, 0.01f, 7);
                    const Buf y0 = beta != 0 ? rnd(yt, M, N, N + 3, 72) : poisoned(yt, M, N, N + 3);
                    Buf want = y0;
                    ref().dequantize_s32(want.mat(), acc.cmat(), a.s.cvec(), a.z.cvec(), offset,
                                         wsb.cvec(), wsum.cvec(), beta);
                    DevBuf y = up(y0), accd = up(acc), as = up(a.s), az = up(a.z), wsd = up(wsb),
                           wsumd = up(wsum);
                    be().dequantize_s32(y.mat(), accd.cmat(), as.cvec(), az.cvec(), offset,
                                        wsd.cvec(), wsumd.cvec(), beta);
                    DVec tol;
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t n = 0; n < N; ++n) {
                            const int64_t k = per_row ? m : 0;
                            const double bracket = double(acc.at(m, n)) -
                                                   (a.z.at(0, k) + offset) * double(wsum.at(0, n));
                            const double v = bracket * a.s.at(0, k) * ws[size_t(n)];
                            const double yv = beta != 0 ? std::fabs(y0.at(m, n)) : 0.0;
                            tol.push_back(
                                testing::reorder_worst(4) * (std::fabs(v) + yv) +
                                (yt == kF32 ? 0.0 : eps_of(yt) * std::fabs(want.at(m, n))));
                        }
                    expect_within(y.download(), want, tol, "dequantize_s32");
                }
}

// ---- quantization-aware training: core/fake_quant.h's shared scalar code, exact ----

// x (13, cols) with non-finite values; row 1's first block has no finite element at all.
Buf qat_input(DType t, int64_t cols, int64_t group, uint32_t seed) {
    const int64_t rows = 13;
    FVec v = random_vec(size_t(rows * cols), seed, -3.0, 3.0);
    v[0] = NAN;
    v[3] = INFINITY;
    v[size_t(2 * cols + 1)] = -INFINITY;
    for (int64_t c = 0; c < group; ++c) v[size_t(cols + c)] = c % 2 ? NAN : INFINITY;
    return Buf::of(t, v, rows, cols, cols + 3);
}

// Groups of 12 and 5 put blocks across mask bytes; a whole row is one block.
constexpr std::pair<int64_t, int64_t> kGroups[] = {{36, 12}, {35, 5}, {37, 37}};

TEST_P(QuantOps, MinMaxAndQuantParams) {
    const QuantGrid grids[] = {QuantGrid::of(8, QParamRule::Symmetric),
                               QuantGrid::of(4, QParamRule::Affine),
                               QuantGrid::of(8, QParamRule::PerToken)};
    for (const auto& [cols, group] : kGroups)
        for (DType xt : {kF32, kBF16}) {
            SCOPED_TRACE(fmt::format("{} cols={} group={}", dname(xt), cols, group));
            const Buf x = qat_input(xt, cols, group, 200);
            const int64_t blocks = x.rows() * (cols / group);
            Buf lo = poisoned(kF32, 1, blocks), hi = lo;
            DevBuf xd = up(x), lod = up(lo), hid = up(hi);
            ref().min_max(lo.vec(), hi.vec(), x.cmat(), group);
            be().min_max(lod.vec(), hid.vec(), xd.cmat(), group);
            expect_exact(lod.download(), lo, "min_max lo");
            expect_exact(hid.download(), hi, "min_max hi");
            DevBuf lo_d = up(lo), hi_d = up(hi);  // the reference's ranges (an empty one too)
            for (const QuantGrid& g : grids) {
                Buf s = poisoned(kF32, 1, blocks), z = s;
                DevBuf sd = up(s), zd = up(z);
                ref().quant_params(s.vec(), z.vec(), lo.cvec(), hi.cvec(), g);
                be().quant_params(sd.vec(), zd.vec(), lo_d.cvec(), hi_d.cvec(), g);
                expect_exact(sd.download(), s, "quant_params scale");
                expect_exact(zd.download(), z, "quant_params zero");
            }
        }
}

// The straight-through bits of the logical elements (a row's unused bits are not specified).
void expect_same_mask(const Ints<uint8_t>& got, const Ints<uint8_t>& want, int64_t rows,
                      int64_t cols) {
    const int64_t rb = fake_quant_mask_row_bytes(cols);
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int i = int(r * rb + c / 8), b = int(c % 8);
            if (((got.at(0, i) >> b) & 1) != ((want.at(0, i) >> b) & 1) && bad++ < 3)
                ADD_FAILURE() << "fake_quant mask bit (" << r << ", " << c << ") differs";
        }
    EXPECT_EQ(bad, 0) << "fake_quant mask";
}

// fake_quant (with and without the mask, per block and per tensor, in place) and its backward
// (in place too).
TEST_P(QuantOps, FakeQuantAndBackward) {
    const QuantGrid g = QuantGrid::of(4, QParamRule::Affine);
    const DType pairs[][2] = {{kF32, kF32}, {kBF16, kBF16}, {kF32, kBF16}, {kF16, kF32}};
    for (const auto& [cols, group] : kGroups)
        for (const auto& pr : pairs) {
            const DType yt = pr[0], xt = pr[1];
            const Buf x = qat_input(xt, cols, group, 210);
            const int64_t rows = x.rows(), blocks = rows * (cols / group);
            Buf lo(kF32, 1, blocks), hi(kF32, 1, blocks), s(kF32, 1, blocks), z(kF32, 1, blocks);
            ref().min_max(lo.vec(), hi.vec(), x.cmat(), group);
            ref().quant_params(s.vec(), z.vec(), lo.cvec(), hi.cvec(), g);
            DevBuf xd = up(x);
            for (bool per_tensor : {false, true}) {
                SCOPED_TRACE(fmt::format("{} cols={} group={} per_tensor={}", pair_name(yt, xt),
                                         cols, group, per_tensor));
                const Buf ss = per_tensor ? f32_row({float(s.at(0, 3))}) : s;
                const Buf zz = per_tensor ? f32_row({float(z.at(0, 3))}) : z;
                DevBuf sd = up(ss), zd = up(zz);
                Buf y = poisoned(yt, rows, cols, cols + 2);
                auto mask =
                    Ints<uint8_t>::poisoned(DType::U8, 1, fake_quant_mask_bytes(rows, cols));
                DevBuf yd = up(y), md = up(mask);
                ref().fake_quant(y.mat(), x.cmat(), ss.cvec(), zz.cvec(), mask.vec(), group, g);
                be().fake_quant(yd.mat(), xd.cmat(), sd.cvec(), zd.cvec(), md.vec(), group, g);
                expect_exact(yd.download(), y, "fake_quant");
                expect_same_mask(md.download_ints<uint8_t>(), mask, rows, cols);

                const Buf dy = rnd(xt, rows, cols, cols + 4, 211);
                Buf dx = poisoned(yt, rows, cols, cols + 1);
                DevBuf dyd = up(dy), dxd = up(dx);
                ref().fake_quant_backward(dx.mat(), dy.cmat(), mask.cvec());
                be().fake_quant_backward(dxd.mat(), dyd.cmat(), md.cvec());
                expect_exact(dxd.download(), dx, "fake_quant_backward");
                if (yt != xt) continue;
                Buf in_place = x;  // y = x, no mask
                DevBuf ipd = up(x);
                ref().fake_quant(in_place.mat(), in_place.cmat(), ss.cvec(), zz.cvec(), {}, group,
                                 g);
                be().fake_quant(ipd.mat(), ipd.cmat(), sd.cvec(), zd.cvec(), {}, group, g);
                expect_exact(ipd.download(), in_place, "fake_quant in place");
                Buf dy_in_place = dy;  // d_x = d_y
                DevBuf dyi = up(dy);
                ref().fake_quant_backward(dy_in_place.mat(), dy_in_place.cmat(), mask.cvec());
                be().fake_quant_backward(dyi.mat(), dyi.cmat(), md.cvec());
                expect_exact(dyi.download(), dy_in_place, "fake_quant_backward in place");
            }
        }
}

// LSQ's scale gradient: the same sums in double on every backend (backend.h): exact.
// fake_quant_own_range: the three ops in one call, bit for bit (scales and output).
TEST_P(QuantOps, FakeQuantOwnRange) {
    const DType pairs[][2] = {{kF32, kF32}, {kBF16, kBF16}, {kBF16, kF32}, {kF16, kF32}};
    for (const int bits : {8, 4})
        for (const auto& [cols, group] : kGroups)
            for (const auto& pr : pairs) {
                const DType yt = pr[0], xt = pr[1];
                SCOPED_TRACE(fmt::format("{} bits {} cols={} group={}", bits, pair_name(yt, xt),
                                         cols, group));
                const QuantGrid g = QuantGrid::of(bits, QParamRule::Symmetric);
                const Buf x = qat_input(xt, cols, group, 220);
                const int64_t rows = x.rows(), blocks = rows * (cols / group);
                Buf s = poisoned(kF32, 1, blocks), y = poisoned(yt, rows, cols, cols + 2);
                DevBuf xd = up(x), sd = up(s), yd = up(y);
                ref().fake_quant_own_range(y.mat(), x.cmat(), s.vec(), group, g);
                be().fake_quant_own_range(yd.mat(), xd.cmat(), sd.vec(), group, g);
                expect_exact(sd.download(), s, "fake_quant_own_range scale");
                expect_exact(yd.download(), y, "fake_quant_own_range");
            }
}

TEST_P(QuantOps, FakeQuantScaleGrad) {
    const QuantGrid g = QuantGrid::of(4, QParamRule::Symmetric);
    for (const auto& [cols, group] : kGroups)
        for (DType xt : {kF32, kBF16}) {
            const int64_t rows = 13, blocks = rows * (cols / group);
            // Scales small enough that some elements clamp (|x| up to 2, grid ±7 steps).
            const Buf x = rnd(xt, rows, cols, cols + 1, 220, -2.0, 2.0);
            const Buf dy = rnd(xt, rows, cols, cols + 5, 221);
            const Buf s = f32_row(random_vec(size_t(blocks), 222, 0.1, 0.4));
            const Buf z = f32_row(FVec(size_t(blocks), 0.0f));
            for (bool per_tensor : {false, true}) {
                SCOPED_TRACE(fmt::format("{} cols={} group={} per_tensor={}", dname(xt), cols,
                                         group, per_tensor));
                const Buf ss = per_tensor ? f32_row({0.2f}) : s,
                          zz = per_tensor ? f32_row({0.0f}) : z;
                Buf ds = poisoned(kF32, 1, blocks);
                DevBuf xd = up(x), dyd = up(dy), sd = up(ss), zd = up(zz), dsd = up(ds);
                ref().fake_quant_scale_grad(ds.vec(), x.cmat(), dy.cmat(), ss.cvec(), zz.cvec(),
                                            group, g);
                be().fake_quant_scale_grad(dsd.vec(), xd.cmat(), dyd.cmat(), sd.cvec(), zd.cvec(),
                                           group, g);
                expect_exact(dsd.download(), ds, "fake_quant_scale_grad");
            }
        }
}

INSTANTIATE_TEST_SUITE_P(Conformance, QuantOps, ::testing::Values("cpu", "guarded", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ete::backend_test
