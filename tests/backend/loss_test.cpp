// tests/backend/loss_test.cpp — softmax cross-entropy on the CPU backend against the reference
// backend: the fused forward+backward (in place, into a separate f32 buffer, into a bf16/fp16
// buffer), the forward alone, and the vocab-parallel pieces (cross_entropy_stats and
// cross_entropy_backward) — checked against ref and, combined over two column blocks, against the
// full-row loss and gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"

namespace ete {
namespace loss_test {

using namespace backend_test;

struct CeCase {
    int N, V;
    std::string name() const { return " N=" + std::to_string(N) + " V=" + std::to_string(V); }
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
void ce_inputs(CeCase cs, FVec& logits, std::vector<int32_t>& targets) {
    logits = random_vec(size_t(cs.N) * cs.V, 33, -4.0, 4.0);
    for (int n = 0; n < cs.N; ++n)
        for (int v = 0; v < cs.V; ++v)
            logits[size_t(n) * cs.V + v] += 6.0f * v / cs.V + (n == 2 ? 1000.0f : 0.5f * n);
    targets = random_ids(cs.N, cs.V, 34);
    for (int n = 1; n < cs.N; n += 4) targets[size_t(n)] = kIgnoreIndex;
}

Mat m(FVec& v, int64_t rows, int64_t cols, int64_t ld = -1) {
    return host_mat(v, rows, cols, ld);
}

// Columns [c0, c0 + cols) of every row of logits (N, V).
DVec columns(const FVec& z, CeCase cs, int c0, int cols) {
    DVec r;
    for (int n = 0; n < cs.N; ++n)
        for (int v = c0; v < c0 + cols; ++v) r.push_back(z[size_t(n) * cs.V + v]);
    return r;
}

class Loss : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

// Gemma 2's final cap on a strided block (a vocab-parallel head's columns): y = cap tanh(z / cap)
// within tanh_fast's error plus the division and product (the CPU's fp32 ops), and d_cap =
// 1 - tanh² as tanh_fast gives it, within its own error plus the division's through the slope's
// derivative 2 |t| (1 - t²); softcap_backward is one fp32 product (u). Elements outside the block
// stay untouched.
TEST_F(Loss, SoftcapMatchesItsDefinition) {
    const int N = 5, V = 37, ld = 41;
    const float cap = 2.5f;
    FVec z = random_vec(size_t(N) * ld, 40, -12.0, 12.0), y = z, d_cap(z.size(), -7.0f);
    cpu_->softcap_forward(m(y, N, V, ld), m(d_cap, N, V, ld), cap);
    const double u = kUnitF32, e_t = kTanhFastRel + 2 * u;
    for (int n = 0; n < N; ++n)
        for (int c = 0; c < ld; ++c) {
            const size_t i = size_t(n) * ld + size_t(c);
            if (c >= V) {
                EXPECT_EQ(y[i], z[i]);
                EXPECT_EQ(d_cap[i], -7.0f);
                continue;
            }
            const double t = std::tanh(double(z[i]) / cap);
            EXPECT_NEAR(y[i], cap * t, (e_t + u) * std::fabs(cap * t)) << i;
            const double f = 1 - t * t, x = std::fabs(double(z[i]) / cap);
            EXPECT_NEAR(d_cap[i], f, kTanhFastRel * f + 2 * std::fabs(t) * f * u * x) << i;
        }
    FVec d = random_vec(z.size(), 41, -1.0, 1.0), want = d;
    cpu_->softcap_backward(m(d, N, V, ld), host_cmat(d_cap, N, V, ld));
    for (int n = 0; n < N; ++n)
        for (int c = 0; c < ld; ++c) {
            const size_t i = size_t(n) * ld + size_t(c);
            EXPECT_EQ(d[i], c < V ? want[i] * d_cap[i] : want[i]) << i;  // one rounding, exact
        }
    EXPECT_NE(error_of([&] {
                  cpu_->softcap_forward(m(y, N, V, ld), Mat{}, 0.0f);
              }).find("softcap_forward: cap 0: expected a finite number > 0"),
              std::string::npos);
}

TEST_F(Loss, CrossEntropyForwardBackwardMatchesRef) {
    const float d_scale = 0.37f;
    for (CeCase cs : ce_cases()) {
        FVec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        FVec grad = logits, grad_ref = logits, grad_sep(logits.size(), -7.0f), clobber = logits;
        FVec loss(size_t(cs.N), -1.0f), loss_ref(size_t(cs.N)), loss_sep(size_t(cs.N));
        Mat g = m(grad, cs.N, cs.V), gr = m(grad_ref, cs.N, cs.V);
        cpu_->cross_entropy_forward_backward(g, host_vec(loss), host_cvec(targets), d_scale, g);
        ref_->cross_entropy_forward_backward(gr, host_vec(loss_ref), host_cvec(targets), d_scale,
                                             gr);
        // exp_fast (5u) of z - max, fp32 chunk sums (gamma of a chunk of <= 640 terms), the row
        // in double, against double; the target's p - 1 cancels: bounds relative to the terms.
        const CeBound b =
            cross_entropy_bound(dvec(logits), targets, cs.N, cs.V, d_scale, Impl::kCpu);
        expect_within_bound(dvec(loss), dvec(loss_ref), b.loss, "ce loss" + cs.name(),
                            "ce loss F32");
        expect_within_bound(dvec(grad), dvec(grad_ref), b.grad, "ce d_logits" + cs.name(),
                            "ce d_logits F32");
        for (int n = 1; n < cs.N; n += 4) {  // ignored rows: loss 0, gradient exactly 0
            EXPECT_EQ(loss[size_t(n)], 0.0f);
            for (int v = 0; v < cs.V; ++v) ASSERT_EQ(grad[size_t(n) * cs.V + v], 0.0f) << cs.name();
        }
        // A separate f32 gradient buffer gets the in-place result, bit for bit.
        cpu_->cross_entropy_forward_backward(m(clobber, cs.N, cs.V), host_vec(loss_sep),
                                             host_cvec(targets), d_scale, m(grad_sep, cs.N, cs.V));
        expect_bitwise(grad_sep, grad, "ce separate f32 d_logits" + cs.name());
        expect_bitwise(loss_sep, loss, "ce loss with separate d_logits" + cs.name());
    }
}

// The head's backward GEMMs take 16-bit d_logits: the gradient is rounded once (the target's
// p - 1 is formed in f32 before rounding), strided views of wider buffers included.
TEST_F(Loss, CrossEntropyIntoSixteenBitGradientMatchesRef) {
    const float d_scale = 0.37f;
    for (DType t : {DType::BF16, DType::F16})
        for (CeCase cs : ce_cases()) {
            const std::string what = std::string(" ") + dname(t) + cs.name();
            FVec logits;
            std::vector<int32_t> targets;
            ce_inputs(cs, logits, targets);
            const DVec logits_d = dvec(logits);
            Buf z = Buf::of(DType::F32, logits, cs.N, cs.V, cs.V + 5), z_ref = z;
            // NaN where the op must write, -7 in the padding columns it must not touch
            Buf d = Buf::of(t, FVec(logits.size(), NAN), cs.N, cs.V, cs.V + 3), d_ref = d;
            FVec loss(size_t(cs.N)), loss_ref(size_t(cs.N));
            cpu_->cross_entropy_forward_backward(z.mat(), host_vec(loss), host_cvec(targets),
                                                 d_scale, d.mat());
            ref_->cross_entropy_forward_backward(z_ref.mat(), host_vec(loss_ref),
                                                 host_cvec(targets), d_scale, d_ref.mat());
            const CeBound b =
                cross_entropy_bound(logits_d, targets, cs.N, cs.V, d_scale, Impl::kCpu);
            expect_within_bound(dvec(loss), dvec(loss_ref), b.loss, "ce loss" + what,
                                "ce loss (16-bit grad)");
            expect_rounded_within(d, d_ref, b.grad, "ce d_logits" + what, "ce d_logits");
            expect_padding(d, -7.0f, "ce d_logits" + what);
            for (int n = 1; n < cs.N; n += 4)
                for (int v = 0; v < cs.V; ++v) ASSERT_EQ(d.at(n, v), 0.0) << "ignored row" << what;
        }
}

TEST_F(Loss, CrossEntropyForwardMatchesRefAndLeavesLogits) {
    for (CeCase cs : ce_cases()) {
        FVec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        FVec before = logits, loss(size_t(cs.N), -1.0f), loss_ref(size_t(cs.N));
        cpu_->cross_entropy_forward(host_vec(loss), m(logits, cs.N, cs.V), host_cvec(targets));
        ref_->cross_entropy_forward(host_vec(loss_ref), m(logits, cs.N, cs.V), host_cvec(targets));
        expect_within_bound(
            dvec(loss), dvec(loss_ref),  // as above
            cross_entropy_bound(dvec(logits), targets, cs.N, cs.V, 1.0, Impl::kCpu).loss,
            "ce forward loss" + cs.name());
        expect_bitwise(logits, before, "ce forward logits" + cs.name());
    }
}

TEST_F(Loss, CrossEntropyRejectsBadTargetsAndDtypes) {
    FVec logits(2 * 5, 0.0f), loss(2);
    std::vector<int32_t> targets = {1, 5};
    Mat z = m(logits, 2, 5);
    for (Backend* be : {cpu_.get(), ref_.get()}) {
        targets = {1, 5};
        EXPECT_THROW(be->cross_entropy_forward(host_vec(loss), z, host_cvec(targets)), Error)
            << be->name();
        targets = {-1, 0};
        EXPECT_THROW(
            be->cross_entropy_forward_backward(z, host_vec(loss), host_cvec(targets), 1.0f, z),
            Error)
            << be->name();
    }
    targets = {0, 1};
    std::vector<uint16_t> z16(10);
    Mat bf16_logits{z16.data(), DType::BF16, 2, 5};
    EXPECT_THROW(cpu_->cross_entropy_forward(host_vec(loss), bf16_logits, host_cvec(targets)),
                 Error);  // logits are F32 by the precision policy
    Mat aliased{logits.data(), DType::BF16, 2, 5};
    EXPECT_THROW(
        cpu_->cross_entropy_forward_backward(z, host_vec(loss), host_cvec(targets), 1.0f, aliased),
        Error);  // in place only in F32
}

// ---- the vocab-parallel pieces ----

// Targets of one block of columns [first, first + cols): a local column where the block holds
// the target, -1 where another block does, the ignore index where ignored (as the model's head
// maps them); a few out-of-range values besides, which stats must read as "not here".
std::vector<int32_t> block_targets(const std::vector<int32_t>& t, int first, int cols) {
    std::vector<int32_t> r(t.size());
    for (size_t n = 0; n < t.size(); ++n)
        r[n] = t[n] == kIgnoreIndex                   ? kIgnoreIndex
               : t[n] >= first && t[n] < first + cols ? t[n] - first
                                                      : -1;
    return r;
}

TEST_F(Loss, CrossEntropyStatsMatchRef) {
    for (CeCase cs : ce_cases()) {
        FVec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        for (int n = 3; n < cs.N; n += 7) targets[size_t(n)] = n % 2 ? -1 : cs.V + n;  // elsewhere
        FVec before = logits, lse(size_t(cs.N)), zt(size_t(cs.N), -7.0f);
        FVec lse_ref(size_t(cs.N)), zt_ref(size_t(cs.N));
        cpu_->cross_entropy_stats(host_vec(lse), host_vec(zt), m(logits, cs.N, cs.V),
                                  host_cvec(targets));
        ref_->cross_entropy_stats(host_vec(lse_ref), host_vec(zt_ref), m(logits, cs.N, cs.V),
                                  host_cvec(targets));
        // the online softmax of the fused loss (chunk sums in float, row sum and log in double)
        expect_within_bound(dvec(lse), dvec(lse_ref),
                            ce_lse_bound(dvec(logits), cs.N, cs.V, Impl::kCpu),
                            "ce stats lse" + cs.name(), "ce stats lse F32");
        expect_bitwise(zt, zt_ref, "ce stats target logit" + cs.name());  // a copy, or 0
        for (int n = 0; n < cs.N; ++n) {
            const int t = targets[size_t(n)];
            EXPECT_EQ(zt[size_t(n)], t >= 0 && t < cs.V ? logits[size_t(n) * cs.V + t] : 0.0f);
        }
        expect_bitwise(logits, before, "ce stats leave logits" + cs.name());
    }
    // A block without columns: lse = -inf, target logit 0.
    FVec none(3), lse(3), zt(3);
    std::vector<int32_t> tg = {-1, kIgnoreIndex, 0};
    for (Backend* be : {cpu_.get(), ref_.get()}) {
        be->cross_entropy_stats(host_vec(lse), host_vec(zt), m(none, 3, 0), host_cvec(tg));
        for (int n = 0; n < 3; ++n) {
            EXPECT_EQ(lse[size_t(n)], -INFINITY) << be->name();
            EXPECT_EQ(zt[size_t(n)], 0.0f) << be->name();
        }
    }
}

// cross_entropy_backward from a given lse: in place, into a separate f32 buffer (bit-identical),
// and into 16-bit buffers (rounded once), against ref.
TEST_F(Loss, CrossEntropyBackwardMatchesRef) {
    const float d_scale = 0.37f;
    for (CeCase cs : ce_cases()) {
        FVec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        FVec lse(size_t(cs.N)), zt(size_t(cs.N));
        ref_->cross_entropy_stats(host_vec(lse), host_vec(zt), m(logits, cs.N, cs.V),
                                  host_cvec(targets));
        FVec d(logits.size(), -7.0f), d_ref(logits.size()), in_place = logits;
        cpu_->cross_entropy_backward(m(d, cs.N, cs.V), m(logits, cs.N, cs.V), host_cvec(lse),
                                     host_cvec(targets), d_scale);
        ref_->cross_entropy_backward(m(d_ref, cs.N, cs.V), m(logits, cs.N, cs.V), host_cvec(lse),
                                     host_cvec(targets), d_scale);
        // exp_fast (5u) of the fp32 difference z - lse (u |z - lse|), times d_scale, vs double.
        const DVec bound =
            ce_backward_bound(dvec(logits), dvec(lse), targets, cs.N, cs.V, d_scale, Impl::kCpu);
        expect_within_bound(dvec(d), dvec(d_ref), bound, "ce backward" + cs.name(),
                            "ce backward F32");
        Mat ip = m(in_place, cs.N, cs.V);
        cpu_->cross_entropy_backward(ip, ip, host_cvec(lse), host_cvec(targets), d_scale);
        expect_bitwise(in_place, d, "ce backward in place" + cs.name());
        for (DType t : {DType::BF16, DType::F16}) {
            Buf d16 = Buf::of(t, FVec(logits.size(), NAN), cs.N, cs.V, cs.V + 3), d16_ref = d16;
            cpu_->cross_entropy_backward(d16.mat(), m(logits, cs.N, cs.V), host_cvec(lse),
                                         host_cvec(targets), d_scale);
            ref_->cross_entropy_backward(d16_ref.mat(), m(logits, cs.N, cs.V), host_cvec(lse),
                                         host_cvec(targets), d_scale);
            expect_rounded_within(d16, d16_ref, bound,
                                  std::string("ce backward ") + dname(t) + cs.name(),
                                  "ce backward");
            expect_padding(d16, -7.0f, std::string("ce backward ") + dname(t) + cs.name());
        }
    }
}

// Two column blocks [0, V1) and [V1, V) of strided views, as two vocab-parallel ranks hold them:
// lse = m + log(e^(lse1 - m) + e^(lse2 - m)) and the owner's target logit give the full-row loss,
// and each block's backward with that lse gives its columns of the full-row gradient.
TEST_F(Loss, CrossEntropyOfTwoColumnBlocksIsTheFullRowCrossEntropy) {
    const float d_scale = 0.37f;
    for (CeCase cs : ce_cases()) {
        FVec logits;
        std::vector<int32_t> targets;
        ce_inputs(cs, logits, targets);
        const int V1 = cs.V / 2;  // V = 1: the first block has no columns
        FVec z = logits, loss_full(size_t(cs.N)), grad_full = logits;
        Mat gf = m(grad_full, cs.N, cs.V);
        cpu_->cross_entropy_forward_backward(gf, host_vec(loss_full), host_cvec(targets), d_scale,
                                             gf);
        Mat zm = m(z, cs.N, cs.V);
        Mat blocks[2] = {zm.col_slice(0, V1), zm.col_slice(V1, cs.V - V1)};
        std::vector<int32_t> tg[2] = {block_targets(targets, 0, V1),
                                      block_targets(targets, V1, cs.V - V1)};
        FVec lse[2] = {FVec(size_t(cs.N)), FVec(size_t(cs.N))};
        FVec zt[2] = {FVec(size_t(cs.N)), FVec(size_t(cs.N))};
        for (int k = 0; k < 2; ++k)
            cpu_->cross_entropy_stats(host_vec(lse[k]), host_vec(zt[k]), blocks[k],
                                      host_cvec(tg[k]));
        FVec lse_global(size_t(cs.N)), loss(size_t(cs.N));
        // Each block's lse (fp32, the precision policy) is within its stats bound; their
        // log-sum-exp in double moves by at most the larger, then rounds into fp32 (u |l|).
        const DVec lb[2] = {
            ce_lse_bound(columns(logits, cs, 0, V1), cs.N, V1, Impl::kCpu),
            ce_lse_bound(columns(logits, cs, V1, cs.V - V1), cs.N, cs.V - V1, Impl::kCpu)};
        DVec lse_err(size_t(cs.N), 0.0);
        for (int n = 0; n < cs.N; ++n) {
            if (targets[size_t(n)] == kIgnoreIndex) continue;
            const double mx = std::max(lse[0][size_t(n)], lse[1][size_t(n)]);
            const double l =
                mx + std::log(std::exp(lse[0][size_t(n)] - mx) + std::exp(lse[1][size_t(n)] - mx));
            lse_global[size_t(n)] = float(l);
            loss[size_t(n)] = float(l - zt[0][size_t(n)] - zt[1][size_t(n)]);
            lse_err[size_t(n)] = std::max(lb[0][size_t(n)], lb[1][size_t(n)]) +
                                 testing::gamma_worst(8, kUnitF64) * (std::fabs(l) + 1);
        }
        // The full row's loss (its own bound) and the blocks' (their lse's, then the fp32
        // rounding of l - z_t, u |loss|), against the exact loss.
        const CeBound full =
            cross_entropy_bound(dvec(logits), targets, cs.N, cs.V, d_scale, Impl::kCpu);
        DVec loss_bound(size_t(cs.N));
        for (size_t n = 0; n < loss_bound.size(); ++n)
            loss_bound[n] = full.loss[n] + lse_err[n] + kUnitF32 * std::fabs(loss[n]);
        expect_within_bound(dvec(loss), dvec(loss_full), loss_bound, "two-block loss" + cs.name(),
                            "ce two-block loss F32");

        FVec grad(logits.size(), -7.0f);
        Mat gm = m(grad, cs.N, cs.V);
        for (int k = 0; k < 2; ++k)
            cpu_->cross_entropy_backward(gm.col_slice(k ? V1 : 0, k ? cs.V - V1 : V1), blocks[k],
                                         host_cvec(lse_global), host_cvec(tg[k]), d_scale);
        // Each block's backward from the fp32 lse_global (its own bound), whose distance from
        // the exact lse (lse_err + u |l|) moves p = e^(z - lse) by as much relative; the fused
        // full-row gradient within its bound.
        const DVec bwd = ce_backward_bound(dvec(logits), dvec(lse_global), targets, cs.N, cs.V,
                                           d_scale, Impl::kCpu);
        DVec grad_bound(grad.size(), 0.0);  // ignored rows: exact zeros
        for (int n = 0; n < cs.N; ++n)
            for (int v = 0; v < cs.V && targets[size_t(n)] != kIgnoreIndex; ++v) {
                const size_t i = size_t(n) * cs.V + v;
                const double l = lse_global[size_t(n)];
                const double p = std::exp(double(logits[i]) - l);
                grad_bound[i] = full.grad[i] + bwd[i] +
                                d_scale * p * (lse_err[size_t(n)] + kUnitF32 * std::fabs(l));
            }
        expect_within_bound(dvec(grad), dvec(grad_full), grad_bound,
                            "two-block gradient" + cs.name(), "ce two-block gradient F32");
    }
}

}  // namespace loss_test
}  // namespace ete
