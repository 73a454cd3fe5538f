// tests/backend/attention_test.cpp — the CPU backend's f32 RoPE and flash attention against the
// reference backend, and the reference's own gradients against finite differences in double (the
// reference backend computes in double on F64 views); unpacked rows and packed ones
// (AttnDims::doc_start: several documents per row).
//
// Bounds. The reference accumulates in double (and its backward adds each term into the fp32
// d_qkv); the CPU kernels accumulate in fp32 (D products for a score, up to T terms for an output,
// exp2 by a polynomial within 9u). Each element is held to the error estimate of both
// computations from the magnitudes of its terms (backend_test_util.h attention_*_bound), so
// entries that cancel to near zero get the bound of their terms, not of their value.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_bounds.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"
#include "test_build.h"
#include "test_util.h"

namespace ete {
namespace {

using namespace backend_test;

Backend& cpu_be() {
    static std::unique_ptr<Backend> be = make_cpu_backend();
    return *be;
}
Backend& ref_be() {
    static std::unique_ptr<Backend> be = make_ref_backend();
    return *be;
}

// The views of one attention call over host vectors (f32, or f64 for the reference in double).
template <typename T>
void attn_forward(Backend& be, std::vector<T>& out, std::vector<T>& lse, const std::vector<T>& qkv,
                  const AttnDims& d, float scale) {
    const int64_t N = int64_t(d.B) * d.T;
    be.attention_forward(host_mat(out, N, int64_t(d.H) * d.D), host_vec(lse),
                         host_cmat(qkv, N, d.qkv_stride()), d, scale);
}
template <typename T>
void attn_backward(Backend& be, std::vector<T>& d_qkv, const std::vector<T>& d_out,
                   const std::vector<T>& out, const std::vector<T>& lse, const std::vector<T>& qkv,
                   const AttnDims& d, float scale) {
    const int64_t N = int64_t(d.B) * d.T, HD = int64_t(d.H) * d.D;
    be.attention_backward(host_mat(d_qkv, N, d.qkv_stride()), host_cmat(d_out, N, HD),
                          host_cmat(out, N, HD), host_cvec(lse), host_cmat(qkv, N, d.qkv_stride()),
                          d, scale);
}
// RoPE in place, sign +1 forward, -1 backward (the inverse rotation).
template <typename T>
void rope(Backend& be, std::vector<T>& x, const std::vector<T>& cos, const std::vector<T>& sin,
          const AttnDims& d, int sign) {
    const Mat xm = host_mat(x, int64_t(d.B) * d.T, d.qkv_stride());
    const CMat c = host_cmat(cos, int64_t(cos.size()) / (d.D / 2), d.D / 2);
    const CMat s = host_cmat(sin, int64_t(sin.size()) / (d.D / 2), d.D / 2);
    sign > 0 ? be.rope_forward(xm, c, s, d) : be.rope_backward(xm, c, s, d);
}

struct AttnCase {
    AttnDims d;
    float scale;
    std::vector<float> qkv, d_out;
    size_t qkv_size() const { return size_t(d.B) * d.T * d.qkv_stride(); }
    size_t out_size() const { return size_t(d.B) * d.T * d.H * d.D; }
    size_t lse_size() const { return size_t(d.B) * d.H * d.T; }
};

AttnCase make_case(AttnDims d, uint32_t seed, float scale = 0) {
    AttnCase c{d, scale > 0 ? scale : float(1.0 / std::sqrt(double(d.D))), {}, {}};
    c.qkv = random_vec(c.qkv_size(), seed);
    c.d_out = random_vec(c.out_size(), seed + 1);
    return c;
}

// Each [start, end) document of a doc_start row (T positions).
std::vector<std::pair<int, int>> documents(const int32_t* s, int T) {
    std::vector<std::pair<int, int>> docs;
    for (int t = 0; t < T; ++t)
        if (s[t] == t) docs.emplace_back(t, T);
    for (size_t k = 0; k + 1 < docs.size(); ++k) docs[k].second = docs[k + 1].first;
    return docs;
}

// Runs the CPU forward and backward and compares out, lse and each part of d_qkv with ref.
// d_qkv starts as NaN so an element the backward forgets to write fails the comparison.
void expect_cpu_matches_ref(const AttnCase& c) {
    SCOPED_TRACE(describe(c.d) + fmt::format(" scale={}", c.scale));
    std::vector<float> out(c.out_size()), lse(c.lse_size());
    std::vector<float> out_ref(out.size()), lse_ref(lse.size());
    attn_forward(cpu_be(), out, lse, c.qkv, c.d, c.scale);
    attn_forward(ref_be(), out_ref, lse_ref, c.qkv, c.d, c.scale);
    const AttnFwdBound fb = attention_forward_bound(dvec(c.qkv), c.d, c.scale, Impl::kCpu);
    expect_within_bound(dvec(out), dvec(out_ref), fb.out, "attention out", "attention out F32");
    expect_within_bound(dvec(lse), dvec(lse_ref), fb.lse, "attention lse", "attention lse F32");

    std::vector<float> d_qkv(c.qkv_size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> d_qkv_ref(c.qkv_size());
    attn_backward(cpu_be(), d_qkv, c.d_out, out_ref, lse_ref, c.qkv, c.d, c.scale);
    attn_backward(ref_be(), d_qkv_ref, c.d_out, out_ref, lse_ref, c.qkv, c.d, c.scale);
    const DVec bb = attention_backward_bound(dvec(c.qkv), dvec(c.d_out), dvec(out_ref),
                                             dvec(lse_ref), c.d, c.scale, Impl::kCpu)
                        .total();
    for (Part p : {Part::kQ, Part::kK, Part::kV}) {
        SCOPED_TRACE(p == Part::kQ ? "d_q" : p == Part::kK ? "d_k" : "d_v");
        expect_within_bound(dvec(part_of(d_qkv, c.d, p)), dvec(part_of(d_qkv_ref, c.d, p)),
                            part_of(bb, c.d, p), "attention d_qkv", "attention d_qkv F32");
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

// The benchmark model's shape (B=8, T=256, H=8, KV=4, D=64) at full size. A numerical check (the
// awkward shapes above cover the bounds): the sanitizer build skips it, where it took 38 s.
TEST(AttentionCpu, MatchesRefAtBenchShape) {
    if (testing::under_sanitizers())
        GTEST_SKIP() << "numerical check at the bench shape; runs in the unsanitized suite";
    expect_cpu_matches_ref(make_case({8, 256, 8, 4, 64}, 99, 0.125f));
}

// Forward, backward: out, lse and d_qkv of one case, concatenated.
std::vector<float> run_cpu(const AttnCase& c, const AttnDims& d) {
    std::vector<float> out(c.out_size()), lse(c.lse_size()), d_qkv(c.qkv_size());
    attn_forward(cpu_be(), out, lse, c.qkv, d, c.scale);
    attn_backward(cpu_be(), d_qkv, c.d_out, out, lse, c.qkv, d, c.scale);
    out.insert(out.end(), lse.begin(), lse.end());
    out.insert(out.end(), d_qkv.begin(), d_qkv.end());
    return out;
}

// Every output element is owned by one work item in a fixed order, so the thread count cannot
// change a single bit (a race on dK/dV would most likely show up here as a difference).
TEST(AttentionCpu, ResultsIndependentOfThreadCount) {
    AttnCase c = make_case({2, 97, 8, 2, 24}, 5);
    auto run = [&](int threads) {
        omp_set_num_threads(threads);
        return run_cpu(c, c.d);
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
    std::vector<float> out(c.out_size()), lse(c.lse_size()), out2(out.size()), lse2(lse.size());
    attn_forward(cpu_be(), out, lse, c.qkv, d, c.scale);
    float* last = c.qkv.data() + size_t(d.T - 1) * d.qkv_stride();
    for (int e = d.H * d.D; e < d.qkv_stride(); ++e) last[e] += 0.5f;
    attn_forward(cpu_be(), out2, lse2, c.qkv, d, c.scale);
    const size_t row = size_t(d.H) * d.D;
    EXPECT_TRUE(std::equal(out.begin(), out.end() - long(row), out2.begin()));
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
    std::vector<float> out(c.out_size()), lse(c.lse_size()), d_qkv(c.qkv_size(), NAN);
    attn_forward(cpu_be(), out, lse, c.qkv, d, c.scale);
    attn_backward(cpu_be(), d_qkv, c.d_out, out, lse, c.qkv, d, c.scale);
    const AttnFwdBound fb = attention_forward_bound(dvec(c.qkv), d, c.scale, Impl::kCpu);
    // From the forward's own out (v exactly) and lse: dP and D_i are the same products, so d_q
    // and d_k are 0 up to the backward's rounding; p = e^(s - lse) is 1 up to lse's own error.
    const DVec bb = attention_backward_bound(dvec(c.qkv), dvec(c.d_out), dvec(out), dvec(lse), d,
                                             c.scale, Impl::kCpu)
                        .kernel;
    for (int b = 0; b < d.B; ++b) {
        const float* x = c.qkv.data() + size_t(b) * S;
        const float* dx = d_qkv.data() + size_t(b) * S;
        const double* bound = bb.data() + size_t(b) * S;
        std::vector<double> p(size_t(d.H));
        for (int h = 0; h < d.H; ++h) {
            const int kv = h / G;
            double qk = 0;
            for (int e = 0; e < d.D; ++e) {
                qk += double(x[h * d.D + e]) * x[(d.H + kv) * d.D + e];
                EXPECT_EQ(out[(size_t(b) * d.H + h) * d.D + e], x[(d.H + d.KV + kv) * d.D + e]);
                EXPECT_NEAR(dx[h * d.D + e], 0.0, bound[h * d.D + e]);
            }
            const size_t l = size_t(b) * d.H + h;
            EXPECT_NEAR(lse[l], c.scale * qk, fb.lse[l]);
            p[size_t(h)] = std::exp(c.scale * qk - lse[l]);
        }
        for (int kv = 0; kv < d.KV; ++kv)
            for (int e = 0; e < d.D; ++e) {
                double dv = 0, p_err = 0;
                for (int g = 0; g < G; ++g) {
                    const double dy = c.d_out[(size_t(b) * d.H + kv * G + g) * d.D + e];
                    dv += dy;
                    p_err += std::fabs(p[size_t(kv * G + g)] - 1) * std::fabs(dy);
                }
                EXPECT_NEAR(dx[(d.H + kv) * d.D + e], 0.0, bound[(d.H + kv) * d.D + e]);
                EXPECT_NEAR(dx[(d.H + d.KV + kv) * d.D + e], dv,
                            bound[(d.H + d.KV + kv) * d.D + e] + p_err);
            }
    }
}

// The last key is seen by the last query only (everything else is masked): its d_v is
// sum_h P(T-1, T-1) dO(T-1, h) and its d_k is scale * sum_h dS(T-1, T-1) q(T-1, h), computed here
// in double from the saved lse. T = 33 and 65 put that key alone in a partial key tile. Bounds:
// the backward's estimate from that out and lse (its reference part, for fp32 running sums,
// covers these double ones).
TEST(AttentionCpu, LastKeyGradientClosedForm) {
    for (int T : {33, 65}) {
        AttnDims d{1, T, 4, 2, 16};
        SCOPED_TRACE(describe(d));
        AttnCase c = make_case(d, 31u + unsigned(T));
        const int G = d.H / d.KV, S = d.qkv_stride();
        std::vector<float> out(c.out_size()), lse(c.lse_size()), d_qkv(c.qkv_size());
        attn_forward(cpu_be(), out, lse, c.qkv, d, c.scale);
        attn_backward(cpu_be(), d_qkv, c.d_out, out, lse, c.qkv, d, c.scale);
        const DVec bb = attention_backward_bound(dvec(c.qkv), dvec(c.d_out), dvec(out), dvec(lse),
                                                 d, c.scale, Impl::kCpu)
                            .total();
        const double* bound = bb.data() + size_t(T - 1) * S;
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
                EXPECT_NEAR(dx[(d.H + kv) * d.D + e], dk[e], bound[(d.H + kv) * d.D + e]);
                EXPECT_NEAR(dx[(d.H + d.KV + kv) * d.D + e], dv[e],
                            bound[(d.H + d.KV + kv) * d.D + e]);
            }
        }
    }
}

// Packed rows, cpu vs ref: every tile kind (skipped, doc-masked, causal, unmasked) over GQA and
// plain heads, odd T (131 crosses every tile size; 67 and 33 cut the packings short).
TEST(AttentionCpuPacked, MatchesRefWithAwkwardDocuments) {
    const int heads[3][2] = {{4, 4}, {4, 2}, {8, 2}};
    uint32_t seed = 301;
    for (int T : {131, 67, 33})
        for (int D : {16, 24, 64})
            for (auto& hk : heads) {
                AttnCase c = make_case({4, T, hk[0], hk[1], D}, seed++);
                std::vector<int32_t> starts = starts_of(kAwkwardRows, T);
                c.d.doc_start = host_cvec(starts);
                expect_cpu_matches_ref(c);
            }
}

// Sliding windows (AttnDims::window), cpu vs ref, alone and over packed rows: windows of one key,
// inside one tile, the size of a tile, across tiles, and as long as the row (no effect), so every
// tile kind meets a window start: skipped before it, masked across it, whole after it.
TEST(AttentionCpuWindow, MatchesRefWithAndWithoutDocuments) {
    const int heads[2][2] = {{4, 2}, {8, 2}};
    uint32_t seed = 701;
    for (int T : {131, 33})
        for (int window : {1, 5, 32, 33, 70, T})
            for (bool packed : {false, true})
                for (auto& hk : heads) {
                    AttnCase c = make_case({4, T, hk[0], hk[1], 24}, seed++);
                    std::vector<int32_t> starts = starts_of(kAwkwardRows, T);
                    if (packed) c.d.doc_start = host_cvec(starts);
                    c.d.window = window;
                    expect_cpu_matches_ref(c);
                }
}

// Soft-capped scores (Gemma 2), cpu vs ref, over windows and packed rows: caps that bend the
// scores hard (0.5: |s| up to ~3 here) and barely (50), bounded by the cap terms of
// attention_forward_bound and attention_backward_bound.
TEST(AttentionCpuSoftcap, MatchesRefWithWindowsAndDocuments) {
    uint32_t seed = 801;
    for (float cap : {0.5f, 50.0f})
        for (int window : {0, 5, 40})
            for (bool packed : {false, true}) {
                AttnCase c = make_case({4, 67, 4, 2, 24}, seed++);
                std::vector<int32_t> starts = starts_of(kAwkwardRows, 67);
                if (packed) c.d.doc_start = host_cvec(starts);
                c.d.window = window;
                c.d.softcap = cap;
                expect_cpu_matches_ref(c);
            }
}

// A cap bends the output (scores of |s| ~ 2 under a cap of 1); a negative one is refused.
TEST(AttentionCpuSoftcap, CapBendsTheScoresAndANegativeCapIsRefused) {
    AttnCase c = make_case({2, 40, 4, 2, 16}, 851, 2.0f);
    std::vector<float> out(c.out_size()), lse(c.lse_size()), out_c(out.size()), lse_c(lse.size());
    attn_forward(cpu_be(), out, lse, c.qkv, c.d, c.scale);
    c.d.softcap = 1.0f;
    attn_forward(cpu_be(), out_c, lse_c, c.qkv, c.d, c.scale);
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i)
        diff = std::max(diff, double(std::fabs(out[i] - out_c[i])));
    EXPECT_GT(diff, 1e-3);
    c.d.softcap = -1.0f;
    EXPECT_NE(error_of([&] {
                  attn_forward(cpu_be(), out_c, lse_c, c.qkv, c.d, c.scale);
              }).find("softcap -1 must be finite and >= 0"),
              std::string::npos);
}

// The definition on the reference: query i over keys [i - W + 1, i] equals a row of its own that
// holds only those keys (positions in the row do not matter to attention: RoPE came before it).
TEST(AttentionRefWindow, EachQueryMatchesItsWindowAsARow) {
    const int T = 12, W = 4;
    AttnCase c = make_case({1, T, 4, 2, 16}, 751);
    c.d.window = W;
    const int S = c.d.qkv_stride(), HD = c.d.H * c.d.D;
    std::vector<float> out(c.out_size()), lse(c.lse_size());
    attn_forward(ref_be(), out, lse, c.qkv, c.d, c.scale);
    for (int i = 0; i < T; ++i) {
        const int j0 = std::max(0, i - W + 1), n = i - j0 + 1;
        AttnCase row = c;
        row.d = {1, n, 4, 2, 16};
        row.qkv.assign(c.qkv.begin() + size_t(j0) * S, c.qkv.begin() + size_t(i + 1) * S);
        std::vector<float> o(size_t(n) * HD), l(size_t(4 * n));
        attn_forward(ref_be(), o, l, row.qkv, row.d, c.scale);
        for (int e = 0; e < HD; ++e)
            ASSERT_EQ(out[size_t(i) * HD + e], o[size_t(n - 1) * HD + e]) << "query " << i;
        for (int h = 0; h < 4; ++h)
            ASSERT_EQ(lse[size_t(h) * T + i], l[size_t(h) * n + n - 1]) << "query " << i;
    }
}

// A negative window is refused by name.
TEST(AttentionCpuWindow, RejectsANegativeWindow) {
    AttnCase c = make_case({1, 8, 2, 2, 16}, 761);
    c.d.window = -1;
    std::vector<float> out(c.out_size()), lse(c.lse_size());
    EXPECT_EQ(error_of([&] { attn_forward(cpu_be(), out, lse, c.qkv, c.d, c.scale); }),
              "attention_forward: window -1 must be >= 0");
}

// The definition: attention over a packed row equals attention over each document run as a row
// of its own (unpacked). ref reproduces it bit for bit (same loops over the same keys); cpu within
// the estimates, its backward reading its own forward's out and lse (off the reference's by the
// forward's bounds). d_qkv starts as NaN: every element of every document must be written.
TEST(AttentionCpuPacked, EachDocumentMatchesItsOwnRow) {
    AttnCase c = make_case({4, 131, 8, 2, 24}, 401);
    std::vector<int32_t> starts = starts_of(kAwkwardRows, c.d.T);
    c.d.doc_start = host_cvec(starts);
    const int S = c.d.qkv_stride(), HD = c.d.H * c.d.D;
    std::vector<float> out(c.out_size()), lse(c.lse_size()), out_r(out.size());
    std::vector<float> lse_r(lse.size()), d_qkv(c.qkv_size(), NAN), d_qkv_r(c.qkv_size(), NAN);
    attn_forward(cpu_be(), out, lse, c.qkv, c.d, c.scale);
    attn_backward(cpu_be(), d_qkv, c.d_out, out, lse, c.qkv, c.d, c.scale);
    attn_forward(ref_be(), out_r, lse_r, c.qkv, c.d, c.scale);
    attn_backward(ref_be(), d_qkv_r, c.d_out, out_r, lse_r, c.qkv, c.d, c.scale);
    const AttnFwdBound fb = attention_forward_bound(dvec(c.qkv), c.d, c.scale, Impl::kCpu);
    const DVec bb = attention_backward_bound(dvec(c.qkv), dvec(c.d_out), dvec(out_r), dvec(lse_r),
                                             c.d, c.scale, Impl::kCpu, &fb.out, &fb.lse)
                        .total();
    int n_docs = 0;
    for (int b = 0; b < c.d.B; ++b)
        for (auto [t0, t1] : documents(starts.data() + size_t(b) * c.d.T, c.d.T)) {
            SCOPED_TRACE(fmt::format("row {} document [{}, {})", b, t0, t1));
            ++n_docs;
            const int L = t1 - t0;
            const size_t row0 = size_t(b) * c.d.T + size_t(t0);
            AttnDims one{1, L, c.d.H, c.d.KV, c.d.D};
            auto slice = [&](const auto& v, size_t w) {
                return std::decay_t<decltype(v)>(v.begin() + long(row0 * w),
                                                 v.begin() + long((row0 + L) * w));
            };
            std::vector<float> qkv1 = slice(c.qkv, size_t(S)), dout1 = slice(c.d_out, size_t(HD));
            std::vector<float> out1(size_t(L) * HD), lse1(size_t(c.d.H) * L), d1(qkv1.size());
            attn_forward(ref_be(), out1, lse1, qkv1, one, c.scale);
            attn_backward(ref_be(), d1, dout1, out1, lse1, qkv1, one, c.scale);
            std::vector<float> lse_p, lse_rp;  // lse (B, H, T) of the document's positions
            DVec lse_b;
            for (int h = 0; h < c.d.H; ++h)
                for (int t = t0; t < t1; ++t) {
                    const size_t l = (size_t(b) * c.d.H + h) * c.d.T + t;
                    lse_p.push_back(lse[l]);
                    lse_rp.push_back(lse_r[l]);
                    lse_b.push_back(fb.lse[l]);
                }
            EXPECT_EQ(slice(out_r, size_t(HD)), out1);
            EXPECT_EQ(lse_rp, lse1);
            EXPECT_EQ(slice(d_qkv_r, size_t(S)), d1);
            expect_within_bound(dvec(slice(out, size_t(HD))), dvec(out1), slice(fb.out, size_t(HD)),
                                "document out", "attention out F32 (packed vs own row)");
            expect_within_bound(dvec(lse_p), dvec(lse1), lse_b, "document lse",
                                "attention lse F32 (packed vs own row)");
            expect_within_bound(dvec(slice(d_qkv, size_t(S))), dvec(d1), slice(bb, size_t(S)),
                                "document d_qkv", "attention d_qkv F32 (packed vs own row)");
        }
    EXPECT_EQ(n_docs, 5 + 1 + 8 + 3);
}

// One document per row given explicitly (all zeros) takes no packed tile: bit-identical to none.
TEST(AttentionCpuPacked, AllZeroDocStartIsBitIdenticalToNull) {
    AttnCase c = make_case({2, 100, 4, 2, 16}, 501);
    std::vector<int32_t> zeros(size_t(c.d.B) * c.d.T, 0);
    AttnDims z = c.d;
    z.doc_start = host_cvec(zeros);
    EXPECT_EQ(run_cpu(c, z), run_cpu(c, c.d));
}

// Packed work items keep one owner per output element: the thread count changes no bit.
TEST(AttentionCpuPacked, ResultsIndependentOfThreadCount) {
    AttnCase c = make_case({4, 97, 8, 2, 24}, 601);
    std::vector<int32_t> starts = starts_of(kAwkwardRows, c.d.T);
    c.d.doc_start = host_cvec(starts);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<float> one = run_cpu(c, c.d);
    omp_set_num_threads(3);
    std::vector<float> three = run_cpu(c, c.d);
    omp_set_num_threads(saved);
    EXPECT_EQ(one, three);
}

// Every way a doc_start can be wrong is an ete::Error naming the row and position.
TEST(AttentionCpuPacked, RejectsInvalidDocStart) {
    const int T = 6;
    std::vector<float> qkv(size_t(2) * T * (4 + 4) * 8), out(size_t(2) * T * 4 * 8), lse(48);
    auto attend = [&](std::vector<int32_t> s) {
        return error_of([&] {
            attn_forward(cpu_be(), out, lse, qkv, {2, T, 4, 2, 8, host_cvec(s)}, 1.0f);
        });
    };
    // s > t (a document that starts in the future)
    EXPECT_EQ(attend({0, 0, 0, 5, 5, 5, 0, 0, 0, 0, 0, 0}),
              "doc_start[row 0, position 3] = 5: expected 0 (the document of position 2) or 3 "
              "(a new document)");
    // s jumps back inside a document
    EXPECT_EQ(attend({0, 0, 0, 0, 0, 0, 0, 1, 1, 3, 1, 1}),
              "doc_start[row 1, position 4] = 1: expected 3 (the document of position 3) or 4 "
              "(a new document)");
    // a row that does not start a document, and a negative start
    EXPECT_EQ(attend({0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2}),
              "doc_start[row 1, position 0] = 2: expected 0 (a row starts a document)");
    EXPECT_NE(attend({0, 0, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0}), "<no error>");
    EXPECT_EQ(attend({0, 1, 1, 3, 4, 4, 0, 0, 2, 2, 2, 5}), "<no error>");
}

TEST(AttentionCpu, RejectsHeadsNotDivisibleByKvHeads) {
    std::vector<float> qkv(size_t(4) * (3 + 4) * 8), out(size_t(4) * 3 * 8), lse(12);
    EXPECT_THROW(attn_forward(cpu_be(), out, lse, qkv, {1, 4, 3, 2, 8}, 1.0f), Error);
}

// The CPU's RoPE of the exact x (sign 1), then its inverse (-1) of that computed rotation: values
// with their error bounds (rope_ev).
std::vector<Ev> rope_of(const std::vector<float>& x, const std::vector<float>& cos,
                        const std::vector<float>& sin, const AttnDims& d, std::vector<int> signs) {
    std::vector<Ev> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = f32(x[i]);
    for (int sign : signs) rope_ev(r, dvec(cos), dvec(sin), d, sign);
    return r;
}

// Backward after forward gives x back up to both rotations' roundings and the fp32 tables'
// cos^2 + sin^2 - 1 (R^T R = (cos^2 + sin^2) I).
DVec round_trip_bound(const std::vector<float>& x, const std::vector<float>& cos,
                      const std::vector<float>& sin, const AttnDims& d) {
    const std::vector<Ev> z = rope_of(x, cos, sin, d, {1, -1});
    DVec b(x.size());
    for (size_t i = 0; i < b.size(); ++i) b[i] = z[i].e + std::fabs(z[i].v - x[i]);
    return b;
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
            rope(cpu_be(), y, cos, sin, d, 1);
            rope(ref_be(), y_ref, cos, sin, d, 1);
            // two fp32 products and a sum per element, against the double rotation rounded once
            expect_within_bound(dvec(y), dvec(y_ref),
                                rope_bound(dvec(x), dvec(cos), dvec(sin), d, 1), "rope forward",
                                "rope forward F32");
            EXPECT_EQ(part_of(y, d, Part::kV), part_of(x, d, Part::kV));  // values untouched
            if (T > 1) {
                EXPECT_GT(norm_err(y, x), 0.1);  // q and k did rotate (t = 0 does not)
            }
            std::vector<float> z = y, z_ref = y;
            rope(cpu_be(), z, cos, sin, d, -1);
            rope(ref_be(), z_ref, cos, sin, d, -1);
            expect_within_bound(dvec(z), dvec(z_ref),
                                rope_bound(dvec(y), dvec(cos), dvec(sin), d, -1), "rope backward",
                                "rope backward F32");
            expect_within_bound(dvec(z), dvec(x), round_trip_bound(x, cos, sin, d),
                                "rope backward of forward");  // R^T R = I, up to rounding
        }
}

// Packed rows rotate position t by the angle of t - s: cpu matches ref, and each document is
// rotated exactly as the same rows alone in an unpacked row (ref, bit for bit).
TEST(RopeCpu, PackedMatchesRefAndRestartsPositions) {
    for (int T : {131, 33}) {
        AttnDims d{4, T, 4, 2, 24};
        std::vector<int32_t> starts = starts_of(kAwkwardRows, T);
        d.doc_start = host_cvec(starts);
        SCOPED_TRACE(describe(d));
        std::vector<float> cos, sin;
        rope_tables(T, d.D, cos, sin);
        const size_t S = size_t(d.qkv_stride()), n = size_t(d.B) * T * S;
        std::vector<float> x = random_vec(n, 700u + unsigned(T)), y = x, y_ref = x;
        rope(cpu_be(), y, cos, sin, d, 1);
        rope(ref_be(), y_ref, cos, sin, d, 1);
        expect_within_bound(dvec(y), dvec(y_ref), rope_bound(dvec(x), dvec(cos), dvec(sin), d, 1),
                            "packed rope forward", "rope forward F32");
        std::vector<float> z = y, z_ref = y;
        rope(cpu_be(), z, cos, sin, d, -1);
        rope(ref_be(), z_ref, cos, sin, d, -1);
        expect_within_bound(dvec(z), dvec(z_ref), rope_bound(dvec(y), dvec(cos), dvec(sin), d, -1),
                            "packed rope backward", "rope backward F32");
        expect_within_bound(dvec(z), dvec(x), round_trip_bound(x, cos, sin, d),
                            "packed rope backward of forward");
        for (int b = 0; b < d.B; ++b)
            for (auto [t0, t1] : documents(starts.data() + size_t(b) * T, T)) {
                const size_t r0 = size_t(b) * T + size_t(t0), r1 = size_t(b) * T + size_t(t1);
                std::vector<float> alone(x.begin() + long(r0 * S), x.begin() + long(r1 * S));
                rope(ref_be(), alone, cos, sin, AttnDims{1, t1 - t0, d.H, d.KV, d.D}, 1);
                EXPECT_TRUE(std::equal(alone.begin(), alone.end(), y_ref.begin() + long(r0 * S)))
                    << "row " << b << " document at " << t0;
            }
    }
}

// rope_backward is the adjoint of rope_forward: <R x, y> == <x, R^T y>.
TEST(RopeCpu, BackwardIsAdjointOfForward) {
    AttnDims d{2, 19, 8, 4, 24};
    std::vector<float> cos, sin;
    rope_tables(d.T, d.D, cos, sin);
    const size_t n = size_t(d.B) * d.T * d.qkv_stride();
    std::vector<float> x = random_vec(n, 41), y = random_vec(n, 42), rx = x, rty = y;
    rope(cpu_be(), rx, cos, sin, d, 1);
    rope(cpu_be(), rty, cos, sin, d, -1);
    // Exact for the fp32 tables; each rotated element is off by its rounding (rope_ev), and the
    // two double sums of n products by gamma_n each.
    const std::vector<Ev> erx = rope_of(x, cos, sin, d, {1}), erty = rope_of(y, cos, sin, d, {-1});
    double lhs = 0, rhs = 0, err = 0, mag = 0;
    for (size_t i = 0; i < n; ++i) {
        lhs += double(rx[i]) * y[i];
        rhs += double(x[i]) * rty[i];
        err += erx[i].e * std::fabs(y[i]) + std::fabs(x[i]) * erty[i].e;
        mag += std::fabs(double(rx[i]) * y[i]) + std::fabs(double(x[i]) * rty[i]);
    }
    EXPECT_NEAR(lhs, rhs, err + testing::gamma_worst(double(n), kUnitF64) * mag);
}

// Central differences of L = sum(out * w) in double against the reference backward (the
// reference backend on F64 views), for every element of qkv. Step 1e-5: truncation ~h^2 and
// roundoff ~1e-16/h are both far below 1e-6. Returns the analytic gradient and its largest value.
std::vector<double> check_attention_fd(const AttnDims& d, uint32_t seed) {
    const double scale = 0.7, h = 1e-5;
    const size_t n = size_t(d.B) * d.T * d.qkv_stride(), no = size_t(d.B) * d.T * d.H * d.D;
    std::vector<double> qkv = random_vec<double>(n, seed), w = random_vec<double>(no, seed + 1);
    std::vector<double> out(no), lse(size_t(d.B) * d.H * d.T), grad(n);
    auto loss = [&](const std::vector<double>& x) {
        std::vector<double> o(no), l(lse.size());
        attn_forward(ref_be(), o, l, x, d, float(scale));
        double s = 0;
        for (size_t i = 0; i < no; ++i) s += o[i] * w[i];
        return s;
    };
    attn_forward(ref_be(), out, lse, qkv, d, float(scale));
    attn_backward(ref_be(), grad, w, out, lse, qkv, d, float(scale));
    double gmax = 0;
    for (double g : grad) gmax = std::max(gmax, std::abs(g));
    EXPECT_GT(gmax, 0.01);  // a gradient of some size: the bound below is relative to it
    for (size_t i = 0; i < n; ++i) {
        std::vector<double> xp = qkv, xm = qkv;
        xp[i] += h;
        xm[i] -= h;
        EXPECT_NEAR(grad[i], (loss(xp) - loss(xm)) / (2 * h), 1e-6 * gmax) << "element " << i;
    }
    return grad;
}

TEST(AttentionRefGrad, BackwardMatchesFiniteDifferences) {
    check_attention_fd({2, 5, 4, 2, 6}, 51);
}

// With soft-capped scores (a cap of 0.6 bends scores of |s| ~ 1) and a window of 3.
TEST(AttentionRefGrad, SoftcapBackwardMatchesFiniteDifferences) {
    AttnDims d{2, 6, 4, 2, 6};
    d.softcap = 0.6f;
    d.window = 3;
    check_attention_fd(d, 57);
}

// The same with packed rows (documents of 3, 2 and 2 positions; of 1 and 6): gradients reach only
// keys of the query's own document. Same step and tolerance as above.
TEST(AttentionRefGrad, PackedBackwardMatchesFiniteDifferences) {
    const std::vector<int32_t> starts = starts_of({{3, 2, 2}, {1, 6}}, 7);
    AttnDims d{2, 7, 4, 2, 6, host_cvec(starts)};
    std::vector<double> grad = check_attention_fd(d, 53);
    double gmax = 0;
    for (double g : grad) gmax = std::max(gmax, std::abs(g));
    // A one-position document attends to itself only: out = v, so its q and k get no gradient
    // (zero up to double rounding: exp(s - lse) need not be exactly 1, so the softmax backward's
    // dp - sum(p dp) can leave ~1e-17, depending on how the compiler contracts the sums).
    for (int c = 0; c < (d.H + d.KV) * d.D; ++c)
        EXPECT_NEAR(grad[size_t(d.T) * d.qkv_stride() + size_t(c)], 0.0, 1e-12 * gmax)
            << "row 1, column " << c;
}

// The same for RoPE (linear, so the difference quotient is exact up to roundoff), unpacked and
// packed (documents of 2 positions); d_v must be passed through unchanged.
TEST(AttentionRefGrad, RopeBackwardMatchesFiniteDifferences) {
    const std::vector<int32_t> starts = {0, 0, 2, 2};
    for (CVec doc_start : {CVec{}, host_cvec(starts)}) {
        AttnDims d{1, 4, 2, 1, 6, doc_start};
        SCOPED_TRACE(describe(d));
        const size_t n = size_t(d.B) * d.T * d.qkv_stride();
        std::vector<double> cos, sin;
        rope_tables<double>(d.T, d.D, cos, sin);
        std::vector<double> x = random_vec<double>(n, 61), w = random_vec<double>(n, 62), grad = w;
        rope(ref_be(), grad, cos, sin, d, -1);
        auto loss = [&](std::vector<double> v) {
            rope(ref_be(), v, cos, sin, d, 1);
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
        EXPECT_EQ(part_of(grad, d, Part::kV), part_of(w, d, Part::kV));  // d_v passes through
    }
}

}  // namespace
}  // namespace ete
