// tests/backend/attention16_test.cpp — the CPU backend's RoPE and flash attention on bf16 and
// fp16 views against the reference backend (16-bit inputs widened exactly, f32 with double
// accumulations, each output rounded once). One activation dtype for qkv, out, d_out and d_qkv;
// lse and the RoPE tables are F32. Views are strided (ld wider than the rows) throughout.
//
// Bounds, element by element as in attention_test.cpp: the f32 computation's error estimate on
// the exact 16-bit inputs (backend_test_util.h attention_*_bound, rope_bound) plus one rounding of
// the output, at most one ulp <= eps(dtype) * |value|. The backward reads the forward's 16-bit
// `out` (a rounded intermediate) for D_i = dO . O; both backends are given the same out, so that
// rounding cancels from the comparison (it is part of what 16-bit training computes).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "attention_bounds.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"

namespace ete {
namespace {

using namespace backend_test;

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
    Buf out = c.out_buf(), out_ref = out;
    FVec lse(size_t(c.d.B) * c.d.H * c.d.T), lse_ref(lse.size());
    cpu.attention_forward(out.mat(), host_vec(lse), c.qkv.cmat(), c.d, c.scale);
    ref.attention_forward(out_ref.mat(), host_vec(lse_ref), c.qkv.cmat(), c.d, c.scale);
    const DVec qkv = c.qkv.values();
    const AttnFwdBound fb = attention_forward_bound(qkv, c.d, c.scale, Impl::kCpu);
    expect_rounded_within(out, out_ref, fb.out, "attention out", "attention out");
    expect_within_bound(dvec(lse), dvec(lse_ref), fb.lse, "attention lse",
                        "attention lse (16-bit qkv)");  // f32, exact inputs

    Buf d_qkv = c.d_qkv_buf(), d_qkv_ref = d_qkv;
    cpu.attention_backward(d_qkv.mat(), c.d_out.cmat(), out_ref.cmat(), host_cvec(lse_ref),
                           c.qkv.cmat(), c.d, c.scale);
    ref.attention_backward(d_qkv_ref.mat(), c.d_out.cmat(), out_ref.cmat(), host_cvec(lse_ref),
                           c.qkv.cmat(), c.d, c.scale);
    const DVec bb = attention_backward_bound(qkv, c.d_out.values(), out_ref.values(), dvec(lse_ref),
                                             c.d, c.scale, Impl::kCpu)
                        .total();
    expect_rounded_within(d_qkv, d_qkv_ref, bb, "attention d_qkv", "attention d_qkv");
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
// output on top of the f32 rotation's (rope_bound). The value heads are not touched; the backward
// (inverse rotation) likewise.
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
    const DVec xv = x.values(), yv = y.values(), cv = dvec(cos), sv = dvec(sin);
    expect_rounded_within(y, y_ref, rope_bound(xv, cv, sv, d, 1), "rope_forward", "rope forward");
    expect_padding(y, -7.0f, "rope_forward");
    EXPECT_EQ(part_of(yv, d, Part::kV), part_of(xv, d, Part::kV));  // values untouched
    if (d.T > 1) {
        EXPECT_GT(norm_err(yv, xv), 0.1);  // q and k did rotate (t = 0 does not)
    }
    Buf z = y, z_ref = y;
    cpu.rope_backward(z.mat(), c, s, d);
    ref.rope_backward(z_ref.mat(), c, s, d);
    expect_rounded_within(z, z_ref, rope_bound(yv, cv, sv, d, -1), "rope_backward",
                          "rope backward");
    // Backward undoes forward up to the two rotations' fp32 roundings, each 16-bit rounding
    // (y's carried through the inverse rotation) and cos^2 + sin^2 - 1 of the fp32 tables.
    std::vector<Ev> r(xv.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = f32(xv[i]);
    rope_ev(r, cv, sv, d, 1);
    for (Ev& e : r) e = stored(e, t);
    rope_ev(r, cv, sv, d, -1);
    DVec round_trip(r.size());
    for (size_t i = 0; i < r.size(); ++i) {
        const Ev zi = stored(r[i], t);
        round_trip[i] = zi.e + std::fabs(zi.v - xv[i]);
    }
    expect_within_bound(z.values(), xv, round_trip, "rope backward of forward");
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
