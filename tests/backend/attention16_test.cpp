// tests/backend/attention16_test.cpp — the CPU backend's RoPE and flash attention on bf16 and
// fp16 views against the reference backend (16-bit inputs widened exactly, f32 with double
// accumulations, each output rounded once). One activation dtype for qkv, out, d_out and d_qkv;
// lse and the RoPE tables are F32. Views are strided (ld wider than the rows) throughout.
//
// Tolerances, normalised by the largest reference magnitude as in attention_test.cpp: the f32
// kernels' own error (kAttnTol, kRopeTol there) plus one rounding of the output, at most one ulp
// <= eps(dtype) * |value| <= eps * max. The backward reads the forward's 16-bit `out` (a rounded
// intermediate) for D_i = dO . O; both backends are given the same out, so that rounding cancels
// from the comparison (it is part of what 16-bit training computes).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "ete/core/error.h"

namespace ete {
namespace {

using namespace backend_test;

constexpr double kAttnTol = 1e-5;  // the f32 kernels' (attention_test.cpp)
constexpr DType k16[] = {DType::BF16, DType::F16};

class Attention16 : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

// The tensors of one attention case in dtype t: qkv (N, S) rows S + 2 apart, out and d_out
// (N, H*D) rows H*D + 4 apart (one stride: the backward requires it), lse F32.
struct Case16 {
    AttnDims d;
    float scale;
    Buf qkv, d_out;
    Case16(DType t, AttnDims dims, uint32_t seed) : d(dims), scale(float(1.0 / std::sqrt(d.D))) {
        const int64_t N = int64_t(d.B) * d.T, S = d.qkv_stride(), HD = int64_t(d.H) * d.D;
        qkv = Buf::of(t, random_vec(size_t(N * S), seed), N, S, S + 2);
        d_out = Buf::of(t, random_vec(size_t(N * HD), seed + 1), N, HD, HD + 4);
    }
    Buf out_buf() const { return Buf(qkv.dtype(), qkv.rows(), d_out.cols(), d_out.ld()); }
    Buf d_qkv_buf() const {  // NaN: an element the backward forgets to write fails
        return Buf::of(qkv.dtype(), FVec(size_t(qkv.rows() * qkv.cols()), NAN), qkv.rows(),
                       qkv.cols(), qkv.cols() + 6);
    }
};

void expect_matches_ref(Backend& cpu, Backend& ref, const Case16& c) {
    const DType t = c.qkv.dtype();
    SCOPED_TRACE(std::string(dname(t)) + " " + describe(c.d));
    const double tol = eps_of(t) + kAttnTol;
    Buf out = c.out_buf(), out_ref = out;
    FVec lse(size_t(c.d.B) * c.d.H * c.d.T), lse_ref(lse.size());
    cpu.attention_forward(out.mat(), host_vec(lse), c.qkv.cmat(), c.d, c.scale);
    ref.attention_forward(out_ref.mat(), host_vec(lse_ref), c.qkv.cmat(), c.d, c.scale);
    const std::string k = std::string(" ") + dname(t);
    expect_norm_err(out.values(), out_ref.values(), tol, "attention out" + k);
    expect_norm_err(lse, lse_ref, kAttnTol, "attention lse (16-bit qkv)");  // f32, exact inputs

    Buf d_qkv = c.d_qkv_buf(), d_qkv_ref = d_qkv;
    cpu.attention_backward(d_qkv.mat(), c.d_out.cmat(), out_ref.cmat(), host_cvec(lse_ref),
                           c.qkv.cmat(), c.d, c.scale);
    ref.attention_backward(d_qkv_ref.mat(), c.d_out.cmat(), out_ref.cmat(), host_cvec(lse_ref),
                           c.qkv.cmat(), c.d, c.scale);
    const DVec g = d_qkv.values(), w = d_qkv_ref.values();
    for (Part p : {Part::kQ, Part::kK, Part::kV}) {
        SCOPED_TRACE(p == Part::kQ ? "d_q" : p == Part::kK ? "d_k" : "d_v");
        expect_norm_err(part_of(g, c.d, p), part_of(w, c.d, p), tol, "attention d_qkv" + k);
    }
    expect_padding(d_qkv, -7.0f, "attention d_qkv");
}

// Odd T, GQA groups of 4 and 2, plain heads (H = KV = 6), head dims of one and several vectors.
TEST_F(Attention16, MatchesRefOverAwkwardShapes) {
    const int heads[3][2] = {{8, 2}, {6, 6}, {4, 2}};
    uint32_t seed = 1;
    for (DType t : k16)
        for (int T : {1, 7, 33, 65, 131})
            for (int D : {16, 24, 64})
                for (auto& hk : heads)
                    expect_matches_ref(*cpu_, *ref_, Case16(t, {2, T, hk[0], hk[1], D}, seed++));
}

// Packed rows: every tile kind (skipped, doc-masked, causal, unmasked) on 16-bit views.
TEST_F(Attention16, PackedMatchesRefWithAwkwardDocuments) {
    const int heads[2][2] = {{8, 2}, {6, 6}};
    uint32_t seed = 301;
    for (DType t : k16)
        for (int T : {131, 67, 33})
            for (int D : {16, 24})
                for (auto& hk : heads) {
                    std::vector<int32_t> starts = starts_of(kAwkwardRows, T);
                    expect_matches_ref(
                        *cpu_, *ref_,
                        Case16(t, {4, T, hk[0], hk[1], D, host_cvec(starts)}, seed++));
                }
}

TEST_F(Attention16, RejectsMixedDtypes) {
    AttnDims d{1, 4, 2, 1, 8};
    Buf qkv(DType::BF16, 4, d.qkv_stride()), out(DType::F16, 4, 16), out32(DType::F32, 4, 16);
    FVec lse(8);
    EXPECT_THROW(cpu_->attention_forward(out.mat(), host_vec(lse), qkv.cmat(), d, 1.0f), Error);
    EXPECT_THROW(cpu_->attention_forward(out32.mat(), host_vec(lse), qkv.cmat(), d, 1.0f), Error);
}

// RoPE rotates each (j, j + D/2) pair once in f32 and rounds: per element, one rounding of the
// output on top of f32 rounding of two products and a sum of terms <= 1 (atol 1e-6). The value
// heads are not touched; the backward (inverse rotation) likewise.
void expect_rope_matches_ref(Backend& cpu, Backend& ref, DType t, const AttnDims& d,
                             uint32_t seed) {
    SCOPED_TRACE(std::string(dname(t)) + " " + describe(d));
    // Tables of more positions than T, rows D/2 + 2 apart (any strided F32 view).
    FVec cos, sin;
    const int P = d.T + 3, half = d.D / 2;
    rope_tables(P, d.D, cos, sin);
    const Buf cb = Buf::of(DType::F32, cos, P, half, half + 2);
    const Buf sb = Buf::of(DType::F32, sin, P, half, half + 2);
    const CMat c = cb.cmat(), s = sb.cmat();
    const int64_t N = int64_t(d.B) * d.T, S = d.qkv_stride();
    Buf x = Buf::of(t, random_vec(size_t(N * S), seed), N, S, S + 3), y = x, y_ref = x;
    cpu.rope_forward(y.mat(), c, s, d);
    ref.rope_forward(y_ref.mat(), c, s, d);
    expect_close_rounded(y, y_ref, 0, 1e-6, "rope_forward", "rope forward");
    expect_padding(y, -7.0f, "rope_forward");
    const DVec xv = x.values(), yv = y.values();
    EXPECT_EQ(part_of(yv, d, Part::kV), part_of(xv, d, Part::kV));  // values untouched
    if (d.T > 1) {
        EXPECT_GT(norm_err(yv, xv), 0.1);  // q and k did rotate (t = 0 does not)
    }
    Buf z = y, z_ref = y;
    cpu.rope_backward(z.mat(), c, s, d);
    ref.rope_backward(z_ref.mat(), c, s, d);
    expect_close_rounded(z, z_ref, 0, 1e-6, "rope_backward", "rope backward");
    // Backward undoes forward up to the two roundings of each element.
    EXPECT_LE(norm_err(z.values(), xv), 2 * eps_of(t) + 1e-6);
}

TEST_F(Attention16, RopeMatchesRefForwardAndBackward) {
    const int heads[2][2] = {{8, 2}, {6, 6}};
    uint32_t seed = 11;
    for (DType t : k16)
        for (int D : {16, 24, 64})
            for (int T : {1, 7, 33})
                for (auto& hk : heads)
                    expect_rope_matches_ref(*cpu_, *ref_, t, {2, T, hk[0], hk[1], D}, seed++);
}

TEST_F(Attention16, RopePackedMatchesRef) {
    uint32_t seed = 711;
    for (DType t : k16)
        for (int T : {131, 33}) {
            std::vector<int32_t> starts = starts_of(kAwkwardRows, T);
            expect_rope_matches_ref(*cpu_, *ref_, t, {4, T, 8, 2, 24, host_cvec(starts)}, seed++);
        }
}

}  // namespace
}  // namespace ete
