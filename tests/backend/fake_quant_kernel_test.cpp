// tests/backend/fake_quant_kernel_test.cpp — the QAT ops (min_max, quant_params, fake_quant,
// fake_quant_backward): the CPU backend against the reference bit for bit over dtype pairs,
// strided views, groups that do not fill whole mask bytes and in-place calls; each element
// against the definition of core/fake_quant.h; non-finite inputs (never a NaN scale, a NaN stays
// a NaN with a zero mask bit); the straight-through mask against finite differences of the
// unrounded surrogate (clamp(x/s + z) - z) · s away from its kinks; LSQ's scale gradient; bad
// arguments.
#include <gtest/gtest.h>

#include <limits>

#include "kernel_bounds.h"

namespace ete::backend_test {
namespace fake_quant_kernel_test {

struct Pair {
    DType y, x;
};

std::vector<uint8_t> mask_of(Backend& be, Mat y, CMat x, const FVec& s, const FVec& z,
                             int64_t group, const QuantGrid& g) {
    std::vector<uint8_t> m(size_t(fake_quant_mask_bytes(x.rows, x.cols)), 0xAB);
    be.fake_quant(y, x, host_cvec(s), host_cvec(z), {m.data(), DType::U8, int64_t(m.size())}, group,
                  g);
    return m;
}

bool bit(const std::vector<uint8_t>& m, int64_t cols, int64_t r, int64_t c) {
    return (m[size_t(r * fake_quant_mask_row_bytes(cols) + c / 8)] >> (c % 8)) & 1;
}

class FakeQuantKernel : public ::testing::TestWithParam<Pair> {};

TEST_P(FakeQuantKernel, CpuMatchesReferenceAndTheDefinition) {
    const Pair t = GetParam();
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const int64_t rows = 19;
    // Groups of 12 and 5 put blocks across mask bytes; 8 and the whole row do not.
    for (const auto& [cols, group] :
         {std::pair<int64_t, int64_t>{36, 12}, {35, 5}, {64, 8}, {301, 301}}) {
        SCOPED_TRACE(std::to_string(cols) + "/" + std::to_string(group));
        const FVec xv = random_vec(size_t(rows * cols), 7, -3.0, 3.0);
        const Buf x = Buf::of(t.x, xv, rows, cols, cols + 3);
        // Block ranges, then per-block parameters on the 4-bit affine grid.
        const int64_t blocks = rows * (cols / group);
        const size_t nb = size_t(blocks);
        FVec lo_r(nb), hi_r(nb), lo_c(nb), hi_c(nb);
        ref->min_max(host_vec(lo_r), host_vec(hi_r), x.cmat(), group);
        cpu->min_max(host_vec(lo_c), host_vec(hi_c), x.cmat(), group);
        ASSERT_EQ(lo_r, lo_c);
        ASSERT_EQ(hi_r, hi_c);
        const QuantGrid g = QuantGrid::of(4, QParamRule::Affine);
        FVec s(nb), z(nb), s2 = s, z2 = z;
        ref->quant_params(host_vec(s), host_vec(z), host_cvec(lo_r), host_cvec(hi_r), g);
        cpu->quant_params(host_vec(s2), host_vec(z2), host_cvec(lo_r), host_cvec(hi_r), g);
        ASSERT_EQ(s, s2);
        ASSERT_EQ(z, z2);
        for (int64_t b = 0; b < blocks; ++b) {
            float ws, wz;
            quant_params(lo_r[size_t(b)], hi_r[size_t(b)], g, &ws, &wz);
            ASSERT_EQ(s[size_t(b)], ws) << b;
        }
        // Per block, and per tensor (one scale), strided.
        for (const bool per_tensor : {false, true}) {
            const FVec ss = per_tensor ? FVec{s[3]} : s, zz = per_tensor ? FVec{z[3]} : z;
            Buf yr(t.y, rows, cols, cols + 2), yc = yr;
            const auto mr = mask_of(*ref, yr.mat(), x.cmat(), ss, zz, group, g);
            const auto mc = mask_of(*cpu, yc.mat(), x.cmat(), ss, zz, group, g);
            ASSERT_TRUE(yr.same_bytes(yc)) << "per tensor " << per_tensor;
            ASSERT_EQ(mr, mc) << "the mask bytes, each row's padding bits (0) included";
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    ASSERT_EQ(bit(mr, cols, r, c), bit(mc, cols, r, c)) << r << "," << c;
                    const size_t k = per_tensor ? 0 : size_t(r * (cols / group) + c / group);
                    bool in;
                    const float v = fake_quant_value(float(x.at(r, c)), ss[k], 1.0f / ss[k], zz[k],
                                                     float(g.qmin), float(g.qmax), &in);
                    Buf want(t.y, 1, 1);
                    want.set(0, 0, v);
                    ASSERT_EQ(yc.at(r, c), want.at(0, 0)) << r << "," << c;
                    ASSERT_EQ(bit(mc, cols, r, c), in) << r << "," << c;
                }
            // Backward: d_x = d_y where the bit is set, in place as well.
            const FVec gv = random_vec(size_t(rows * cols), 9);
            Buf dy = Buf::of(t.x, gv, rows, cols), dxr(t.y, rows, cols), dxc(t.y, rows, cols);
            const CVec mv{mc.data(), DType::U8, int64_t(mc.size())};
            ref->fake_quant_backward(dxr.mat(), dy.cmat(), mv);
            cpu->fake_quant_backward(dxc.mat(), dy.cmat(), mv);
            ASSERT_TRUE(dxr.same_bytes(dxc));
            Buf inplace = Buf::of(t.y, dy.floats(), rows, cols);
            cpu->fake_quant_backward(inplace.mat(), inplace.cmat(), mv);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    Buf want(t.y, 1, 1);
                    want.set(0, 0, bit(mc, cols, r, c) ? dy.at(r, c) : 0.0);
                    ASSERT_EQ(dxc.at(r, c), want.at(0, 0));
                    ASSERT_EQ(inplace.at(r, c), want.at(0, 0));
                }
        }
        // In place: y = fq(x) over x itself gives what the out-of-place call gave.
        Buf in_place = x, out(t.x, rows, cols, cols + 3);
        mask_of(*cpu, out.mat(), x.cmat(), s, z, group, g);
        mask_of(*cpu, in_place.mat(), in_place.cmat(), s, z, group, g);
        ASSERT_EQ(in_place.values(), out.values());
    }
}

// fake_quant_own_range (one pass per block on the CPU) gives what min_max, quant_params and
// fake_quant give one after the other, bit for bit, scales included: on the CPU, and on the
// reference (the Backend default, which runs the three); strided, in place, with non-finite
// values and a block with none finite.
TEST_P(FakeQuantKernel, OwnRangeIsTheThreeOpsInOnePass) {
    const Pair t = GetParam();
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const int64_t rows = 7;
    for (const int bits : {8, 4}) {
        const QuantGrid g = QuantGrid::of(bits, QParamRule::Symmetric);
        for (const auto& [cols, group] : {std::pair<int64_t, int64_t>{36, 12},
                                          {35, 5},
                                          {64, 8},
                                          {301, 301},
                                          {1408, 1408},
                                          {1024, 256}}) {
            SCOPED_TRACE(std::to_string(bits) + " bits " + std::to_string(cols) + "/" +
                         std::to_string(group));
            FVec xv = random_vec(size_t(rows * cols), 17, -2.0, 2.0);
            xv[3] = std::numeric_limits<float>::infinity();
            xv[size_t(cols) + 1] = std::numeric_limits<float>::quiet_NaN();
            for (int64_t c = 0; c < group; ++c)  // row 2's first block: nothing finite
                xv[size_t(2 * cols + c)] = -std::numeric_limits<float>::infinity();
            const Buf x = Buf::of(t.x, xv, rows, cols, cols + 3);
            const int64_t blocks = rows * (cols / group);
            FVec lo(static_cast<size_t>(blocks)), hi(lo), s_want(lo), z(lo), s_cpu(lo), s_ref(lo);
            Buf want(t.y, rows, cols, cols + 1), y_cpu = want, y_ref = want;
            cpu->min_max(host_vec(lo), host_vec(hi), x.cmat(), group);
            cpu->quant_params(host_vec(s_want), host_vec(z), host_cvec(lo), host_cvec(hi), g);
            cpu->fake_quant(want.mat(), x.cmat(), host_cvec(s_want), host_cvec(z), {}, group, g);
            cpu->fake_quant_own_range(y_cpu.mat(), x.cmat(), host_vec(s_cpu), group, g);
            ref->fake_quant_own_range(y_ref.mat(), x.cmat(), host_vec(s_ref), group, g);
            EXPECT_EQ(s_cpu, s_want);
            EXPECT_EQ(s_ref, s_want);
            EXPECT_TRUE(y_cpu.same_bytes(want));
            EXPECT_TRUE(y_ref.same_bytes(want));
            if (t.y != t.x) continue;
            Buf in_place = x, out = x;  // one layout, one padding
            cpu->fake_quant_own_range(out.mat(), x.cmat(), host_vec(s_cpu), group, g);
            cpu->fake_quant_own_range(in_place.mat(), in_place.cmat(), host_vec(s_cpu), group, g);
            EXPECT_TRUE(in_place.same_bytes(out));
        }
    }
    FVec x(12), y(12), s(2);
    EXPECT_EQ(error_of([&] {
                  cpu->fake_quant_own_range(host_mat(y, 2, 6), host_cmat(x, 2, 6), host_vec(s), 6,
                                            QuantGrid::of(8, QParamRule::Affine));
              }),
              "fake_quant_own_range: expected a symmetric grid (its scales clamp no value)");
    EXPECT_EQ(error_of([&] {
                  cpu->fake_quant_own_range(host_mat(y, 2, 6), host_cmat(x, 2, 6),
                                            host_vec(s).slice(0, 1), 6,
                                            QuantGrid::of(8, QParamRule::Symmetric));
              }),
              "fake_quant_own_range: scale must be F32 of 2 blocks, got 1");
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, FakeQuantKernel,
    ::testing::Values(Pair{DType::F32, DType::F32}, Pair{DType::BF16, DType::BF16},
                      Pair{DType::F32, DType::BF16}, Pair{DType::F16, DType::F32}),
    [](const auto& info) { return std::string(dname(info.param.y)) + "_" + dname(info.param.x); });

TEST(FakeQuantKernel, NonFiniteInputsNeverMakeANaNScaleAndNaNStaysNaN) {
    const float nan = std::numeric_limits<float>::quiet_NaN(),
                inf = std::numeric_limits<float>::infinity();
    for (const char* name : {"ref", "cpu"}) {
        SCOPED_TRACE(name);
        auto be = make_backend(name);
        // Row 0 mixes finite and non-finite values; row 1 has none finite.
        FVec x = {nan, -2.0f, inf, 1.0f, -inf, 0.5f, nan, inf, -inf, nan, nan, nan};
        FVec lo(2), hi(2), s(2), z(2);
        be->min_max(host_vec(lo), host_vec(hi), host_cmat(x, 2, 6), 6);
        EXPECT_EQ(lo[0], -2.0f);
        EXPECT_EQ(hi[0], 1.0f);
        EXPECT_EQ(lo[1], inf);  // an empty block
        EXPECT_EQ(hi[1], -inf);
        const QuantGrid g = QuantGrid::of(8, QParamRule::Symmetric);
        be->quant_params(host_vec(s), host_vec(z), host_cvec(lo), host_cvec(hi), g);
        EXPECT_EQ(s[0], 2.0f / 127.0f);
        EXPECT_EQ(s[1], kMinScale);  // as a zero range
        FVec y(12);
        const auto m = mask_of(*be, host_mat(y, 2, 6), host_cmat(x, 2, 6), s, z, 6, g);
        EXPECT_TRUE(std::isnan(y[0]));
        EXPECT_FALSE(bit(m, 6, 0, 0));
        EXPECT_EQ(y[2], 127 * s[0]);  // +inf clamps to the top of the grid, outside the STE
        EXPECT_FALSE(bit(m, 6, 0, 2));
        EXPECT_EQ(y[4], -127 * s[0]);
        EXPECT_TRUE(bit(m, 6, 0, 1));
        EXPECT_EQ(y[1], -2.0f);
    }
}

// The STE passes the gradient of the unrounded surrogate f(x) = (clamp(x·inv_s + z, qmin, qmax)
// − z) · s: 1 inside the grid, 0 outside. Central differences of f, away from its two kinks,
// give exactly the mask (0 or 1 within rounding: f's four double operations on terms up to
// (|q| + |z|) s, and x ± h's own rounding, over 2h).
TEST(FakeQuantKernel, TheMaskIsTheSurrogatesDerivative) {
    auto be = make_cpu_backend();
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const float s = 0.05f, z = 3.0f;
    const FVec x = random_vec(4000, 11, -9.0, 9.0);  // the grid spans [-6.55, 6.2]
    FVec y(x.size());
    const auto m = mask_of(*be, host_mat(y, 1, int64_t(x.size())),
                           host_cmat(x, 1, int64_t(x.size())), {s}, {z}, int64_t(x.size()), g);
    auto f = [&](double v) {
        return (std::clamp(v / s + z, double(g.qmin), double(g.qmax)) - z) * s;
    };
    int inside = 0, outside = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double q = x[i] / s + z, h = 1e-4;
        if (std::fabs(q - g.qmin) < 0.6 || std::fabs(q - g.qmax) < 0.6) continue;  // the kinks
        const double d = (f(x[i] + h) - f(x[i] - h)) / (2 * h);
        const double tol =
            (2 * testing::gamma_worst(4, kUnitF64) * (std::fabs(q) + std::fabs(z)) * s +
             2 * kUnitF64 * std::fabs(x[i])) /
            (2 * h);
        ASSERT_NEAR(d, bit(m, int64_t(x.size()), 0, int64_t(i)) ? 1.0 : 0.0, tol) << x[i];
        (d > 0.5 ? inside : outside)++;
    }
    EXPECT_GT(inside, 1000);  // coverage, not rounding: both sides of the grid were sampled
    EXPECT_GT(outside, 500);
}

// LSQ's scale gradient: the CPU backend's block sums equal the reference's bit for bit (strided,
// bf16 operands, per block and per tensor), and each equals Σ d_y · slope with the slope of the
// definition: round(x/s) − x/s inside the grid, the clamped end outside (the kernel's slope is
// that difference rounded to fp32, u |slope|, summed in double and rounded once, u |sum|). Where
// every element is clamped the slope is the true derivative of y = (q − z)·s in s: central
// differences agree.
TEST(FakeQuantKernel, LsqScaleGradientMatchesReferenceAndDefinition) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const int64_t rows = 13;
    for (const DType dt : {DType::F32, DType::BF16})
        for (const auto& [cols, group] : {std::pair<int64_t, int64_t>{36, 12}, {257, 257}}) {
            SCOPED_TRACE(std::string(dname(dt)) + " " + std::to_string(cols));
            const Buf x =
                Buf::of(dt, random_vec(size_t(rows * cols), 3, -2.0, 2.0), rows, cols, cols + 1);
            const Buf dy =
                Buf::of(DType::F32, random_vec(size_t(rows * cols), 4), rows, cols, cols + 5);
            const int64_t blocks = rows * (cols / group);
            const QuantGrid g = QuantGrid::of(4, QParamRule::Symmetric);
            // Scales small enough that some elements clamp (|x| up to 2, grid ±7 steps).
            FVec s = random_vec(size_t(blocks), 5, 0.1, 0.4), z(size_t(blocks), 0.0f);
            for (const bool per_tensor : {false, true}) {
                const FVec ss = per_tensor ? FVec{0.2f} : s, zz = per_tensor ? FVec{0.0f} : z;
                FVec gr(static_cast<size_t>(blocks)), gc(static_cast<size_t>(blocks));
                ref->fake_quant_scale_grad(host_vec(gr), x.cmat(), dy.cmat(), host_cvec(ss),
                                           host_cvec(zz), group, g);
                cpu->fake_quant_scale_grad(host_vec(gc), x.cmat(), dy.cmat(), host_cvec(ss),
                                           host_cvec(zz), group, g);
                ASSERT_EQ(gr, gc) << "per tensor " << per_tensor;
                int clamped = 0;
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t b = 0; b < cols / group; ++b) {
                        const float sc = ss[per_tensor ? 0 : size_t(r * (cols / group) + b)];
                        double want = 0, mag = 0;
                        for (int64_t c = b * group; c < (b + 1) * group; ++c) {
                            // In fp32 with inv_s, as the definition (core/fake_quant.h).
                            const float xv = float(x.at(r, c)), inv = 1.0f / sc;
                            const float q = std::nearbyint(xv * inv);
                            const double slope = q > g.qmax   ? g.qmax
                                                 : q < g.qmin ? g.qmin
                                                              : q - xv * inv;
                            clamped += q > g.qmax || q < g.qmin;
                            want += dy.at(r, c) * slope;
                            mag += std::fabs(dy.at(r, c) * slope);
                        }
                        const double tol = (testing::gamma_worst(2) +
                                            testing::gamma_worst(double(group), kUnitF64)) *
                                           mag;
                        ASSERT_NEAR(gc[size_t(r * (cols / group) + b)], want, tol) << r << "," << b;
                    }
                EXPECT_GT(clamped, 20);  // coverage: clamped slopes were summed too
            }
        }
    // All clamped: y = ±qmax·s or qmin·s, whose derivative in s is the end itself.
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const FVec x = {9.0f, -9.0f, 7.5f, -8.25f}, dy = {1.0f, 2.0f, -0.5f, 3.0f};
    const float s = 0.01f, z = 5.0f, h = 1e-5f;
    FVec d(1);
    cpu->fake_quant_scale_grad(host_vec(d), host_cmat(x, 1, 4), host_cmat(dy, 1, 4),
                               host_cvec(FVec{s}), host_cvec(FVec{z}), 4, g);
    auto loss = [&](float sc) {
        FVec y(4);
        cpu->fake_quant(host_mat(y, 1, 4), host_cmat(x, 1, 4), host_cvec(FVec{sc}),
                        host_cvec(FVec{z}), {}, 4, g);
        double l = 0;
        for (size_t i = 0; i < 4; ++i) l += double(dy[i]) * y[i];
        return l;
    };
    const double fd = (loss(s + h) - loss(s - h)) / (2.0 * h);
    // The loss is linear in the scale; in fp32, s ± h rounds (u (s + h) each, moving the step by
    // as much) and each y = (q − z)·sc rounds (u |y|), both over the step 2h.
    double terms = 0;  // Σ |d_y (q − z)|, every q at an end of the grid: |q − z| <= 133
    for (size_t i = 0; i < 4; ++i) terms += std::fabs(dy[i]) * 133;
    EXPECT_NEAR(d[0], fd, (std::fabs(fd) + terms) * 2 * kUnitF32 * (s + h) / (2 * h));
    EXPECT_EQ(d[0], (127 - 5) * 1.0f + (-128 - 5) * 2.0f + (127 - 5) * -0.5f + (-128 - 5) * 3.0f);
}

TEST(FakeQuantKernel, BadArgumentsAreNamed) {
    auto be = make_cpu_backend();
    FVec x(12), y(12), s(3), z(3);
    const QuantGrid g = QuantGrid::of(8, QParamRule::Symmetric);
    EXPECT_EQ(error_of([&] {
                  be->fake_quant(host_mat(y, 2, 6), host_cmat(x, 2, 6), host_cvec(s), host_cvec(z),
                                 {}, 4, g);
              }),
              "fake_quant: group 4 does not divide the 6 columns (expected a divisor)");
    EXPECT_EQ(error_of([&] {
                  be->fake_quant(host_mat(y, 2, 6), host_cmat(x, 2, 6), host_cvec(s), host_cvec(z),
                                 {}, 3, g);
              }),
              "fake_quant: scale and zero must be F32 of 1 or 4 blocks, got 3 and 3");
    EXPECT_EQ(error_of([&] { be->min_max(host_vec(s), host_vec(z), host_cmat(x, 2, 6), 6); }),
              "min_max: lo, hi must be F32 of 2 blocks, got 3 and 3");
    EXPECT_EQ(error_of([&] {
                  be->fake_quant_scale_grad(host_vec(s), host_cmat(x, 2, 6), host_cmat(y, 2, 6),
                                            host_cvec(s), host_cvec(z), 6, g);
              }),
              "fake_quant: scale and zero must be F32 of 1 or 2 blocks, got 3 and 3");
    EXPECT_EQ(error_of([&] {
                  be->fake_quant_scale_grad(host_vec(s), host_cmat(x, 2, 6), host_cmat(y, 2, 6),
                                            host_cvec(FVec{1.0f}), host_cvec(FVec{0.0f}), 6, g);
              }),
              "fake_quant_scale_grad: d_scale must be F32 of 2 blocks, got 3");
}

}  // namespace fake_quant_kernel_test
}  // namespace ete::backend_test
