// tests/backend/attention_test.cpp — optimized CPU RoPE and flash attention vs the scalar
// reference, and the reference's own gradients vs finite differences in double.
//
// Tolerances. The reference accumulates in double; the CPU kernels accumulate in f32 (sums of up
// to D products for a score and up to T terms for an output, exp2 by a polynomial with ~2e-7
// relative error), so each output carries a few f32 rounding steps times sqrt(terms). Errors are
// normalised by the largest reference magnitude of the tensor (entries near zero come from
// cancellation and have no relative accuracy of their own).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"
#include "ete/core/error.h"

namespace ete {
namespace {

// f32 attention vs the double-accumulating oracle: a few roundings of sums over up to 256 keys and
// 128 dims, normalised by the tensor's largest value (worst measured over these shapes: 3.4e-6).
constexpr double kAttnTol = 1e-5;
// RoPE is one rotation per element (two products and a sum): a couple of f32 ulps.
constexpr double kRopeTol = 1e-6;

template <typename T = float>
std::vector<T> random_vec(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    std::vector<T> v(n);
    for (auto& x : v) x = T(dist(gen));
    return v;
}

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

// The q, k or v columns of every row of a (N, (H + 2KV) * D) tensor, as one vector.
enum class Part { kQ, kK, kV };
std::vector<float> part_of(const std::vector<float>& qkv, AttnDims d, Part p) {
    int lo = p == Part::kQ ? 0 : p == Part::kK ? d.H * d.D : (d.H + d.KV) * d.D;
    int hi = p == Part::kQ ? d.H * d.D : p == Part::kK ? (d.H + d.KV) * d.D : d.qkv_stride();
    std::vector<float> r;
    for (size_t n = 0; n < size_t(d.B) * d.T; ++n)
        for (int c = lo; c < hi; ++c) r.push_back(qkv[n * d.qkv_stride() + c]);
    return r;
}

struct AttnCase {
    AttnDims d;
    float scale;
    std::vector<float> qkv, d_out;
    size_t qkv_size() const { return size_t(d.B) * d.T * d.qkv_stride(); }
    size_t out_size() const { return size_t(d.B) * d.T * d.H * d.D; }
};

AttnCase make_case(AttnDims d, uint32_t seed, float scale = 0) {
    AttnCase c{d, scale > 0 ? scale : float(1.0 / std::sqrt(double(d.D))), {}, {}};
    c.qkv = random_vec(c.qkv_size(), seed);
    c.d_out = random_vec(c.out_size(), seed + 1);
    return c;
}

std::string describe(AttnDims d) {
    return fmt::format("B={} T={} H={} KV={} D={}", d.B, d.T, d.H, d.KV, d.D);
}

// Runs the CPU forward and backward and compares out, lse and each part of d_qkv with ref.
// d_qkv starts as NaN so an element the backward forgets to write fails the comparison.
void expect_cpu_matches_ref(const AttnCase& c) {
    SCOPED_TRACE(describe(c.d) + fmt::format(" scale={}", c.scale));
    std::vector<float> out(c.out_size()), lse(size_t(c.d.B) * c.d.H * c.d.T);
    std::vector<float> out_ref(out.size()), lse_ref(lse.size());
    cpu::attention_forward(out.data(), lse.data(), c.qkv.data(), c.d, c.scale);
    ref::attention_forward(out_ref.data(), lse_ref.data(), c.qkv.data(), c.d, c.scale);
    EXPECT_LE(norm_err(out, out_ref), kAttnTol);
    EXPECT_LE(norm_err(lse, lse_ref), kAttnTol);

    std::vector<float> d_qkv(c.qkv_size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> d_qkv_ref(c.qkv_size());
    cpu::attention_backward(d_qkv.data(), c.d_out.data(), out_ref.data(), lse_ref.data(),
                            c.qkv.data(), c.d, c.scale);
    ref::attention_backward(d_qkv_ref.data(), c.d_out.data(), out_ref.data(), lse_ref.data(),
                            c.qkv.data(), c.d, c.scale);
    for (Part p : {Part::kQ, Part::kK, Part::kV}) {
        SCOPED_TRACE(p == Part::kQ ? "d_q" : p == Part::kK ? "d_k" : "d_v");
        EXPECT_LE(norm_err(part_of(d_qkv, c.d, p), part_of(d_qkv_ref, c.d, p)), kAttnTol);
    }
}

TEST(AttentionCpu, MatchesRefOverAwkwardShapes) {
    const int heads[3][2] = {{4, 4}, {4, 2}, {8, 2}};
    uint32_t seed = 1;
    for (int B : {1, 2})
        for (int T : {1, 7, 31, 32, 33, 65, 130})
            for (int D : {16, 24, 64})
                for (auto& hk : heads)
                    expect_cpu_matches_ref(make_case({B, T, hk[0], hk[1], D}, seed++));
}

// Head dims that take the other register-block widths of the matrix kernel: D = 40 pads to 48
// (three vectors), D = 128 spans two 64-column blocks; with T crossing the key and query tiles.
TEST(AttentionCpu, MatchesRefForOtherHeadDims) {
    expect_cpu_matches_ref(make_case({1, 70, 4, 2, 40}, 201));
    expect_cpu_matches_ref(make_case({1, 135, 2, 1, 128}, 202));
}

// Large scores (scale 1 with D = 64 gives |s| up to ~20) make the running max move between key
// tiles, so the online-softmax rescaling of earlier partial outputs is exercised.
TEST(AttentionCpu, MatchesRefWithSharpScores) {
    expect_cpu_matches_ref(make_case({2, 130, 4, 2, 64}, 77, 1.0f));
    // Scores that grow with the key position: nearly every new key tile holds a new row maximum.
    // (Random parts stay in q and k so that d_q does not cancel to a tiny ill-conditioned sum.)
    AttnCase c = make_case({1, 100, 2, 1, 16}, 78, 0.25f);
    for (int t = 0; t < c.d.T; ++t) {
        float* row = c.qkv.data() + size_t(t) * c.d.qkv_stride();
        for (int e = 0; e < c.d.D; ++e) {
            row[2 * 16 + e] += 0.05f * t;  // key head 0 grows with t
            for (int h = 0; h < 2; ++h) row[h * 16 + e] = 1.0f + 0.5f * row[h * 16 + e];
        }
    }
    expect_cpu_matches_ref(c);
}

// The benchmark model's shape (B=8, T=256, H=8, KV=4, D=64) at full size.
TEST(AttentionCpu, MatchesRefAtBenchShape) {
    expect_cpu_matches_ref(make_case({8, 256, 8, 4, 64}, 99, 0.125f));
}

// Every output element is owned by one work item in a fixed order, so the thread count cannot
// change a single bit (a race on dK/dV would most likely show up here as a difference).
TEST(AttentionCpu, ResultsIndependentOfThreadCount) {
    AttnCase c = make_case({2, 97, 8, 2, 24}, 5);
    auto run = [&](int threads) {
        omp_set_num_threads(threads);
        std::vector<float> out(c.out_size()), lse(size_t(c.d.B) * c.d.H * c.d.T);
        std::vector<float> d_qkv(c.qkv_size());
        cpu::attention_forward(out.data(), lse.data(), c.qkv.data(), c.d, c.scale);
        cpu::attention_backward(d_qkv.data(), c.d_out.data(), out.data(), lse.data(), c.qkv.data(),
                                c.d, c.scale);
        out.insert(out.end(), lse.begin(), lse.end());
        out.insert(out.end(), d_qkv.begin(), d_qkv.end());
        return out;
    };
    int saved = omp_get_max_threads();
    std::vector<float> one = run(1), three = run(3), again = run(3);
    omp_set_num_threads(saved);
    EXPECT_EQ(one, three);
    EXPECT_EQ(three, again);
}

// Causality: changing the last position's key and value leaves every earlier output bit-exact,
// and position 0 attends only to itself, so its output is exactly its value vector.
TEST(AttentionCpu, FutureKeysDoNotLeakIntoEarlierOutputs) {
    AttnDims d{1, 45, 4, 2, 16};
    AttnCase c = make_case(d, 11);
    std::vector<float> out(c.out_size()), lse(size_t(d.H) * d.T), out2(out.size()),
        lse2(lse.size());
    cpu::attention_forward(out.data(), lse.data(), c.qkv.data(), d, c.scale);
    float* last = c.qkv.data() + size_t(d.T - 1) * d.qkv_stride();
    for (int e = d.H * d.D; e < d.qkv_stride(); ++e) last[e] += 0.5f;
    cpu::attention_forward(out2.data(), lse2.data(), c.qkv.data(), d, c.scale);
    const size_t row = size_t(d.H) * d.D;
    EXPECT_TRUE(std::equal(out.begin(), out.end() - row, out2.begin()));
    EXPECT_NE(out[out.size() - 1], out2[out.size() - 1]);
    for (int h = 0; h < d.H; ++h)
        for (int e = 0; e < d.D; ++e)
            EXPECT_EQ(out[size_t(h) * d.D + e], c.qkv[size_t(d.H + d.KV + h / 2) * d.D + e]);
}

// T = 1: one key with probability 1, so out = v, lse = scale q.k, and the softmax Jacobian
// vanishes: d_q = d_k = 0 and d_v = sum of d_out over the query heads of the group.
TEST(AttentionCpu, SinglePositionClosedForm) {
    AttnDims d{2, 1, 8, 2, 24};
    AttnCase c = make_case(d, 21);
    const int G = d.H / d.KV, S = d.qkv_stride();
    std::vector<float> out(c.out_size()), lse(size_t(d.B) * d.H), d_qkv(c.qkv_size(), NAN);
    cpu::attention_forward(out.data(), lse.data(), c.qkv.data(), d, c.scale);
    cpu::attention_backward(d_qkv.data(), c.d_out.data(), out.data(), lse.data(), c.qkv.data(), d,
                            c.scale);
    for (int b = 0; b < d.B; ++b) {
        const float* x = c.qkv.data() + size_t(b) * S;
        const float* dx = d_qkv.data() + size_t(b) * S;
        for (int h = 0; h < d.H; ++h) {
            const int kv = h / G;
            double qk = 0;
            for (int e = 0; e < d.D; ++e) {
                qk += double(x[h * d.D + e]) * x[(d.H + kv) * d.D + e];
                EXPECT_EQ(out[(size_t(b) * d.H + h) * d.D + e], x[(d.H + d.KV + kv) * d.D + e]);
                EXPECT_NEAR(dx[h * d.D + e], 0.0, 1e-6);  // rounding of dP - D_i only
            }
            EXPECT_NEAR(lse[size_t(b) * d.H + h], c.scale * qk, 1e-6);
        }
        for (int kv = 0; kv < d.KV; ++kv)
            for (int e = 0; e < d.D; ++e) {
                double dv = 0;
                for (int g = 0; g < G; ++g) dv += c.d_out[(size_t(b) * d.H + kv * G + g) * d.D + e];
                EXPECT_NEAR(dx[(d.H + kv) * d.D + e], 0.0, 1e-6);
                EXPECT_NEAR(dx[(d.H + d.KV + kv) * d.D + e], dv, 1e-6);
            }
    }
}

// The last key is seen by the last query only (everything else is masked): its d_v is
// sum_h P(T-1, T-1) dO(T-1, h) and its d_k is scale * sum_h dS(T-1, T-1) q(T-1, h), computed here
// in double from the saved lse. T = 33 and 65 put that key alone in a partial key tile.
TEST(AttentionCpu, LastKeyGradientClosedForm) {
    for (int T : {33, 65}) {
        AttnDims d{1, T, 4, 2, 16};
        SCOPED_TRACE(describe(d));
        AttnCase c = make_case(d, 31u + unsigned(T));
        const int G = d.H / d.KV, S = d.qkv_stride();
        std::vector<float> out(c.out_size()), lse(size_t(d.H) * T), d_qkv(c.qkv_size());
        cpu::attention_forward(out.data(), lse.data(), c.qkv.data(), d, c.scale);
        cpu::attention_backward(d_qkv.data(), c.d_out.data(), out.data(), lse.data(), c.qkv.data(),
                                d, c.scale);
        const float* x = c.qkv.data() + size_t(T - 1) * S;
        const float* dy = c.d_out.data() + size_t(T - 1) * d.H * d.D;
        const float* o = out.data() + size_t(T - 1) * d.H * d.D;
        for (int kv = 0; kv < d.KV; ++kv) {
            std::vector<double> dk(d.D, 0.0), dv(d.D, 0.0);
            for (int h = kv * G; h < (kv + 1) * G; ++h) {
                double s = 0, dp = 0, di = 0;
                for (int e = 0; e < d.D; ++e) {
                    s += double(x[h * d.D + e]) * x[(d.H + kv) * d.D + e];
                    dp += double(dy[h * d.D + e]) * x[(d.H + d.KV + kv) * d.D + e];
                    di += double(dy[h * d.D + e]) * o[h * d.D + e];
                }
                double p = std::exp(c.scale * s - lse[size_t(h) * T + T - 1]);
                for (int e = 0; e < d.D; ++e) {
                    dv[e] += p * dy[h * d.D + e];
                    dk[e] += c.scale * p * (dp - di) * x[h * d.D + e];
                }
            }
            const float* dx = d_qkv.data() + size_t(T - 1) * S;
            for (int e = 0; e < d.D; ++e) {
                EXPECT_NEAR(dx[(d.H + kv) * d.D + e], dk[e], 1e-6);
                EXPECT_NEAR(dx[(d.H + d.KV + kv) * d.D + e], dv[e], 1e-6);
            }
        }
    }
}

TEST(AttentionCpu, RejectsHeadsNotDivisibleByKvHeads) {
    std::vector<float> qkv(size_t(4) * (3 + 4) * 8), out(size_t(4) * 3 * 8), lse(12);
    EXPECT_THROW(cpu::attention_forward(out.data(), lse.data(), qkv.data(), {1, 4, 3, 2, 8}, 1.0f),
                 Error);
}

TEST(RopeCpu, MatchesRefForwardAndBackward) {
    for (int D : {16, 24, 64})
        for (int T : {1, 7, 33}) {
            AttnDims d{2, T, 4, 2, D};
            SCOPED_TRACE(describe(d));
            std::vector<float> cos, sin;
            rope_tables(T, D, cos, sin);
            const size_t n = size_t(d.B) * T * d.qkv_stride();
            std::vector<float> x = random_vec(n, 3u + unsigned(T * D)), y = x, y_ref = x;
            cpu::rope_forward(y.data(), cos.data(), sin.data(), d);
            ref::rope_apply(y_ref.data(), cos.data(), sin.data(), d, 1);
            EXPECT_LE(norm_err(y, y_ref), kRopeTol);
            EXPECT_EQ(part_of(y, d, Part::kV), part_of(x, d, Part::kV));  // values untouched
            if (T > 1) {
                EXPECT_GT(norm_err(y, x), 0.1);  // q and k did rotate (t = 0 does not)
            }
            std::vector<float> z = y, z_ref = y;
            cpu::rope_backward(z.data(), cos.data(), sin.data(), d);
            ref::rope_apply(z_ref.data(), cos.data(), sin.data(), d, -1);
            EXPECT_LE(norm_err(z, z_ref), kRopeTol);
            EXPECT_LE(norm_err(z, x), kRopeTol);  // backward undoes forward (R^T R = I)
        }
}

// rope_backward is the adjoint of rope_forward: <R x, y> == <x, R^T y>.
TEST(RopeCpu, BackwardIsAdjointOfForward) {
    AttnDims d{2, 19, 8, 4, 24};
    std::vector<float> cos, sin;
    rope_tables(d.T, d.D, cos, sin);
    const size_t n = size_t(d.B) * d.T * d.qkv_stride();
    std::vector<float> x = random_vec(n, 41), y = random_vec(n, 42), rx = x, rty = y;
    cpu::rope_forward(rx.data(), cos.data(), sin.data(), d);
    cpu::rope_backward(rty.data(), cos.data(), sin.data(), d);
    double lhs = 0, rhs = 0, mag = 0;
    for (size_t i = 0; i < n; ++i) {
        lhs += double(rx[i]) * y[i];
        rhs += double(x[i]) * rty[i];
        mag += std::abs(double(x[i]) * y[i]);
    }
    EXPECT_NEAR(lhs, rhs, 1e-6 * mag);  // f32 rounding of each rotated element
}

// Central differences of L = sum(out * w) in double against ref::attention_backward, for every
// element of qkv. Step 1e-5: truncation ~h^2 and roundoff ~1e-16/h are both far below 1e-6.
TEST(AttentionRefGrad, BackwardMatchesFiniteDifferences) {
    AttnDims d{2, 5, 4, 2, 6};
    const double scale = 0.7, h = 1e-5;
    const size_t n = size_t(d.B) * d.T * d.qkv_stride(), no = size_t(d.B) * d.T * d.H * d.D;
    std::vector<double> qkv = random_vec<double>(n, 51), w = random_vec<double>(no, 52);
    std::vector<double> out(no), lse(size_t(d.B) * d.H * d.T), grad(n);
    auto loss = [&](const std::vector<double>& x) {
        std::vector<double> o(no), l(lse.size());
        ref::attention_forward(o.data(), l.data(), x.data(), d, float(scale));
        double s = 0;
        for (size_t i = 0; i < no; ++i) s += o[i] * w[i];
        return s;
    };
    ref::attention_forward(out.data(), lse.data(), qkv.data(), d, float(scale));
    ref::attention_backward(grad.data(), w.data(), out.data(), lse.data(), qkv.data(), d,
                            float(scale));
    double gmax = 0;
    for (double g : grad) gmax = std::max(gmax, std::abs(g));
    ASSERT_GT(gmax, 0.01);
    for (size_t i = 0; i < n; ++i) {
        std::vector<double> xp = qkv, xm = qkv;
        xp[i] += h;
        xm[i] -= h;
        EXPECT_NEAR(grad[i], (loss(xp) - loss(xm)) / (2 * h), 1e-6 * gmax) << "element " << i;
    }
}

// The same for RoPE (linear, so the difference quotient is exact up to roundoff); d_v must be
// passed through unchanged.
TEST(AttentionRefGrad, RopeBackwardMatchesFiniteDifferences) {
    AttnDims d{1, 4, 2, 1, 6};
    const size_t n = size_t(d.B) * d.T * d.qkv_stride();
    std::vector<double> cos, sin;
    rope_tables<double>(d.T, d.D, cos, sin);
    std::vector<double> x = random_vec<double>(n, 61), w = random_vec<double>(n, 62), grad = w;
    ref::rope_apply(grad.data(), cos.data(), sin.data(), d, -1);
    auto loss = [&](std::vector<double> v) {
        ref::rope_apply(v.data(), cos.data(), sin.data(), d, 1);
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += v[i] * w[i];
        return s;
    };
    const double h = 1e-5;
    for (size_t i = 0; i < n; ++i) {
        std::vector<double> xp = x, xm = x;
        xp[i] += h;
        xm[i] -= h;
        EXPECT_NEAR(grad[i], (loss(xp) - loss(xm)) / (2 * h), 1e-8) << "element " << i;
    }
}

}  // namespace
}  // namespace ete
