// tests/model/lora_rank_test.cpp — changing an adapter's rank: a shrink is the truncated SVD of
// scale·B·A (the output moves by no more than the discarded singular values allow), a grow does
// not change the output at all.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ete/model/lora_rank.h"
#include "ete/nn/linear.h"
#include "numerics.h"
#include "test_util.h"

namespace ete {
namespace {

// scale · B[:, :r] · A[:r, :] in double, (out, in).
std::vector<double> product(const std::vector<float>& a, const std::vector<float>& b, int64_t in,
                            int64_t out, int R, int r, double scale) {
    std::vector<double> m(size_t(out * in), 0.0);
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
            for (int k = 0; k < r; ++k)
                m[size_t(o * in + i)] +=
                    scale * double(b[size_t(o * R + k)]) * a[size_t(k * in + i)];
    return m;
}

double frob2(const std::vector<double>& m) {
    double s = 0;
    for (double v : m) s += v * v;
    return s;
}

TEST(LoraRank, ShrinkIsTheTruncatedSvd) {
    const int64_t in = 20, out = 15;
    const int R = 6, r = 5, r_new = 3;
    const float scale = 0.7f;
    std::mt19937 g(5);
    std::normal_distribution<float> nd;
    std::vector<float> a(size_t(R * in)), b(size_t(out * R));
    for (auto& v : a) v = nd(g);
    for (auto& v : b) v = nd(g);
    for (int64_t j = 0; j < in; ++j) a[size_t(5 * in + j)] = 0;  // row r (inactive) is zero
    const std::vector<double> m = product(a, b, in, out, R, r, scale);
    const std::vector<double> dropped =
        lora_shrink(a.data(), b.data(), in, out, R, r, r_new, scale);
    ASSERT_EQ(dropped.size(), 2u);
    EXPECT_GE(dropped[0], dropped[1]);
    const std::vector<double> m2 = product(a, b, in, out, R, R, scale);  // all of A and B
    std::vector<double> diff(m.size());
    for (size_t k = 0; k < m.size(); ++k) diff[k] = m[k] - m2[k];
    const double tail = dropped[0] * dropped[0] + dropped[1] * dropped[1];
    EXPECT_NEAR(frob2(diff), tail, 1e-5 * frob2(m));           // ‖ΔW‖_F² = Σ dropped σ²
    EXPECT_NEAR(frob2(m2) + tail, frob2(m), 1e-5 * frob2(m));  // what is kept is orthogonal
    for (int t = r_new; t < R; ++t) {
        for (int64_t j = 0; j < in; ++j) EXPECT_EQ(a[size_t(t * in + j)], 0.0f);
        for (int64_t o = 0; o < out; ++o) EXPECT_EQ(b[size_t(o * R + t)], 0.0f);
    }
    // A layer's output moves by at most σ_{r'+1}·|x| for any input.
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<double> x(static_cast<size_t>(in));
        double xn = 0;
        for (auto& v : x) {
            v = nd(g);
            xn += v * v;
        }
        double dn = 0;
        for (int64_t o = 0; o < out; ++o) {
            double d = 0;
            for (int64_t i = 0; i < in; ++i) d += diff[size_t(o * in + i)] * x[size_t(i)];
            dn += d * d;
        }
        EXPECT_LE(std::sqrt(dn), dropped[0] * std::sqrt(xn) * (1 + 1e-6));
    }
}

TEST(LoraRank, GrowLeavesTheLayerOutputUnchanged) {
    const int64_t N = 7, in = 24, out = 16;
    const int R = 8, r = 4;
    std::mt19937 g(6);
    std::normal_distribution<float> nd;
    std::vector<float> w(size_t(out * in)), a(size_t(R * in), 0.0f), b(size_t(out * R), 0.0f);
    std::vector<float> x(size_t(N * in)), y0(size_t(N * out)), y1(y0.size());
    for (auto& v : w) v = nd(g);
    for (auto& v : x) v = nd(g);
    for (int k = 0; k < r; ++k)
        for (int64_t j = 0; j < in; ++j) a[size_t(k * in + j)] = nd(g);
    for (int64_t o = 0; o < out; ++o)
        for (int k = 0; k < r; ++k) b[size_t(o * R + k)] = nd(g);
    std::vector<float> da(a.size()), db(b.size()), u(size_t(N * R)), du(u.size());
    auto be = make_cpu_backend();
    auto run = [&](int rank, std::vector<float>& y) {
        Linear lin({testing::host_cmat(w, out, in), {}, {}, {}, {}});
        lin.set_adapter({testing::host_cmat(a, R, in), testing::host_cmat(b, out, R),
                         testing::host_mat(da, R, in), testing::host_mat(db, out, R), 0.5f, rank});
        LoraActs acts;
        acts.u = testing::host_mat(u, N, R);
        acts.d_u = testing::host_mat(du, N, R);
        lin.forward(*be, testing::host_mat(y, N, out), testing::host_cmat(x, N, in), false, {},
                    &acts);
    };
    run(r, y0);
    const std::vector<float> a0 = a;  // the rows [r, R) are zero: the rank-r adapter
    lora_grow(a.data(), b.data(), in, out, R, r, R, [&](int64_t k) { return 0.1f * float(k % 7); });
    run(R, y1);
    // The new columns of B are exactly zero: the grown layer sums the same products plus exact
    // zeros, over K = R instead of r, which the GEMM may block (and so round) in another order.
    // Each output is `in` base terms plus R adapter terms over u = x·Aᵀ (`in` terms each): two
    // orders differ by at most reorder_worst(in + R + 2) of the terms' magnitudes (numerics.h).
    // New columns that were not zero would move an output by ~s·|b|·|u| ~ 1.
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < out; ++o) {
            double mag = 0;
            for (int64_t j = 0; j < in; ++j)
                mag += std::fabs(double(w[size_t(o * in + j)]) * double(x[size_t(n * in + j)]));
            for (int k = 0; k < R; ++k) {
                double u_mag = 0;
                for (int64_t j = 0; j < in; ++j)
                    u_mag += std::fabs(double(a0[size_t(k * in + j)]) * x[size_t(n * in + j)]);
                mag += 0.5 * std::fabs(double(b[size_t(o * R + k)])) * u_mag;
            }
            const size_t i = size_t(n * out + o);
            EXPECT_LE(std::fabs(double(y0[i]) - double(y1[i])),
                      testing::reorder_worst(double(in + R + 2)) * mag)
                << n << "," << o;
        }
    EXPECT_NE(y0, std::vector<float>(y0.size(), 0.0f));
    bool fresh = false;
    for (int64_t j = 0; j < in; ++j) fresh = fresh || a[size_t(r * in + j)] != 0.0f;
    EXPECT_TRUE(fresh);  // the new rows of A can carry a gradient into B
}

}  // namespace
}  // namespace ete
