// tests/backend/kernels_test.cpp — optimized CPU kernels (other than GEMM and attention) against
// the scalar reference, and the reference's backward kernels against finite differences in double.
//
// Sizes: N in {1, 31, 32, 33} x C in {1, 7, 31, 32, 33, 64, 1000}, plus one shape large enough to
// take the OpenMP path. Tolerances are per op, each with its reason; ops whose CPU version does the
// same float operations in the same order as the reference are compared bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/backend/cpu/ref/ref_kernels.h"
#include "ete/backend/cpu/simd_math.h"
#include "ete/core/error.h"

namespace ete {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

struct Shape {
    int N, C;
};

// Awkward sizes around the 16-lane vector width, plus one over the parallel threshold.
std::vector<Shape> shapes() {
    std::vector<Shape> s;
    for (int n : {1, 31, 32, 33})
        for (int c : {1, 7, 31, 32, 33, 64, 1000}) s.push_back({n, c});
    s.push_back({300, 517});
    return s;
}

std::string name(Shape s) {
    return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C);
}

template <typename T = float>
std::vector<T> random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(dist(gen));
    return v;
}

std::vector<int32_t> random_ids(int n, int V, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> dist(0, V - 1);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& i : ids) i = dist(gen);
    return ids;
}

// |got - want| <= atol + rtol * |want| everywhere; reports the first few offenders.
void expect_close(const Vec& got, const Vec& want, double rtol, double atol,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        double d = std::fabs(double(got[i]) - want[i]);
        if (!(d <= atol + rtol * std::fabs(want[i])) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
    }
    EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
}

void expect_bitwise(const Vec& got, const Vec& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]) && bad++ < 3)
            ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
    EXPECT_EQ(bad, 0) << what << ": elements not bit-identical";
}

// Distance in units in the last place between two finite floats of any sign.
int64_t ulp_distance(float a, float b) {
    auto key = [](float f) {
        int32_t i = std::bit_cast<int32_t>(f);
        return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);  // monotone in f
    };
    return std::abs(key(a) - key(b));
}

class Kernels : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

// ---- bias, embeddings, residual add, scale: same float ops as ref, so bit-identical ----

TEST_F(Kernels, BiasForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes()) {
        int ldy = s.C + 5;  // padded rows: the 5 extra columns must stay untouched
        Vec y = random_vec(size_t(s.N) * ldy, 1), b = random_vec(size_t(s.C), 2);
        Vec y_ref = y;
        cpu_->bias_forward(y.data(), b.data(), s.N, s.C, ldy);
        ref::bias_forward(y_ref.data(), b.data(), s.N, s.C, ldy);
        expect_bitwise(y, y_ref, "bias_forward " + name(s));

        Vec d_b = random_vec(size_t(s.C), 3), d_b_ref = d_b;  // pre-filled: backward adds
        cpu_->bias_backward(d_b.data(), y.data(), s.N, s.C, ldy);
        ref::bias_backward(d_b_ref.data(), y.data(), s.N, s.C, ldy);
        expect_bitwise(d_b, d_b_ref, "bias_backward " + name(s));
    }
}

TEST_F(Kernels, EmbeddingForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes())
        for (int V : {3, 50}) {  // V = 3: almost every id repeats, the scatter must not race
            std::vector<int32_t> ids = random_ids(s.N, V, 4);
            Vec table = random_vec(size_t(V) * s.C, 5);
            Vec out(size_t(s.N) * s.C, -7.0f), out_ref = out;
            cpu_->embedding_forward(out.data(), ids.data(), table.data(), s.N, s.C);
            ref::embedding_forward(out_ref.data(), ids.data(), table.data(), s.N, s.C);
            expect_bitwise(out, out_ref, "embedding_forward " + name(s));

            Vec d_out = random_vec(size_t(s.N) * s.C, 6);
            Vec d_table = random_vec(size_t(V) * s.C, 7), d_table_ref = d_table;
            cpu_->embedding_backward(d_table.data(), d_out.data(), ids.data(), s.N, s.C);
            ref::embedding_backward(d_table_ref.data(), d_out.data(), ids.data(), s.N, s.C);
            expect_bitwise(d_table, d_table_ref, "embedding_backward " + name(s));
        }
}

TEST_F(Kernels, PosEmbeddingForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes())
        for (int B : {1, 3}) {
            int T = s.N;
            Vec wpe = random_vec(size_t(T) * s.C, 8);
            Vec out = random_vec(size_t(B) * T * s.C, 9), out_ref = out;
            cpu_->pos_embedding_forward(out.data(), wpe.data(), nullptr, B, T, s.C);
            ref::pos_embedding_forward(out_ref.data(), wpe.data(), nullptr, B, T, s.C);
            expect_bitwise(out, out_ref, "pos_embedding_forward " + name(s));

            Vec d_wpe = random_vec(size_t(T) * s.C, 10), d_wpe_ref = d_wpe;
            cpu_->pos_embedding_backward(d_wpe.data(), out.data(), nullptr, B, T, s.C);
            ref::pos_embedding_backward(d_wpe_ref.data(), out.data(), nullptr, B, T, s.C);
            expect_bitwise(d_wpe, d_wpe_ref, "pos_embedding_backward " + name(s));
        }
}

// doc_start (B*T) for B rows of T: row b cut into documents of the lengths kLengths cycled from
// offset b (1, 3, 7, 2, 13, ...); the last row is one whole-row document.
std::vector<int32_t> packed_starts(int B, int T) {
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

// Packed rows: position t - s. The forward adds exactly wpe[t - s]; the backward keeps ref's
// order per position (rows in order, double), so both are bit-identical to ref; and an explicit
// all-zero doc_start is bit-identical to null.
TEST_F(Kernels, PosEmbeddingPackedIsBitIdenticalToRefAndRestartsPositions) {
    for (Shape s : shapes()) {
        const int B = 3, T = s.N, C = s.C;
        std::vector<int32_t> starts = packed_starts(B, T), zeros(size_t(B) * T, 0);
        Vec wpe = random_vec(size_t(T) * C, 13), base = random_vec(size_t(B) * T * C, 14);
        Vec out = base, out_ref = base, want = base;
        cpu_->pos_embedding_forward(out.data(), wpe.data(), starts.data(), B, T, C);
        ref::pos_embedding_forward(out_ref.data(), wpe.data(), starts.data(), B, T, C);
        for (size_t r = 0; r < size_t(B) * T; ++r)
            for (int c = 0; c < C; ++c)
                want[r * C + c] += wpe[(r % size_t(T) - size_t(starts[r])) * C + size_t(c)];
        expect_bitwise(out, out_ref, "packed pos_embedding_forward " + name(s));
        expect_bitwise(out, want, "packed pos_embedding_forward (definition) " + name(s));

        Vec d_wpe = random_vec(size_t(T) * C, 15), d_wpe_ref = d_wpe;
        cpu_->pos_embedding_backward(d_wpe.data(), out.data(), starts.data(), B, T, C);
        ref::pos_embedding_backward(d_wpe_ref.data(), out.data(), starts.data(), B, T, C);
        expect_bitwise(d_wpe, d_wpe_ref, "packed pos_embedding_backward " + name(s));

        Vec z_out = base, n_out = base, z_d = d_wpe, n_d = d_wpe;
        cpu_->pos_embedding_forward(z_out.data(), wpe.data(), zeros.data(), B, T, C);
        cpu_->pos_embedding_forward(n_out.data(), wpe.data(), nullptr, B, T, C);
        cpu_->pos_embedding_backward(z_d.data(), out.data(), zeros.data(), B, T, C);
        cpu_->pos_embedding_backward(n_d.data(), out.data(), nullptr, B, T, C);
        expect_bitwise(z_out, n_out, "all-zero doc_start forward " + name(s));
        expect_bitwise(z_d, n_d, "all-zero doc_start backward " + name(s));
    }
}

TEST_F(Kernels, PosEmbeddingRejectsInvalidDocStart) {
    std::vector<int32_t> starts = {0, 0, 3, 3};  // position 2 claims a document starting at 3
    Vec wpe(4 * 2), out(4 * 2);
    EXPECT_THROW(cpu_->pos_embedding_forward(out.data(), wpe.data(), starts.data(), 1, 4, 2),
                 Error);
    EXPECT_THROW(cpu_->pos_embedding_backward(wpe.data(), out.data(), starts.data(), 1, 4, 2),
                 Error);
}

TEST_F(Kernels, AddInplaceAndScaleAreBitIdenticalToLoops) {
    for (int64_t n : {1, 7, 31, 32, 33, 1000, 100003}) {
        Vec x = random_vec(size_t(n), 11), y = random_vec(size_t(n), 12);
        Vec want = x;
        for (size_t i = 0; i < want.size(); ++i) want[i] = (want[i] + y[i]) * 0.3f;
        cpu_->add_inplace(x.data(), y.data(), n);
        cpu_->scale(x.data(), 0.3f, n);
        expect_bitwise(x, want, "add_inplace+scale n=" + std::to_string(n));
    }
}

// ---- norms ----

TEST_F(Kernels, RmsNormMatchesRef) {
    const float eps = 1e-5f;
    for (Shape s : shapes()) {
        size_t nc = size_t(s.N) * s.C;
        Vec x = random_vec(nc, 13), w = random_vec(size_t(s.C), 14, 0.5, 1.5);
        Vec out(nc), rstd(size_t(s.N)), out_ref(nc), rstd_ref(size_t(s.N));
        cpu_->rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, eps);
        ref::rmsnorm_forward(out_ref.data(), rstd_ref.data(), x.data(), w.data(), s.N, s.C, eps);
        // rstd is rounded to float before it scales x: a few ulp per output.
        expect_close(rstd, rstd_ref, 1e-6, 0, "rmsnorm rstd " + name(s));
        expect_close(out, out_ref, 1e-6, 1e-7, "rmsnorm out " + name(s));

        Vec d_out = random_vec(nc, 15);
        Vec d_x = random_vec(nc, 16), d_w = random_vec(size_t(s.C), 17);  // pre-filled: +=
        Vec d_x_ref = d_x, d_w_ref = d_w;
        cpu_->rmsnorm_backward(d_x.data(), d_w.data(), d_out.data(), x.data(), w.data(),
                               rstd_ref.data(), s.N, s.C);
        ref::rmsnorm_backward(d_x_ref.data(), d_w_ref.data(), d_out.data(), x.data(), w.data(),
                              rstd_ref.data(), s.N, s.C);
        // float arithmetic with cancellation in dy*w - xhat*dot (terms O(1)).
        expect_close(d_x, d_x_ref, 1e-5, 1e-5, "rmsnorm d_x " + name(s));
        // ref adds each row's float term into d_w, a float running sum over up to 300 rows.
        expect_close(d_w, d_w_ref, 1e-5, 1e-4, "rmsnorm d_w " + name(s));
    }
}

TEST_F(Kernels, LayerNormMatchesRef) {
    const float eps = 1e-5f;
    for (Shape s : shapes()) {
        size_t nc = size_t(s.N) * s.C;
        Vec x = random_vec(nc, 18, -1.0, 3.0);  // non-zero mean
        Vec w = random_vec(size_t(s.C), 19, 0.5, 1.5), b = random_vec(size_t(s.C), 20);
        Vec out(nc), mean(size_t(s.N)), rstd(size_t(s.N));
        Vec out_ref(nc), mean_ref(size_t(s.N)), rstd_ref(size_t(s.N));
        cpu_->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                s.N, s.C, eps);
        ref::layernorm_forward(out_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), w.data(),
                               b.data(), s.N, s.C, eps);
        // mean and rstd rounded to float before the float affine map: a few ulp of O(1) terms.
        expect_close(mean, mean_ref, 1e-6, 1e-7, "layernorm mean " + name(s));
        expect_close(rstd, rstd_ref, 1e-6, 0, "layernorm rstd " + name(s));
        expect_close(out, out_ref, 1e-5, 1e-6, "layernorm out " + name(s));

        Vec d_out = random_vec(nc, 21);
        Vec d_x = random_vec(nc, 22), d_w = random_vec(size_t(s.C), 23);  // pre-filled: +=
        Vec d_b = random_vec(size_t(s.C), 24);
        Vec d_x_ref = d_x, d_w_ref = d_w, d_b_ref = d_b;
        cpu_->layernorm_backward(d_x.data(), d_w.data(), d_b.data(), d_out.data(), x.data(),
                                 w.data(), mean_ref.data(), rstd_ref.data(), s.N, s.C);
        ref::layernorm_backward(d_x_ref.data(), d_w_ref.data(), d_b_ref.data(), d_out.data(),
                                x.data(), w.data(), mean_ref.data(), rstd_ref.data(), s.N, s.C);
        // d_x: float cancellation in g - mean(g) - xhat*mean(g xhat), scaled by rstd; ref itself
        // forms g in float but mean(g) in double, so at C = 1 (var 0, rstd 316) it is off by
        // rstd * ulp(g) where the true value is exactly 0. d_w, d_b: ref's float running sums.
        float rstd_max = *std::max_element(rstd_ref.begin(), rstd_ref.end());
        expect_close(d_x, d_x_ref, 1e-5, 1e-5 * rstd_max, "layernorm d_x " + name(s));
        expect_close(d_w, d_w_ref, 1e-5, 1e-4, "layernorm d_w " + name(s));
        expect_close(d_b, d_b_ref, 1e-5, 1e-4, "layernorm d_b " + name(s));
    }
}

// The column reductions sum fixed blocks in a fixed order: the thread count must not matter.
TEST_F(Kernels, ColumnReductionsDoNotDependOnThreadCount) {
    const int N = 300, C = 517, saved = omp_get_max_threads();
    size_t nc = size_t(N) * C;
    Vec x = random_vec(nc, 25), w = random_vec(size_t(C), 26), dy = random_vec(nc, 27);
    Vec mean(size_t(N), 0.1f), rstd = random_vec(size_t(N), 28, 0.5, 2.0);
    auto run = [&](int threads) {
        omp_set_num_threads(threads);
        Vec d_x(nc, 0.0f), d_w(size_t(C), 0.0f), d_b(size_t(C), 0.0f), d_w2(size_t(C), 0.0f);
        cpu_->rmsnorm_backward(d_x.data(), d_w.data(), dy.data(), x.data(), w.data(), rstd.data(),
                               N, C);
        cpu_->layernorm_backward(d_x.data(), d_w2.data(), d_b.data(), dy.data(), x.data(), w.data(),
                                 mean.data(), rstd.data(), N, C);
        cpu_->bias_backward(d_b.data(), dy.data(), N, C, C);
        Vec all = d_w;
        all.insert(all.end(), d_w2.begin(), d_w2.end());
        all.insert(all.end(), d_b.begin(), d_b.end());
        return all;
    };
    Vec one = run(1), two = run(2), three = run(3);
    omp_set_num_threads(saved);
    expect_bitwise(two, one, "2 threads vs 1");
    expect_bitwise(three, one, "3 threads vs 1");
}

// ---- activations ----

TEST(SimdMath, ExpFastIsWithinTwoUlpOfCorrectlyRoundedExp) {
    // Dense sweep of the normal range (~300k points, relative step 3e-5, every float exponent).
    int64_t worst = 0;
    for (float x = -87.0f; x < 88.0f; x += 3.1e-5f * (1.0f + std::fabs(x))) {
        float want = float(std::exp(double(x)));
        worst = std::max(worst, ulp_distance(cpu::exp_fast(x), want));
    }
    EXPECT_LE(worst, 2);
    EXPECT_EQ(cpu::exp_fast(0.0f), 1.0f);
    EXPECT_EQ(cpu::exp_fast(-100.0f), 0.0f);  // flushed below the normal range
    EXPECT_EQ(cpu::exp_fast(-INFINITY), 0.0f);
    EXPECT_TRUE(std::isfinite(cpu::exp_fast(1000.0f)));  // clamped: 1 / (1 + e) stays finite
    EXPECT_TRUE(std::isnan(cpu::exp_fast(NAN)));
    EXPECT_NEAR(cpu::sigmoid_fast(0.5f), 1.0 / (1.0 + std::exp(-0.5)), 1e-7);
}

// Mostly moderate values, with a sprinkle of large ones that saturate the sigmoid / exp.
Vec activation_inputs(size_t n, uint32_t seed) {
    Vec v = random_vec(n, seed, -6.0, 6.0);
    const float big[] = {-100.0f, -40.0f, -15.0f, 15.0f, 40.0f, 100.0f, 0.0f};
    for (size_t i = 0; i < n; i += 13) v[i] = big[(i / 13) % 7];
    return v;
}

TEST_F(Kernels, SwigluMatchesRef) {
    for (Shape s : shapes()) {
        int F = s.C;
        size_t nf = size_t(s.N) * F;
        Vec gu = activation_inputs(2 * nf, 29), d_out = random_vec(nf, 30);
        Vec out(nf), out_ref(nf), d_gu(2 * nf, 5.0f), d_gu_ref(2 * nf);
        cpu_->swiglu_forward(out.data(), gu.data(), s.N, F);
        ref::swiglu_forward(out_ref.data(), gu.data(), s.N, F);
        cpu_->swiglu_backward(d_gu.data(), d_out.data(), gu.data(), s.N, F);
        ref::swiglu_backward(d_gu_ref.data(), d_out.data(), gu.data(), s.N, F);
        // vectorised exp (~1.3 ulp) and float arithmetic vs double; atol covers the zero of
        // silu'(g) near g = -1.28 where 1 + g(1 - s) cancels, for terms up to |g u| ~ 600.
        expect_close(out, out_ref, 1e-5, 1e-6, "swiglu out " + name(s));
        expect_close(d_gu, d_gu_ref, 1e-5, 1e-5, "swiglu d_gate_up " + name(s));
    }
}

TEST_F(Kernels, GeluMatchesRef) {
    for (int64_t n : {1, 7, 31, 32, 33, 64, 1000, 100003}) {
        const size_t sz = static_cast<size_t>(n);
        Vec x = activation_inputs(sz, 31), d_out = random_vec(sz, 32);
        Vec out(sz), out_ref(sz), d_x(sz, 5.0f), d_x_ref(sz);
        cpu_->gelu_forward(out.data(), x.data(), n);
        ref::gelu_forward(out_ref.data(), x.data(), n);
        cpu_->gelu_backward(d_x.data(), d_out.data(), x.data(), n);
        ref::gelu_backward(d_x_ref.data(), d_out.data(), x.data(), n);
        // vectorised exp-based sigmoid vs double tanh; atol for the zero of gelu' near x = -0.75.
        std::string what = " n=" + std::to_string(n);
        expect_close(out, out_ref, 1e-5, 1e-6, "gelu out" + what);
        expect_close(d_x, d_x_ref, 1e-5, 1e-6, "gelu d_x" + what);
    }
}

// ---- cross-entropy ----

struct CeCase {
    int N, V;
};

std::vector<CeCase> ce_cases() {
    std::vector<CeCase> c;
    for (int n : {1, 31, 32, 33})
        for (int v : {1, 7, 31, 32, 33, 64, 1000}) c.push_back({n, v});
    c.push_back({33, 8192});  // several 512-wide chunks per row
    c.push_back({5, 40000});  // chunk width grows past 512 (at most 64 chunks)
    return c;
}

// Logits with a rising trend along V (the running max moves up chunk after chunk), per-row
// offsets, and one row shifted by +1000 (stability). Every fourth target is ignored.
void ce_inputs(CeCase cs, Vec& logits, std::vector<int32_t>& targets) {
    logits = random_vec(size_t(cs.N) * cs.V, 33, -4.0, 4.0);
    for (int n = 0; n < cs.N; ++n)
        for (int v = 0; v < cs.V; ++v)
            logits[size_t(n) * cs.V + v] += 6.0f * v / cs.V + (n == 2 ? 1000.0f : 0.5f * n);
    targets = random_ids(cs.N, cs.V, 34);
    for (int n = 1; n < cs.N; n += 4) targets[size_t(n)] = kIgnoreIndex;
}

TEST_F(Kernels, CrossEntropyForwardBackwardMatchesRef) {
    const float d_scale = 0.37f;
    for (CeCase cs : ce_cases()) {
        std::string what = " N=" + std::to_string(cs.N) + " V=" + std::to_string(cs.V);
        Vec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        Vec grad = logits, grad_ref = logits;
        Vec loss(size_t(cs.N), -1.0f), loss_ref(size_t(cs.N));
        cpu_->cross_entropy_forward_backward(grad.data(), loss.data(), targets.data(), cs.N, cs.V,
                                             d_scale);
        ref::cross_entropy_forward_backward(grad_ref.data(), loss_ref.data(), targets.data(), cs.N,
                                            cs.V, d_scale);
        // float exp (~1.3 ulp), float chunk sums and a float scale per chunk vs double: a few ulp
        // on p (measured < 1e-8 relative); atol for p - 1 at the target, which cancels.
        expect_close(loss, loss_ref, 1e-6, 1e-6, "ce loss" + what);
        expect_close(grad, grad_ref, 1e-6, 1e-8, "ce d_logits" + what);
        for (int n = 1; n < cs.N; n += 4) {  // ignored rows: loss 0, gradient exactly 0
            EXPECT_EQ(loss[size_t(n)], 0.0f);
            for (int v = 0; v < cs.V; ++v) ASSERT_EQ(grad[size_t(n) * cs.V + v], 0.0f) << what;
        }
    }
}

TEST_F(Kernels, CrossEntropyForwardMatchesRefAndLeavesLogits) {
    for (CeCase cs : ce_cases()) {
        std::string what = " N=" + std::to_string(cs.N) + " V=" + std::to_string(cs.V);
        Vec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        Vec before = logits, loss(size_t(cs.N), -1.0f), loss_ref(size_t(cs.N));
        cpu_->cross_entropy_forward(loss.data(), logits.data(), targets.data(), cs.N, cs.V);
        ref::cross_entropy_forward(loss_ref.data(), logits.data(), targets.data(), cs.N, cs.V);
        expect_close(loss, loss_ref, 1e-6, 1e-6, "ce forward loss" + what);  // as above
        expect_bitwise(logits, before, "ce forward logits" + what);
    }
}

TEST_F(Kernels, CrossEntropyRejectsTargetOutOfRange) {
    Vec logits(2 * 5, 0.0f), loss(2);
    std::vector<int32_t> targets = {1, 5};
    EXPECT_THROW(cpu_->cross_entropy_forward(loss.data(), logits.data(), targets.data(), 2, 5),
                 Error);
    targets = {-1, 0};
    EXPECT_THROW(cpu_->cross_entropy_forward_backward(logits.data(), loss.data(), targets.data(), 2,
                                                      5, 1.0f),
                 Error);
}

// ---- optimizer ----

// ref::adamw_step is plain C++; GCC contracts its a*b + c into fma only from -O2 up, so the
// reference rounds differently in -O0/-O1 builds. The kernel spells out the -O2+ fusion. Tests call
// the reference out of line (through this pointer) so that inlining cannot change its roundings.
using AdamwFn = void (*)(float*, const float*, float*, float*, int64_t, float, float, float, float,
                         float, float, float);
AdamwFn volatile ref_adamw = &ref::adamw_step<float>;

// Finds an m where m + (0 - m)(1 - b1) differs fused vs unfused and asks the reference.
bool reference_adamw_is_fused() {
    const float b1 = 0.9f, one_m_b1 = 1.0f - b1;
    for (int i = 1; i < 10000; ++i) {
        float m0 = 1.0f + float(i) * 1.2345e-4f;
        volatile float product = (0.0f - m0) * one_m_b1;  // volatile: never fused
        float unfused = m0 + product, fused = std::fma(0.0f - m0, one_m_b1, m0);
        if (unfused == fused) continue;
        float p = 0.0f, g = 0.0f, m = m0, v = 0.0f;
        ref_adamw(&p, &g, &m, &v, 1, 1e-3f, b1, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f);
        return m == fused;
    }
    return false;
}

TEST_F(Kernels, AdamwIsBitIdenticalToRefOverSteps) {
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    const bool fused = reference_adamw_is_fused();
    if (!fused) std::printf("note: reference AdamW built without fma (-O0/-O1): tolerance check\n");
    for (int64_t n : {1, 17, 1000, 100003}) {
        Vec p = random_vec(size_t(n), 35), m(size_t(n), 0.0f), v(size_t(n), 0.0f);
        Vec p_ref = p, m_ref = m, v_ref = v;
        for (int t = 1; t <= 5; ++t) {
            Vec g = random_vec(size_t(n), 36 + uint32_t(t), -1e-2, 1e-2);
            g[0] = 0.0f;
            float bc1 = 1.0f - std::pow(b1, float(t)), bc2 = 1.0f - std::pow(b2, float(t));
            cpu_->adamw_step(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, bc1,
                             bc2);
            ref_adamw(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, lr, b1, b2, eps, wd,
                      bc1, bc2);
        }
        std::string what = " n=" + std::to_string(n);
        if (fused) {  // the normal (-O2/-O3) build: same operations, same order, same roundings
            expect_bitwise(p, p_ref, "adamw p" + what);
            expect_bitwise(m, m_ref, "adamw m" + what);
            expect_bitwise(v, v_ref, "adamw v" + what);
        } else {
            // -O0/-O1: unfused reference. p - step*q and m + (g - m)(1 - b1) can cancel, hence an
            // atol of a few ulp of the O(1e-3) update terms.
            expect_close(p, p_ref, 1e-6, 1e-9, "adamw p (unfused ref)" + what);
            expect_close(m, m_ref, 1e-5, 1e-9, "adamw m (unfused ref)" + what);
            expect_close(v, v_ref, 1e-6, 0, "adamw v (unfused ref)" + what);
        }
    }
}

TEST_F(Kernels, SumSquaresMatchesDoubleLoopForAnyThreadCount) {
    const int saved = omp_get_max_threads();
    for (int64_t n : {0, 1, 7, 1000, (1 << 20) + 3}) {
        Vec x = random_vec(size_t(n), 40, -3.0, 3.0);
        double want = 0;
        for (float f : x) want += double(f) * f;
        omp_set_num_threads(1);
        double one = cpu_->sum_squares(x.data(), n);
        omp_set_num_threads(2);
        double two = cpu_->sum_squares(x.data(), n);
        omp_set_num_threads(3);
        double three = cpu_->sum_squares(x.data(), n);
        omp_set_num_threads(saved);
        // double sums in another order: ~n * 1e-16 relative.
        EXPECT_NEAR(one, want, 1e-12 * want) << "n=" << n;
        EXPECT_EQ(std::bit_cast<uint64_t>(two), std::bit_cast<uint64_t>(one)) << "n=" << n;
        EXPECT_EQ(std::bit_cast<uint64_t>(three), std::bit_cast<uint64_t>(one)) << "n=" << n;
    }
}

// ---- reference backward vs central finite differences, in double ----

// d f / d theta[i] for every i, by central differences. With h = 1e-6 and f = O(10) the error is
// ~1e-9 (rounding) + ~1e-12 (truncation).
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

TEST(RefGradients, RmsNormMatchesFiniteDifferences) {
    const int N = 3, C = 5;
    const float eps = 1e-5f;
    DVec x = random_vec<double>(N * C, 50), w = random_vec<double>(C, 51, 0.5, 1.5);
    DVec r = random_vec<double>(N * C, 52), out(N * C), rstd(N);
    auto loss = [&] {
        ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
        return dot(r, out);
    };
    DVec gx = numeric_grad(x, loss), gw = numeric_grad(w, loss);
    loss();
    DVec px = random_vec<double>(N * C, 53), pw = random_vec<double>(C, 54);
    DVec d_x = px, d_w = pw;
    ref::rmsnorm_backward(d_x.data(), d_w.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
    expect_grad(d_x, px, gx, "rmsnorm d_x");
    expect_grad(d_w, pw, gw, "rmsnorm d_w");
}

TEST(RefGradients, LayerNormMatchesFiniteDifferences) {
    const int N = 3, C = 5;
    const float eps = 1e-5f;
    DVec x = random_vec<double>(N * C, 55, -1.0, 2.0), w = random_vec<double>(C, 56, 0.5, 1.5);
    DVec b = random_vec<double>(C, 57), r = random_vec<double>(N * C, 58);
    DVec out(N * C), mean(N), rstd(N);
    auto loss = [&] {
        ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C, eps);
        return dot(r, out);
    };
    DVec gx = numeric_grad(x, loss), gw = numeric_grad(w, loss), gb = numeric_grad(b, loss);
    loss();
    DVec px = random_vec<double>(N * C, 59), pw = random_vec<double>(C, 60);
    DVec pb = random_vec<double>(C, 61);
    DVec d_x = px, d_w = pw, d_b = pb;
    ref::layernorm_backward(d_x.data(), d_w.data(), d_b.data(), r.data(), x.data(), w.data(),
                            mean.data(), rstd.data(), N, C);
    expect_grad(d_x, px, gx, "layernorm d_x");
    expect_grad(d_w, pw, gw, "layernorm d_w");
    expect_grad(d_b, pb, gb, "layernorm d_b");
}

TEST(RefGradients, SwigluAndGeluMatchFiniteDifferences) {
    const int N = 3, F = 4;
    DVec gu = random_vec<double>(N * 2 * F, 62, -4.0, 4.0), r = random_vec<double>(N * F, 63);
    DVec out(N * F);
    auto swiglu = [&] {
        ref::swiglu_forward(out.data(), gu.data(), N, F);
        return dot(r, out);
    };
    DVec g = numeric_grad(gu, swiglu), d_gu(N * 2 * F), zero(N * 2 * F, 0.0);
    ref::swiglu_backward(d_gu.data(), r.data(), gu.data(), N, F);
    expect_grad(d_gu, zero, g, "swiglu d_gate_up");

    DVec x = random_vec<double>(N * F, 64, -4.0, 4.0), gout(N * F), d_x(N * F);
    auto gelu = [&] {
        ref::gelu_forward(gout.data(), x.data(), N * F);
        return dot(r, gout);
    };
    DVec gx = numeric_grad(x, gelu);
    ref::gelu_backward(d_x.data(), r.data(), x.data(), N * F);
    expect_grad(d_x, DVec(N * F, 0.0), gx, "gelu d_x");
}

TEST(RefGradients, CrossEntropyMatchesFiniteDifferences) {
    const int N = 4, V = 6;
    const float d_scale = 0.75f;  // the gradient is that of d_scale * sum of losses
    std::vector<int32_t> targets = {2, kIgnoreIndex, 0, 5};
    DVec logits = random_vec<double>(N * V, 65, -3.0, 3.0), losses(N);
    auto loss = [&] {
        ref::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
        return d_scale * (losses[0] + losses[1] + losses[2] + losses[3]);
    };
    DVec g = numeric_grad(logits, loss), d_logits = logits;
    ref::cross_entropy_forward_backward(d_logits.data(), losses.data(), targets.data(), N, V,
                                        d_scale);
    expect_grad(d_logits, DVec(N * V, 0.0), g, "cross_entropy d_logits");
    EXPECT_EQ(losses[1], 0.0);
}

TEST(RefGradients, EmbeddingsAndBiasMatchFiniteDifferences) {
    const int V = 4, C = 3, N = 5, B = 2, T = 3, ldy = 6;
    std::vector<int32_t> ids = {1, 3, 1, 0, 1};  // repeated ids accumulate
    DVec table = random_vec<double>(V * C, 66), r = random_vec<double>(N * C, 67), out(N * C);
    auto emb = [&] {
        ref::embedding_forward(out.data(), ids.data(), table.data(), N, C);
        return dot(r, out);
    };
    DVec g = numeric_grad(table, emb), pt = random_vec<double>(V * C, 68), d_table = pt;
    ref::embedding_backward(d_table.data(), r.data(), ids.data(), N, C);
    expect_grad(d_table, pt, g, "embedding d_table");

    DVec wpe = random_vec<double>(T * C, 69), base = random_vec<double>(B * T * C, 70);
    DVec rp = random_vec<double>(B * T * C, 71);
    auto pos = [&] {
        DVec o = base;
        ref::pos_embedding_forward(o.data(), wpe.data(), nullptr, B, T, C);
        return dot(rp, o);
    };
    DVec gp = numeric_grad(wpe, pos), pw = random_vec<double>(T * C, 72), d_wpe = pw;
    ref::pos_embedding_backward(d_wpe.data(), rp.data(), nullptr, B, T, C);
    expect_grad(d_wpe, pw, gp, "pos_embedding d_wpe");

    DVec bias = random_vec<double>(C, 73), y0 = random_vec<double>(N * ldy, 74);
    DVec ry = random_vec<double>(N * ldy, 75);
    auto fwd = [&] {
        DVec y = y0;
        ref::bias_forward(y.data(), bias.data(), N, C, ldy);
        return dot(ry, y);
    };
    DVec gb = numeric_grad(bias, fwd), pb = random_vec<double>(C, 76), d_b = pb;
    ref::bias_backward(d_b.data(), ry.data(), N, C, ldy);  // reads only the C valid columns
    expect_grad(d_b, pb, gb, "bias d_b");
}

// Packed rows (documents of 2, 1 and 2 positions; of 1 and 4): positions restart, so wpe rows 0
// and 1 collect gradient from several documents, 2 and 3 from the long document only, 4 none.
TEST(RefGradients, PackedPosEmbeddingMatchesFiniteDifferences) {
    const int B = 2, T = 5, C = 3;
    const std::vector<int32_t> starts = {0, 0, 2, 3, 3, 0, 1, 1, 1, 1};
    DVec wpe = random_vec<double>(T * C, 77), base = random_vec<double>(B * T * C, 78);
    DVec r = random_vec<double>(B * T * C, 79);
    auto pos = [&] {
        DVec o = base;
        ref::pos_embedding_forward(o.data(), wpe.data(), starts.data(), B, T, C);
        return dot(r, o);
    };
    DVec g = numeric_grad(wpe, pos), pw = random_vec<double>(T * C, 80), d_wpe = pw;
    ref::pos_embedding_backward(d_wpe.data(), r.data(), starts.data(), B, T, C);
    expect_grad(d_wpe, pw, g, "packed pos_embedding d_wpe");
    for (int c = 0; c < C; ++c) EXPECT_EQ(d_wpe[4 * C + c], pw[4 * C + c]);  // position 4 unused
}

}  // namespace
}  // namespace ete
