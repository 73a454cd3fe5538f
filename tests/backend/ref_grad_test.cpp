// tests/backend/ref_grad_test.cpp — the reference backend's backward ops against central finite
// differences of its forward ops, in double (every float view F64, so the reference computes in
// double). Attention and RoPE have theirs in attention_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "kernel_bounds.h"

namespace ete {
namespace {

using namespace backend_test;

// d f / d theta[i] for every i, by central differences in double. With h = 1e-6 and f = O(10)
// the error is ~1e-9 (rounding: 2^-53 |f| times a few operations, over h) plus h^2 / 6 |f'''|
// ~ 1e-12 |f'''| (truncation): expect_grad allows 1e-8 absolute and 1e-6 relative.
DVec numeric_grad(DVec& theta, const std::function<double()>& f) {
    const double h = 1e-6;
    DVec g(theta.size());
    for (size_t i = 0; i < theta.size(); ++i) {
        double saved = theta[i];
        theta[i] = saved + h;
        double fp = f();
        theta[i] = saved - h;
        double fm = f();
        theta[i] = saved;
        g[i] = (fp - fm) / (2 * h);
    }
    return g;
}

// analytic = accumulated - prefill (the backward adds into a pre-filled buffer).
void expect_grad(const DVec& accumulated, const DVec& prefill, const DVec& numeric,
                 const std::string& what) {
    ASSERT_EQ(accumulated.size(), numeric.size()) << what;
    for (size_t i = 0; i < numeric.size(); ++i) {
        double analytic = accumulated[i] - prefill[i];
        EXPECT_NEAR(analytic, numeric[i], 1e-6 * std::fabs(numeric[i]) + 1e-8)
            << what << "[" << i << "]";
    }
}

double dot(const DVec& a, const DVec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

Mat m(DVec& v, int64_t rows, int64_t cols, int64_t ld = -1) {
    return host_mat(v, rows, cols, ld);
}
Vec v(DVec& x) {
    return host_vec(x);
}

class RefGradients : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

TEST_F(RefGradients, RmsNormMatchesFiniteDifferences) {
    const int N = 3, C = 5;
    const float eps = 1e-5f;
    DVec x = random_vec<double>(N * C, 50), w = random_vec<double>(C, 51, 0.5, 1.5);
    DVec r = random_vec<double>(N * C, 52), out(N * C), rstd(N);
    auto loss = [&] {
        ref_->rmsnorm_forward(m(out, N, C), v(rstd), m(x, N, C), v(w), eps);
        return dot(r, out);
    };
    DVec gx = numeric_grad(x, loss), gw = numeric_grad(w, loss);
    loss();
    DVec px = random_vec<double>(N * C, 53), pw = random_vec<double>(C, 54);
    DVec d_x = px, d_w = pw;
    ref_->rmsnorm_backward(m(d_x, N, C), v(d_w), m(r, N, C), m(x, N, C), v(w), v(rstd));
    expect_grad(d_x, px, gx, "rmsnorm d_x");
    expect_grad(d_w, pw, gw, "rmsnorm d_w");
}

TEST_F(RefGradients, LayerNormMatchesFiniteDifferences) {
    const int N = 3, C = 5;
    const float eps = 1e-5f;
    DVec x = random_vec<double>(N * C, 55, -1.0, 2.0), w = random_vec<double>(C, 56, 0.5, 1.5);
    DVec b = random_vec<double>(C, 57), r = random_vec<double>(N * C, 58);
    DVec out(N * C), mean(N), rstd(N);
    auto loss = [&] {
        ref_->layernorm_forward(m(out, N, C), v(mean), v(rstd), m(x, N, C), v(w), v(b), eps);
        return dot(r, out);
    };
    DVec gx = numeric_grad(x, loss), gw = numeric_grad(w, loss), gb = numeric_grad(b, loss);
    loss();
    DVec px = random_vec<double>(N * C, 59), pw = random_vec<double>(C, 60);
    DVec pb = random_vec<double>(C, 61);
    DVec d_x = px, d_w = pw, d_b = pb;
    ref_->layernorm_backward(m(d_x, N, C), v(d_w), v(d_b), m(r, N, C), m(x, N, C), v(w), v(mean),
                             v(rstd));
    expect_grad(d_x, px, gx, "layernorm d_x");
    expect_grad(d_w, pw, gw, "layernorm d_w");
    expect_grad(d_b, pb, gb, "layernorm d_b");
}

TEST_F(RefGradients, SwigluAndGeluMatchFiniteDifferences) {
    const int N = 3, F = 4;
    DVec gu = random_vec<double>(N * 2 * F, 62, -4.0, 4.0), r = random_vec<double>(N * F, 63);
    DVec out(N * F);
    auto swiglu = [&] {
        ref_->swiglu_forward(m(out, N, F), m(gu, N, 2 * F));
        return dot(r, out);
    };
    DVec g = numeric_grad(gu, swiglu), d_gu(N * 2 * F), zero(N * 2 * F, 0.0);
    ref_->swiglu_backward(m(d_gu, N, 2 * F), m(r, N, F), m(gu, N, 2 * F));
    expect_grad(d_gu, zero, g, "swiglu d_gate_up");

    DVec x = random_vec<double>(N * F, 64, -4.0, 4.0), gout(N * F), d_x(N * F);
    auto gelu = [&] {
        ref_->gelu_forward(m(gout, N, F), m(x, N, F));
        return dot(r, gout);
    };
    DVec gx = numeric_grad(x, gelu);
    ref_->gelu_backward(m(d_x, N, F), m(r, N, F), m(x, N, F));
    expect_grad(d_x, DVec(N * F, 0.0), gx, "gelu d_x");
}

TEST_F(RefGradients, GegluMatchesFiniteDifferences) {
    const int N = 3, F = 4;
    DVec gu = random_vec<double>(N * 2 * F, 162, -4.0, 4.0), r = random_vec<double>(N * F, 163);
    DVec out(N * F);
    auto geglu = [&] {
        ref_->geglu_forward(m(out, N, F), m(gu, N, 2 * F));
        return dot(r, out);
    };
    DVec g = numeric_grad(gu, geglu), d_gu(N * 2 * F), zero(N * 2 * F, 0.0);
    ref_->geglu_backward(m(d_gu, N, 2 * F), m(r, N, F), m(gu, N, 2 * F));
    expect_grad(d_gu, zero, g, "geglu d_gate_up");
}

// Gemma 2's final cap before the cross-entropy: softcap_forward, the loss, its backward in place,
// then softcap_backward, against differences of the capped loss of the raw logits.
TEST_F(RefGradients, SoftcappedCrossEntropyMatchesFiniteDifferences) {
    const int N = 3, V = 5;
    const float cap = 1.5f, d_scale = 0.5f;
    std::vector<int32_t> targets = {1, 4, kIgnoreIndex};
    DVec z = random_vec<double>(N * V, 170, -3.0, 3.0), y(N * V), losses(N), d_cap(N * V);
    auto loss = [&] {
        y = z;
        ref_->softcap_forward(m(y, N, V), Mat{}, cap);
        ref_->cross_entropy_forward(v(losses), m(y, N, V), host_cvec(targets));
        return d_scale * (losses[0] + losses[1] + losses[2]);
    };
    const DVec g = numeric_grad(z, loss);
    y = z;
    ref_->softcap_forward(m(y, N, V), m(d_cap, N, V), cap);
    for (size_t i = 0; i < y.size(); ++i) {  // the cap and its derivative, by definition
        EXPECT_NEAR(y[i], cap * std::tanh(z[i] / cap), 1e-15);
        EXPECT_NEAR(d_cap[i], 1 - std::pow(std::tanh(z[i] / cap), 2), 1e-15);
    }
    ref_->cross_entropy_forward_backward(m(y, N, V), v(losses), host_cvec(targets), d_scale,
                                         m(y, N, V));
    ref_->softcap_backward(m(y, N, V), m(d_cap, N, V));
    expect_grad(y, DVec(N * V, 0.0), g, "softcapped cross-entropy d_logits");
}

TEST_F(RefGradients, CrossEntropyMatchesFiniteDifferences) {
    const int N = 4, V = 6;
    const float d_scale = 0.75f;  // the gradient is that of d_scale * sum of losses
    std::vector<int32_t> targets = {2, kIgnoreIndex, 0, 5};
    DVec logits = random_vec<double>(N * V, 65, -3.0, 3.0), losses(N);
    auto loss = [&] {
        ref_->cross_entropy_forward(v(losses), m(logits, N, V), host_cvec(targets));
        return d_scale * (losses[0] + losses[1] + losses[2] + losses[3]);
    };
    DVec g = numeric_grad(logits, loss), d_logits = logits;
    Mat dl = m(d_logits, N, V);
    ref_->cross_entropy_forward_backward(dl, v(losses), host_cvec(targets), d_scale, dl);
    expect_grad(d_logits, DVec(N * V, 0.0), g, "cross_entropy d_logits");
    EXPECT_EQ(losses[1], 0.0);

    // The vocab-parallel backward from the full-row lse is the same gradient.
    DVec lse(N), zt(N), d2(N * V);
    ref_->cross_entropy_stats(v(lse), v(zt), m(logits, N, V), host_cvec(targets));
    ref_->cross_entropy_backward(m(d2, N, V), m(logits, N, V), v(lse), host_cvec(targets), d_scale);
    expect_grad(d2, DVec(N * V, 0.0), g, "cross_entropy_backward d_logits");
}

TEST_F(RefGradients, EmbeddingsAndBiasMatchFiniteDifferences) {
    const int V = 4, C = 3, N = 5, B = 2, T = 3, ldy = 6;
    std::vector<int32_t> ids = {1, 3, 1, 0, 1};  // repeated ids accumulate
    DVec table = random_vec<double>(V * C, 66), r = random_vec<double>(N * C, 67), out(N * C);
    auto emb = [&] {
        ref_->embedding_forward(m(out, N, C), host_cvec(ids), m(table, V, C), 0);
        return dot(r, out);
    };
    DVec g = numeric_grad(table, emb), pt = random_vec<double>(V * C, 68), d_table = pt;
    ref_->embedding_backward(m(d_table, V, C), m(r, N, C), host_cvec(ids), 0);
    expect_grad(d_table, pt, g, "embedding d_table");

    DVec wpe = random_vec<double>(T * C, 69), base = random_vec<double>(B * T * C, 70);
    DVec rp = random_vec<double>(B * T * C, 71);
    auto pos = [&] {
        DVec o = base;
        ref_->pos_embedding_forward(m(o, B * T, C), m(wpe, T, C), {}, B, T);
        return dot(rp, o);
    };
    DVec gp = numeric_grad(wpe, pos), pw = random_vec<double>(T * C, 72), d_wpe = pw;
    ref_->pos_embedding_backward(m(d_wpe, T, C), m(rp, B * T, C), {}, B, T);
    expect_grad(d_wpe, pw, gp, "pos_embedding d_wpe");

    DVec bias = random_vec<double>(C, 73), y0 = random_vec<double>(N * ldy, 74);
    DVec ry = random_vec<double>(N * ldy, 75);
    auto fwd = [&] {
        DVec y = y0;
        ref_->bias_forward(m(y, N, C, ldy), v(bias));
        return dot(ry, y);
    };
    DVec gb = numeric_grad(bias, fwd), pb = random_vec<double>(C, 76), d_b = pb;
    ref_->bias_backward(v(d_b), m(ry, N, C, ldy));  // reads only the C valid columns
    expect_grad(d_b, pb, gb, "bias d_b");
}

// A vocab-parallel shard (ids [2, 4) of 4): its table rows get exactly the gradient of the
// whole table's rows 2 and 3; ids of other shards contribute nothing.
TEST_F(RefGradients, ShardedEmbeddingMatchesFiniteDifferences) {
    const int V = 2, C = 3, N = 5, first = 2;
    std::vector<int32_t> ids = {1, 3, 2, 0, 3};
    DVec table = random_vec<double>(V * C, 81), r = random_vec<double>(N * C, 82), out(N * C);
    auto emb = [&] {
        ref_->embedding_forward(m(out, N, C), host_cvec(ids), m(table, V, C), first);
        return dot(r, out);
    };
    DVec g = numeric_grad(table, emb), pt = random_vec<double>(V * C, 83), d_table = pt;
    ref_->embedding_backward(m(d_table, V, C), m(r, N, C), host_cvec(ids), first);
    expect_grad(d_table, pt, g, "sharded embedding d_table");
}

// Packed rows (documents of 2, 1 and 2 positions; of 1 and 4): positions restart, so wpe rows 0
// and 1 collect gradient from several documents, 2 and 3 from the long document only, 4 none.
TEST_F(RefGradients, PackedPosEmbeddingMatchesFiniteDifferences) {
    const int B = 2, T = 5, C = 3;
    const std::vector<int32_t> starts = {0, 0, 2, 3, 3, 0, 1, 1, 1, 1};
    DVec wpe = random_vec<double>(T * C, 77), base = random_vec<double>(B * T * C, 78);
    DVec r = random_vec<double>(B * T * C, 79);
    auto pos = [&] {
        DVec o = base;
        ref_->pos_embedding_forward(m(o, B * T, C), m(wpe, T, C), host_cvec(starts), B, T);
        return dot(r, o);
    };
    DVec g = numeric_grad(wpe, pos), pw = random_vec<double>(T * C, 80), d_wpe = pw;
    ref_->pos_embedding_backward(m(d_wpe, T, C), m(r, B * T, C), host_cvec(starts), B, T);
    expect_grad(d_wpe, pw, g, "packed pos_embedding d_wpe");
    for (int c = 0; c < C; ++c) EXPECT_EQ(d_wpe[4 * C + c], pw[4 * C + c]);  // position 4 unused
}

}  // namespace
}  // namespace ete
