// tests/nn/norm_test.cpp — Gemma's (1 + w) norms (Norm and HeadNorm with a weight offset) are the
// plain RMSNorm of the weight 1 + w formed in fp32, bit for bit: norm_weight builds exactly
// Hugging Face's `1.0 + weight.float()` (one rounding) and the kernels then run unchanged.
#include <gtest/gtest.h>

#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/rng.h"
#include "ete/nn/head_norm.h"
#include "ete/nn/norm.h"
#include "test_util.h"

namespace ete {
namespace norm_test {

using testing::host_cmat;
using testing::host_cvec;
using testing::host_mat;
using testing::host_vec;

std::vector<float> values(size_t n, uint64_t seed, float lo, float hi) {
    CounterRng rng(seed, "norm_test");
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
    return v;
}

// The weight as the offset norm must see it: 1 + w rounded once to fp32.
std::vector<float> plus_one(const std::vector<float>& w) {
    std::vector<float> o(w.size());
    for (size_t i = 0; i < w.size(); ++i) o[i] = 1.0f + w[i];
    return o;
}

TEST(NormOffset, IsTheRmsNormOfOnePlusW) {
    auto be = make_cpu_backend();
    const int64_t N = 7, C = 24;
    std::vector<float> x = values(static_cast<size_t>(N * C), 1, -3, 3),
                       dy = values(static_cast<size_t>(N * C), 2, -1, 1);
    std::vector<float> w = values(static_cast<size_t>(C), 3, -0.3f, 0.3f), w1 = plus_one(w);
    std::vector<float> scratch(static_cast<size_t>(C));
    // The offset norm, trainable weight w.
    std::vector<float> out(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N)),
        dx(static_cast<size_t>(N * C), 0.5f), dw(static_cast<size_t>(C), 0.25f);
    const Norm norm({host_cvec(w), host_vec(dw), {}, {}}, false, 1e-6f, 1.0f, host_vec(scratch));
    norm.forward(*be, host_mat(out, N, C), Vec{}, host_vec(rstd), host_cmat(x, N, C));
    norm.backward(*be, host_mat(dx, N, C), host_mat(dy, N, C), host_cmat(x, N, C), CVec{},
                  host_cvec(rstd));
    // The plain RMSNorm of 1 + w.
    std::vector<float> out1(out.size()), rstd1(rstd.size()), dx1(dx.size(), 0.5f),
        dw1(dw.size(), 0.25f);
    be->rmsnorm_forward(host_mat(out1, N, C), host_vec(rstd1), host_cmat(x, N, C), host_cvec(w1),
                        1e-6f);
    be->rmsnorm_backward(host_mat(dx1, N, C), host_vec(dw1), host_cmat(dy, N, C),
                         host_cmat(x, N, C), host_cvec(w1), host_cvec(rstd1));
    EXPECT_EQ(out, out1);
    EXPECT_EQ(rstd, rstd1);
    EXPECT_EQ(dx, dx1);
    EXPECT_EQ(dw, dw1);  // d(1 + w)/dw = 1: the same weight gradient
    // And it is not the plain norm of w (the offset is applied).
    std::vector<float> out0(out.size());
    Norm({host_cvec(w), {}, {}, {}}, false, 1e-6f)
        .forward(*be, host_mat(out0, N, C), Vec{}, host_vec(rstd1), host_cmat(x, N, C));
    EXPECT_NE(out, out0);
}

// Gemma 3's q/k norms: every head normalised with 1 + w (q heads by q's weight, k by k's), v
// untouched.
TEST(NormOffset, HeadNormUsesOnePlusWPerKind) {
    auto be = make_cpu_backend();
    const int N = 3, H = 4, KV = 2, D = 8, S = (H + 2 * KV) * D;
    std::vector<float> qkv = values(static_cast<size_t>(N * S), 4, -2, 2), orig = qkv;
    std::vector<float> wq = values(static_cast<size_t>(D), 5, -0.2f, 0.2f),
                       wk = values(static_cast<size_t>(D), 6, -0.2f, 0.2f);
    std::vector<float> scratch(static_cast<size_t>(D)), q_in(static_cast<size_t>(N * H * D)),
        k_in(static_cast<size_t>(N * KV * D));
    std::vector<float> q_rstd(static_cast<size_t>(N * H)), k_rstd(static_cast<size_t>(N * KV)),
        tmp(static_cast<size_t>(N * H * D));
    const HeadNorm hn({host_cvec(wq), {}, {}, {}}, {host_cvec(wk), {}, {}, {}}, 1e-6f, H, KV, D,
                      1.0f, host_vec(scratch));
    const HeadNormActs acts{host_mat(q_in, N * H, D), host_mat(k_in, N * KV, D), host_vec(q_rstd),
                            host_vec(k_rstd)};
    hn.forward(*be, host_mat(qkv, N, S), acts, host_mat(tmp, N, H * D));
    for (int n = 0; n < N; ++n)
        for (int h = 0; h < H + 2 * KV; ++h) {
            const float* x = orig.data() + static_cast<size_t>(n) * S + static_cast<size_t>(h) * D;
            const float* got = qkv.data() + static_cast<size_t>(n) * S + static_cast<size_t>(h) * D;
            if (h >= H + KV) {  // v
                for (int e = 0; e < D; ++e) EXPECT_EQ(got[e], x[e]);
                continue;
            }
            std::vector<float> row(x, x + D), want(static_cast<size_t>(D)), r(1);
            const std::vector<float> w1 = plus_one(h < H ? wq : wk);
            be->rmsnorm_forward(host_mat(want, 1, D), host_vec(r), host_cmat(row, 1, D),
                                host_cvec(w1), 1e-6f);
            for (int e = 0; e < D; ++e)
                EXPECT_EQ(got[e], want[static_cast<size_t>(e)]) << n << " " << h;
        }
}

}  // namespace norm_test
}  // namespace ete
