// Hooks on a Norm's output and a Linear's input and output (nn/act_hook.h): each is applied
// where the module says, with the state of its call, and in backward to the right gradient.
// The test hook clamps to [-c, c] and keeps a mask (1 inside, 0 outside) — QAT's fake quantizer
// with its straight-through mask, in miniature — so a hook applied in the wrong place, twice, or
// with another call's state gives different numbers. Every expectation is a bit equality: the
// module with a hook must do exactly what the module without one does, then the hook.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/rng.h"
#include "ete/nn/linear.h"
#include "ete/nn/norm.h"
#include "test_util.h"

namespace ete {
namespace {

using testing::host_cmat;
using testing::host_cvec;
using testing::host_mat;
using testing::host_vec;
using FVec = std::vector<float>;

FVec values(size_t n, uint64_t seed, float lo, float hi) {
    CounterRng rng(seed, "act_hook_test");
    FVec v(n);
    for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
    return v;
}

// Clamps x to [-c, c]; state (F32, one per element) = 1 inside, 0 clamped. Backward: d_x =
// d_y · state. Counts its calls.
class ClampHook final : public ActHook {
  public:
    explicit ClampHook(float c) : c_(c) {}
    void forward(Mat x, Vec state) const override {
        ++forwards;
        auto* s = static_cast<float*>(state.data);
        for (int64_t r = 0; r < x.rows; ++r)
            for (int64_t j = 0; j < x.cols; ++j) {
                float& v = static_cast<float*>(x.data)[r * x.ld + j];
                s[r * x.cols + j] = std::abs(v) <= c_ ? 1.0f : 0.0f;
                v = std::clamp(v, -c_, c_);
            }
    }
    void backward(Mat d_x, CMat d_y, CVec state) const override {
        ++backwards;
        const auto* s = static_cast<const float*>(state.data);
        for (int64_t r = 0; r < d_x.rows; ++r)
            for (int64_t j = 0; j < d_x.cols; ++j)
                static_cast<float*>(d_x.data)[r * d_x.ld + j] =
                    static_cast<const float*>(d_y.data)[r * d_y.ld + j] * s[r * d_x.cols + j];
    }
    bool grad_active() const override { return true; }
    mutable int forwards = 0, backwards = 0;

  private:
    float c_;
};

// What the hook does, written out: clamp, and the mask.
FVec clamped(FVec v, float c, FVec* mask) {
    mask->assign(v.size(), 0.0f);
    for (size_t i = 0; i < v.size(); ++i) {
        (*mask)[i] = std::abs(v[i]) <= c ? 1.0f : 0.0f;
        v[i] = std::clamp(v[i], -c, c);
    }
    return v;
}

FVec masked(FVec v, const FVec& mask) {
    for (size_t i = 0; i < v.size(); ++i) v[i] *= mask[i];
    return v;
}

TEST(ActHook, NormOutputHookClampsTheOutputAndMasksItsGradient) {
    auto be = make_cpu_backend();
    const int64_t N = 5, C = 16;
    const float c = 0.8f;  // RMSNorm outputs of these inputs reach about ±2: both sides occur
    const FVec x = values(size_t(N * C), 1, -3, 3), dy = values(size_t(N * C), 2, -1, 1),
               w = values(size_t(C), 3, 0.5f, 1.5f);
    const Norm plain({host_cvec(w), {}, {}, {}}, false, 1e-6f);
    Norm hooked = plain;
    ClampHook hook(c);
    hooked.set_output_hook(&hook);
    FVec out0(x.size()), rstd0(static_cast<size_t>(N)), out1(x.size()),
        rstd1(static_cast<size_t>(N)), state(x.size());
    plain.forward(*be, host_mat(out0, N, C), Vec{}, host_vec(rstd0), host_cmat(x, N, C));
    hooked.forward(*be, host_mat(out1, N, C), Vec{}, host_vec(rstd1), host_cmat(x, N, C),
                   host_vec(state));
    FVec mask;
    EXPECT_EQ(out1, clamped(out0, c, &mask));
    EXPECT_EQ(state, mask);
    EXPECT_GT(std::count(mask.begin(), mask.end(), 0.0f), 0);
    EXPECT_GT(std::count(mask.begin(), mask.end(), 1.0f), 0);
    // Backward: d_out passes the mask first (in place), then the norm's backward.
    FVec d_out = dy, dx0(x.size(), 0.0f), dx1(x.size(), 0.0f);
    FVec d_masked = masked(dy, mask);
    plain.backward(*be, host_mat(dx0, N, C), host_mat(d_masked, N, C), host_cmat(x, N, C), CVec{},
                   host_cvec(rstd0));
    hooked.backward(*be, host_mat(dx1, N, C), host_mat(d_out, N, C), host_cmat(x, N, C), CVec{},
                    host_cvec(rstd1), host_cvec(state));
    EXPECT_EQ(d_out, d_masked);
    EXPECT_EQ(dx1, dx0);
    EXPECT_EQ(hook.forwards, 1);
    EXPECT_EQ(hook.backwards, 1);
}

TEST(ActHook, LinearHooksSitOnTheWholeOutputAndOnTheInputTheProductsRead) {
    auto be = make_cpu_backend();
    const int64_t N = 4, in = 12, out = 6;
    const float c = 0.5f;
    FVec x = values(size_t(N * in), 4, -1, 1), w = values(size_t(out * in), 5, -0.5f, 0.5f),
         b = values(size_t(out), 6, -0.5f, 0.5f), dw(w.size(), 0.0f), db(b.size(), 0.0f);
    ClampHook in_hook(c), out_hook(c);
    Linear lin({host_cmat(w, out, in), nullptr, host_mat(dw, out, in), host_cvec(b), host_vec(db)});
    const Linear plain = lin;
    lin.set_hooks(&in_hook, &out_hook);
    // Input hook: in place on the buffer the products then read.
    FVec xq = x, in_state(x.size()), in_mask;
    lin.forward_input_hook(host_mat(xq, N, in), host_vec(in_state));
    EXPECT_EQ(xq, clamped(x, c, &in_mask));
    EXPECT_EQ(in_state, in_mask);
    // Output hook: on x·Wᵀ + b as a whole.
    FVec y0(size_t(N * out)), y1(y0.size()), out_state(y0.size()), out_mask;
    plain.forward(*be, host_mat(y0, N, out), host_cmat(xq, N, in));
    lin.forward(*be, host_mat(y1, N, out), host_cmat(xq, N, in), false, Mat{}, nullptr,
                host_vec(out_state));
    EXPECT_EQ(y1, clamped(y0, c, &out_mask));
    EXPECT_EQ(out_state, out_mask);
    EXPECT_GT(std::count(out_mask.begin(), out_mask.end(), 0.0f), 0);
    // Backward: the input hook masks d_x.
    const FVec dy = values(y0.size(), 7, -1, 1);
    FVec dx(x.size()), dx0(x.size());
    plain.backward(*be, host_mat(dx0, N, in), host_cmat(dy, N, out), host_cmat(xq, N, in));
    lin.backward(*be, host_mat(dx, N, in), host_cmat(dy, N, out), host_cmat(xq, N, in));
    lin.backward_input_hook(host_mat(dx, N, in), host_cvec(in_state));
    EXPECT_EQ(dx, masked(dx0, in_mask));
    EXPECT_EQ(in_hook.forwards, 1);
    EXPECT_EQ(out_hook.forwards, 1);
    EXPECT_EQ(in_hook.backwards, 1);
    EXPECT_EQ(out_hook.backwards, 0);  // the caller passes d_y through the output hook
}

}  // namespace
}  // namespace ete
