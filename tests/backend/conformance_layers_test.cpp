// tests/backend/conformance_layers_test.cpp — the conformance suite (conformance_test.cpp says
// what it checks and why) for the layers' ops: norms (and the fused norm quantization), RoPE and
// attention, SwiGLU and GELU, and the cross-entropy family. Same harness (device_buf.h), same
// backends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attention_bounds.h"
#include "device_buf.h"
#include "ete/backend/backend.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

class LayerOps : public Ops {
  protected:
    // SwiGLU (gelu = false) or GeGLU against the reference, bounded by swiglu_bound / geglu_bound.
    void check_glu(bool gelu, uint32_t seed) {
        const int64_t N = 13, F = 37;
        const char* name = gelu ? "geglu" : "swiglu";
        for (DType t : kFloats) {
            SCOPED_TRACE(fmt::format("{} {}", name, dname(t)));
            const Buf gu =
                Buf::of(t, activation_inputs(size_t(N * 2 * F), seed), N, 2 * F, 2 * F + 3);
            Buf out = poisoned(t, N, F, F + 1);
            DevBuf gud = up(gu), od = up(out);
            const Buf d_out = rnd(t, N, F, F + 2, seed + 1);
            Buf dgu = poisoned(t, N, 2 * F, 2 * F + 5);
            DevBuf dod = up(d_out), dgud = up(dgu);
            if (gelu) {
                ref().geglu_forward(out.mat(), gu.cmat());
                be().geglu_forward(od.mat(), gud.cmat());
                ref().geglu_backward(dgu.mat(), d_out.cmat(), gu.cmat());
                be().geglu_backward(dgud.mat(), dod.cmat(), gud.cmat());
            } else {
                ref().swiglu_forward(out.mat(), gu.cmat());
                be().swiglu_forward(od.mat(), gud.cmat());
                ref().swiglu_backward(dgu.mat(), d_out.cmat(), gu.cmat());
                be().swiglu_backward(dgud.mat(), dod.cmat(), gud.cmat());
            }
            const ActBound bd =
                (gelu ? geglu_bound : swiglu_bound)(gu.values(), d_out.values(), N, F, Impl::kAny);
            expect_rounded_within(od.download(), out, bd.out, fmt::format("{} out", name),
                                  fmt::format("conformance {} out", name));
            expect_padding_kept(od.download(), out, fmt::format("{} out", name));
            expect_rounded_within(dgud.download(), dgu, bd.d_in, fmt::format("{} d_gate_up", name),
                                  fmt::format("conformance {} d_gate_up", name));
            expect_padding_kept(dgud.download(), dgu, fmt::format("{} d_gate_up", name));
        }
    }
};

// ---- norms ----

// (x, out) dtypes: statistics, weights and d_x are F32 (the precision policy).
constexpr DType kNormPairs[][2] = {{kF32, kF32}, {kBF16, kBF16}, {kF32, kBF16}, {kF16, kF16}};
// (N, C): odd rows, and rows wider than one block of threads.
constexpr std::pair<int64_t, int64_t> kNormShapes[] = {{13, 37}, {5, 1000}};

// The norms' estimates (backend_test_util.h) for any backend: the CPU's double row statistics or
// CUDA's fp32 ones, rstd rounded before it scales x; d_x's terms dy·w − xhat·dot, which cancel;
// d_w an fp32 sum over the rows.
TEST_P(LayerOps, RmsNorm) {
    const float eps = 1e-5f;
    for (const auto& [N, C] : kNormShapes)
        for (const auto& pr : kNormPairs) {
            const DType xt = pr[0], ot = pr[1];
            SCOPED_TRACE(fmt::format("{} N={} C={}", pair_name(xt, ot), N, C));
            const Buf w = f32_row(random_vec(size_t(C), 110, 0.5, 1.5));
            const Buf x = rnd(xt, N, C, C + 3, 111);
            Buf out = poisoned(ot, N, C, C + 2), rstd = poisoned(kF32, 1, N);
            DevBuf xd = up(x), wd = up(w), outd = up(out), rstdd = up(rstd);
            ref().rmsnorm_forward(out.mat(), rstd.vec(), x.cmat(), w.cvec(), eps);
            be().rmsnorm_forward(outd.mat(), rstdd.vec(), xd.cmat(), wd.cvec(), eps);
            const NormBound fb =
                rmsnorm_forward_bound(x.values(), w.values(), N, C, eps, Impl::kAny);
            expect_within(rstdd.download(), rstd, fb.rstd, "rmsnorm rstd");
            expect_rounded_within(outd.download(), out, fb.out, "rmsnorm out",
                                  "conformance rmsnorm out");
            expect_padding_kept(outd.download(), out, "rmsnorm out");

            const Buf d_out = rnd(ot, N, C, C + 4, 112), dx0 = rnd(kF32, N, C, C + 1, 113);
            const Buf dw0 = f32_row(random_vec(size_t(C), 114));
            for (bool frozen : {false, true}) {  // frozen: an empty d_w, d_x still written
                SCOPED_TRACE(frozen ? "frozen" : "");
                Buf dx = dx0, dw = dw0;
                DevBuf dod = up(d_out), dxd = up(dx0), dwd = up(dw0), rd = up(rstd);
                ref().rmsnorm_backward(dx.mat(), frozen ? Vec{} : dw.vec(), d_out.cmat(), x.cmat(),
                                       w.cvec(), rstd.cvec());
                be().rmsnorm_backward(dxd.mat(), frozen ? Vec{} : dwd.vec(), dod.cmat(), xd.cmat(),
                                      wd.cvec(), rd.cvec());
                const NormBound bb = rmsnorm_backward_bound(
                    x.values(), w.values(), rstd.values(), d_out.values(), dx0.values(),
                    frozen ? DVec{} : dw0.values(), N, C, Impl::kAny);
                expect_within(dxd.download(), dx, bb.out, "rmsnorm d_x");
                if (!frozen) expect_within(dwd.download(), dw, bb.d_w, "rmsnorm d_w");
            }
        }
}

// |got - want| <= 1 everywhere, padding equal: integers of values that may differ by an fp32
// rounding, which can move one across a rounding tie of the grid.
void expect_within_one(const Ints<uint8_t>& got, const Ints<uint8_t>& want,
                       const std::string& what) {
    int bad = 0;
    for (int64_t r = 0; r < got.rows(); ++r)
        for (int64_t c = 0; c < got.ld(); ++c) {
            const int d = std::abs(int(got.at(r, c)) - int(want.at(r, c)));
            if (d > (c < got.cols() ? 1 : 0) && bad++ < 3)
                ADD_FAILURE() << what << " (" << r << ", " << c << "): got " << int(got.at(r, c))
                              << " want " << int(want.at(r, c));
        }
    EXPECT_EQ(bad, 0) << what;
}

// rmsnorm_quantize is quantize_s8 of rmsnorm_forward's F32 out (backend.h): exactly the
// backend's own two ops, and within one step of the reference's (the norm differs by fp32
// rounding).
TEST_P(LayerOps, RmsNormQuantize) {
    const int64_t N = 13, C = 37;
    const float eps = 1e-5f;
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    const Buf w = f32_row(random_vec(size_t(C), 120, 0.5, 1.5));
    for (DType xt : kFloats)
        for (bool per_row : {false, true})
            for (DType qt : {DType::U8, DType::I8}) {
                SCOPED_TRACE(fmt::format("{} per_row={} {}", dname(xt), per_row, dname(qt)));
                const Buf x = rnd(xt, N, C, C + 3, 121, -3.0, 3.0);
                const QParams p(per_row ? N : 1, 0.02f, 5);
                const auto q0 = Ints<uint8_t>::poisoned(qt, N, C, C + 2);
                Ints<uint8_t> want = q0;
                ref().rmsnorm_quantize(want.mat(), x.cmat(), w.cvec(), eps, p.s.cvec(), p.z.cvec(),
                                       g);
                DevBuf xd = up(x), wd = up(w), s = up(p.s), z = up(p.z), q = up(q0), q2 = up(q0);
                DevBuf out = up(poisoned(kF32, N, C)), rstd = up(poisoned(kF32, 1, N));
                be().rmsnorm_quantize(q.mat(), xd.cmat(), wd.cvec(), eps, s.cvec(), z.cvec(), g);
                be().rmsnorm_forward(out.mat(), rstd.vec(), xd.cmat(), wd.cvec(), eps);
                be().quantize_s8(q2.mat(), out.cmat(), s.cvec(), z.cvec(), g);
                const Ints<uint8_t> got = q.download_ints<uint8_t>();
                expect_exact(got, q2.download_ints<uint8_t>(), "rmsnorm_quantize vs its two ops");
                expect_within_one(got, want, "rmsnorm_quantize");
            }
}

// As RmsNorm: mean and rstd rounded to fp32 before the affine map; d_x's cancelling terms scaled
// by rstd; d_w and d_b fp32 sums over the rows.
TEST_P(LayerOps, LayerNorm) {
    const float eps = 1e-5f;
    for (const auto& [N, C] : kNormShapes)
        for (const auto& pr : kNormPairs) {
            const DType xt = pr[0], ot = pr[1];
            SCOPED_TRACE(fmt::format("{} N={} C={}", pair_name(xt, ot), N, C));
            const Buf w = f32_row(random_vec(size_t(C), 130, 0.5, 1.5)),
                      b = f32_row(random_vec(size_t(C), 131));
            const Buf x = rnd(xt, N, C, C + 3, 132, -1.0, 3.0);  // non-zero mean
            Buf out = poisoned(ot, N, C, C + 2), mean = poisoned(kF32, 1, N), rstd = mean;
            DevBuf xd = up(x), wd = up(w), bd = up(b), outd = up(out), md = up(mean), rd = up(rstd);
            ref().layernorm_forward(out.mat(), mean.vec(), rstd.vec(), x.cmat(), w.cvec(), b.cvec(),
                                    eps);
            be().layernorm_forward(outd.mat(), md.vec(), rd.vec(), xd.cmat(), wd.cvec(), bd.cvec(),
                                   eps);
            const NormBound fb =
                layernorm_forward_bound(x.values(), w.values(), b.values(), N, C, eps, Impl::kAny);
            expect_within(md.download(), mean, fb.mean, "layernorm mean");
            expect_within(rd.download(), rstd, fb.rstd, "layernorm rstd");
            expect_rounded_within(outd.download(), out, fb.out, "layernorm out",
                                  "conformance layernorm out");
            expect_padding_kept(outd.download(), out, "layernorm out");

            const Buf d_out = rnd(ot, N, C, C + 4, 133), dx0 = rnd(kF32, N, C, C + 1, 134);
            const Buf dw0 = f32_row(random_vec(size_t(C), 135)),
                      db0 = f32_row(random_vec(size_t(C), 136));
            for (bool frozen : {false, true}) {  // frozen: empty d_w and d_b, d_x still written
                SCOPED_TRACE(frozen ? "frozen" : "");
                Buf dx = dx0, dw = dw0, db = db0;
                DevBuf dod = up(d_out), dxd = up(dx0), dwd = up(dw0), dbd = up(db0);
                DevBuf mean_d = up(mean), rstd_d = up(rstd);
                ref().layernorm_backward(dx.mat(), frozen ? Vec{} : dw.vec(),
                                         frozen ? Vec{} : db.vec(), d_out.cmat(), x.cmat(),
                                         w.cvec(), mean.cvec(), rstd.cvec());
                be().layernorm_backward(dxd.mat(), frozen ? Vec{} : dwd.vec(),
                                        frozen ? Vec{} : dbd.vec(), dod.cmat(), xd.cmat(),
                                        wd.cvec(), mean_d.cvec(), rstd_d.cvec());
                const NormBound bb = layernorm_backward_bound(
                    x.values(), w.values(), mean.values(), rstd.values(), d_out.values(),
                    dx0.values(), frozen ? DVec{} : dw0.values(), frozen ? DVec{} : db0.values(), N,
                    C, Impl::kAny);
                expect_within(dxd.download(), dx, bb.out, "layernorm d_x");
                if (frozen) continue;
                expect_within(dwd.download(), dw, bb.d_w, "layernorm d_w");
                expect_within(dbd.download(), db, bb.d_b, "layernorm d_b");
            }
        }
}

// ---- attention ----

// Documents of a batch: one per row, packed_starts (backend_test_util.h), or kAwkwardRows (B = 4:
// documents of 1, 31 and 33 positions, one starting on the 128 boundary).
enum class Docs { kNone, kPacked, kAwkward };
// GQA (H / KV = 2 and 4), short rows and rows over several tiles of 32, 64 and 128 positions.
struct AttnCase {
    int B, T, H, KV, D;
    Docs docs;
    float softcap = 0;  // Gemma 2's attention-logit cap (AttnDims::softcap)
};
constexpr AttnCase kAttnCases[] = {
    {2, 19, 4, 2, 16, Docs::kNone},       {3, 19, 4, 1, 8, Docs::kPacked},
    {1, 131, 2, 1, 16, Docs::kNone},      {4, 131, 2, 1, 8, Docs::kAwkward},
    {2, 19, 4, 2, 16, Docs::kNone, 0.7f}, {4, 131, 2, 1, 8, Docs::kAwkward, 1.5f}};

// The dims with doc_start in the reference's host memory and in the backend's.
struct Dims {
    std::vector<int32_t> starts;
    Ints<int32_t> doc;
    std::unique_ptr<DevBuf> doc_dev;
    AttnDims host, dev;
    Dims(Backend& be, const AttnCase& c)
        : starts(c.docs == Docs::kAwkward ? starts_of(kAwkwardRows, c.T) : packed_starts(c.B, c.T)),
          doc(Ints<int32_t>::row(DType::I32, starts)) {
        host = dev = AttnDims{c.B, c.T, c.H, c.KV, c.D};
        host.softcap = dev.softcap = c.softcap;
        if (c.docs == Docs::kNone) return;
        doc_dev = std::make_unique<DevBuf>(be, doc);
        host.doc_start = doc.cvec();
        dev.doc_start = doc_dev->cvec();
    }
};

// One rotation per element: two fp32 products and a sum (rope_bound, every backend the same
// expression), plus a 16-bit output's rounding; the value heads untouched.
TEST_P(LayerOps, Rope) {
    for (const AttnCase& c : kAttnCases)
        for (DType t : kFloats) {
            SCOPED_TRACE(
                fmt::format("{} {}", dname(t), describe(AttnDims{c.B, c.T, c.H, c.KV, c.D})));
            const Dims d(be(), c);
            const int P = c.T + 3, half = c.D / 2;  // tables of more positions than T, strided
            FVec cos, sin;
            rope_tables(P, c.D, cos, sin);
            const Buf cb = Buf::of(kF32, cos, P, half, half + 2),
                      sb = Buf::of(kF32, sin, P, half, half + 2);
            DevBuf cd = up(cb), sd = up(sb);
            const int64_t N = int64_t(c.B) * c.T, S = d.host.qkv_stride();
            const Buf x0 = rnd(t, N, S, S + 3, 140);
            Buf y = x0;
            DevBuf yd = up(x0);
            ref().rope_forward(y.mat(), cb.cmat(), sb.cmat(), d.host);
            be().rope_forward(yd.mat(), cd.cmat(), sd.cmat(), d.dev);
            const Buf got = yd.download();
            const DVec cv = dvec(cos), sv = dvec(sin);
            expect_rounded_within(got, y, rope_bound(x0.values(), cv, sv, d.host, 1),
                                  "rope_forward", "conformance rope_forward");
            expect_padding_kept(got, y, "rope_forward");
            EXPECT_EQ(part_of(got.values(), d.host, Part::kV),
                      part_of(x0.values(), d.host, Part::kV));

            Buf z = y;
            DevBuf zd = up(y);
            ref().rope_backward(z.mat(), cb.cmat(), sb.cmat(), d.host);
            be().rope_backward(zd.mat(), cd.cmat(), sd.cmat(), d.dev);
            expect_rounded_within(zd.download(), z, rope_bound(y.values(), cv, sv, d.host, -1),
                                  "rope_backward", "conformance rope_backward");
            expect_padding_kept(zd.download(), z, "rope_backward");
        }
}

// The attention estimates (backend_test_util.h) for any backend, element by element: fp32 sums
// over up to T keys and D dims (the CPU's flash tiles or CUDA's per-key online softmax) against
// the double oracle, plus one rounding of a 16-bit output. The backward gets the reference's out
// and lse on both sides.
TEST_P(LayerOps, Attention) {
    for (const AttnCase& c : kAttnCases)
        for (DType t : kFloats) {
            SCOPED_TRACE(fmt::format("{} {} docs={} softcap={}", dname(t),
                                     describe(AttnDims{c.B, c.T, c.H, c.KV, c.D}), int(c.docs),
                                     c.softcap));
            const Dims d(be(), c);
            const float scale = float(1.0 / std::sqrt(double(c.D)));
            const int64_t N = int64_t(c.B) * c.T, S = d.host.qkv_stride(), HD = int64_t(c.H) * c.D;
            const Buf qkv = rnd(t, N, S, S + 2, 150);
            Buf out = poisoned(t, N, HD, HD + 4), lse = poisoned(kF32, 1, int64_t(c.B) * c.H * c.T);
            DevBuf qd = up(qkv), od = up(out), ld = up(lse);
            ref().attention_forward(out.mat(), lse.vec(), qkv.cmat(), d.host, scale);
            be().attention_forward(od.mat(), ld.vec(), qd.cmat(), d.dev, scale);
            const Buf out_got = od.download();
            const AttnFwdBound fb =
                attention_forward_bound(qkv.values(), d.host, scale, Impl::kAny);
            expect_rounded_within(out_got, out, fb.out, "attention out",
                                  "conformance attention out");
            expect_padding_kept(out_got, out, "attention out");
            expect_within(ld.download(), lse, fb.lse, "attention lse");

            const Buf d_out = rnd(t, N, HD, HD + 4, 151);  // out's row stride (backend.h)
            Buf dq = poisoned(t, N, S, S + 6);
            DevBuf dod = up(d_out), dqd = up(dq), out_d = up(out), lse_d = up(lse);
            ref().attention_backward(dq.mat(), d_out.cmat(), out.cmat(), lse.cvec(), qkv.cmat(),
                                     d.host, scale);
            be().attention_backward(dqd.mat(), dod.cmat(), out_d.cmat(), lse_d.cvec(), qd.cmat(),
                                    d.dev, scale);
            const Buf dq_got = dqd.download();
            const DVec bb = attention_backward_bound(qkv.values(), d_out.values(), out.values(),
                                                     lse.values(), d.host, scale, Impl::kAny)
                                .total();
            expect_rounded_within(dq_got, dq, bb, "attention d_qkv", "conformance attention d_qkv");
            expect_padding_kept(dq_got, dq, "attention d_qkv");
        }
}

// ---- activations ----

// The activations' estimates for any backend (exp_fast's 5u or CUDA's expf and tanhf, and their
// formulas' fp32 roundings) against double, element by element: silu' (g near -1.28) and gelu'
// (x near -0.75) cancel, and CUDA's 1 + tanh(y) for y << 0; the bounds are the terms'.
TEST_P(LayerOps, Swiglu) {
    check_glu(false, 160);
}

// GeGLU (Gemma's MLP).
TEST_P(LayerOps, Geglu) {
    check_glu(true, 165);
}

// swiglu_quantize is quantize_s8 of swiglu_forward's out (backend.h): exactly the backend's own
// two ops, and within one step of the reference's.
TEST_P(LayerOps, SwigluQuantize) {
    const int64_t N = 13, F = 37;
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    for (DType t : kFloats)
        for (bool per_row : {false, true})
            for (DType qt : {DType::U8, DType::I8}) {
                SCOPED_TRACE(fmt::format("{} per_row={} {}", dname(t), per_row, dname(qt)));
                const Buf gu = rnd(t, N, 2 * F, 2 * F + 5, 170, -6.0, 6.0);
                const QParams p(per_row ? N : 1, 0.1f, 7);
                const auto q0 = Ints<uint8_t>::poisoned(qt, N, F, F + 2);
                Ints<uint8_t> want = q0;
                ref().swiglu_quantize(want.mat(), gu.cmat(), p.s.cvec(), p.z.cvec(), g);
                DevBuf gud = up(gu), s = up(p.s), z = up(p.z), q = up(q0), q2 = up(q0);
                DevBuf out = up(poisoned(t, N, F));
                be().swiglu_quantize(q.mat(), gud.cmat(), s.cvec(), z.cvec(), g);
                be().swiglu_forward(out.mat(), gud.cmat());
                be().quantize_s8(q2.mat(), out.cmat(), s.cvec(), z.cvec(), g);
                const Ints<uint8_t> got = q.download_ints<uint8_t>();
                expect_exact(got, q2.download_ints<uint8_t>(), "swiglu_quantize vs its two ops");
                expect_within_one(got, want, "swiglu_quantize");
            }
}

TEST_P(LayerOps, Gelu) {
    const int64_t N = 13, C = 37;
    for (DType t : kFloats) {
        SCOPED_TRACE(dname(t));
        const Buf x = Buf::of(t, activation_inputs(size_t(N * C), 180), N, C, C + 3);
        const Buf d_out = rnd(t, N, C, C + 4, 181);
        Buf out = poisoned(t, N, C, C + 1), dx = poisoned(t, N, C, C + 2);
        DevBuf xd = up(x), dod = up(d_out), od = up(out), dxd = up(dx);
        ref().gelu_forward(out.mat(), x.cmat());
        be().gelu_forward(od.mat(), xd.cmat());
        ref().gelu_backward(dx.mat(), d_out.cmat(), x.cmat());
        be().gelu_backward(dxd.mat(), dod.cmat(), xd.cmat());
        const ActBound bd = gelu_bound(x.values(), d_out.values(), Impl::kAny);
        expect_rounded_within(od.download(), out, bd.out, "gelu out", "conformance gelu out");
        expect_padding_kept(od.download(), out, "gelu out");
        expect_rounded_within(dxd.download(), dx, bd.d_in, "gelu d_x", "conformance gelu d_x");
        expect_padding_kept(dxd.download(), dx, "gelu d_x");
    }
}

// ---- loss ----

// Logits (N, V) rising along V with per-row offsets and one row at +1000 (stability), rows
// V + 5 apart; every fourth target ignored. V = 1000: rows over several 512-wide chunks.
struct CeInputs {
    int N, V;
    Buf logits;
    std::vector<int32_t> tv;
    Ints<int32_t> targets;
    CeInputs(int n_rows, int vocab) : N(n_rows), V(vocab) {
        FVec z = random_vec(size_t(N) * V, 190, -4.0, 4.0);
        for (int n = 0; n < N; ++n)
            for (int v = 0; v < V; ++v)
                z[size_t(n) * V + v] += 6.0f * v / V + (n == 2 ? 1000.0f : 0.5f * n);
        logits = Buf::of(kF32, z, N, V, V + 5);
        tv = random_ids(N, V, 191);
        for (int n = 1; n < N; n += 4) tv[size_t(n)] = kIgnoreIndex;
        targets = Ints<int32_t>::row(DType::I32, tv);
    }
};

// The cross-entropy estimates for any backend (the CPU's exp_fast and fp32 chunk sums, CUDA's
// expf and fp32 row sums) against double; p − 1 at the target cancels, the bound is its terms'.
// Ignored rows: loss 0 and a gradient of exact zeros.
constexpr std::pair<int, int> kCeShapes[] = {{13, 37}, {5, 1000}};

TEST_P(LayerOps, CrossEntropyForwardBackward) {
    const float d_scale = 0.37f;
    for (const auto& [N, V] : kCeShapes)
        for (int mode = 0; mode < 4; ++mode) {  // in place, into F32, BF16, F16
            const CeInputs in(N, V);
            DevBuf td = up(in.targets);
            const DType gt = mode == 2 ? kBF16 : mode == 3 ? kF16 : kF32;
            SCOPED_TRACE(fmt::format("N={} V={} {}", N, V, mode == 0 ? "in place" : dname(gt)));
            Buf z = in.logits, loss = poisoned(kF32, 1, N), d = poisoned(gt, N, V, V + 3);
            DevBuf zd = up(z), ld = up(loss), dd = up(d);
            Buf& want = mode == 0 ? z : d;
            const DevBuf& got_d = mode == 0 ? zd : dd;
            ref().cross_entropy_forward_backward(z.mat(), loss.vec(), in.targets.cvec(), d_scale,
                                                 want.mat());
            be().cross_entropy_forward_backward(zd.mat(), ld.vec(), td.cvec(), d_scale,
                                                got_d.mat());
            const CeBound b =
                cross_entropy_bound(in.logits.values(), in.tv, N, V, d_scale, Impl::kAny);
            expect_within(ld.download(), loss, b.loss, "cross_entropy loss");
            const Buf got = got_d.download();
            expect_rounded_within(got, want, b.grad, "cross_entropy d_logits",
                                  "conformance cross_entropy d_logits");
            expect_padding_kept(got, want, "cross_entropy d_logits");
            for (int n = 1; n < N; n += 4)
                for (int v = 0; v < V; ++v) ASSERT_EQ(got.at(n, v), 0.0) << "ignored row " << n;
        }
}

TEST_P(LayerOps, CrossEntropyForwardLeavesLogits) {
    for (const auto& [N, V] : kCeShapes) {
        SCOPED_TRACE(fmt::format("N={} V={}", N, V));
        const CeInputs in(N, V);
        Buf loss = poisoned(kF32, 1, N);
        DevBuf zd = up(in.logits), ld = up(loss), td = up(in.targets);
        ref().cross_entropy_forward(loss.vec(), in.logits.cmat(), in.targets.cvec());
        be().cross_entropy_forward(ld.vec(), zd.cmat(), td.cvec());
        expect_within(ld.download(), loss,
                      cross_entropy_bound(in.logits.values(), in.tv, N, V, 1.0, Impl::kAny).loss,
                      "cross_entropy_forward loss");
        EXPECT_TRUE(zd.download().same_bytes(in.logits));
    }
}

// The vocab-parallel pieces. Stats: lse as the fused loss's, the target logit a copy (exact);
// targets outside the block (-1, >= V) give 0; a block without columns gives lse = -inf.
// Backward: exp of the fp32 difference z − lse (u |z − lse|) and the exponential's own error.
void check_ce_stats_and_backward(Backend& be, Backend& ref, const CeInputs& in) {
    const int N = in.N, V = in.V;
    SCOPED_TRACE(fmt::format("N={} V={}", N, V));
    std::vector<int32_t> tv = in.tv;
    tv[3] = -1;
    tv[size_t(N - 1)] = V + 10;
    const auto targets = Ints<int32_t>::row(DType::I32, tv);
    DevBuf zd(be, in.logits), td(be, targets);
    for (int64_t cols : {int64_t(V), int64_t(0)}) {
        SCOPED_TRACE("columns " + std::to_string(cols));
        Buf lse = poisoned(kF32, 1, N), zt = poisoned(kF32, 1, N);
        DevBuf lsed(be, lse), ztd(be, zt);
        ref.cross_entropy_stats(lse.vec(), zt.vec(), in.logits.cmat().col_slice(0, cols),
                                targets.cvec());
        be.cross_entropy_stats(lsed.vec(), ztd.vec(), zd.cmat().col_slice(0, cols), td.cvec());
        if (cols > 0) {
            expect_within(lsed.download(), lse, ce_lse_bound(in.logits.values(), N, V, Impl::kAny),
                          "cross_entropy_stats lse");
        } else {
            expect_exact(lsed.download(), lse, "cross_entropy_stats lse without columns");
        }
        expect_exact(ztd.download(), zt, "cross_entropy_stats target logit");
    }
    EXPECT_TRUE(zd.download().same_bytes(in.logits));

    Buf lse(kF32, 1, N), zt(kF32, 1, N);
    ref.cross_entropy_stats(lse.vec(), zt.vec(), in.logits.cmat(), targets.cvec());
    DevBuf lsed(be, lse);
    const float d_scale = 0.37f;
    const DVec bound =
        ce_backward_bound(in.logits.values(), lse.values(), tv, N, V, d_scale, Impl::kAny);
    for (int mode = 0; mode < 4; ++mode) {  // in place, into F32, BF16, F16
        const DType gt = mode == 2 ? kBF16 : mode == 3 ? kF16 : kF32;
        SCOPED_TRACE(mode == 0 ? "backward in place" : std::string("backward ") + dname(gt));
        Buf d = mode == 0 ? in.logits : poisoned(gt, N, V, V + 3);
        DevBuf dd(be, d);
        ref.cross_entropy_backward(d.mat(), in.logits.cmat(), lse.cvec(), targets.cvec(), d_scale);
        be.cross_entropy_backward(dd.mat(), mode == 0 ? dd.cmat() : zd.cmat(), lsed.cvec(),
                                  td.cvec(), d_scale);
        expect_rounded_within(dd.download(), d, bound, "cross_entropy_backward",
                              "conformance cross_entropy_backward");
        expect_padding_kept(dd.download(), d, "cross_entropy_backward");
    }
}

TEST_P(LayerOps, CrossEntropyStatsAndBackward) {
    for (const auto& [N, V] : kCeShapes) check_ce_stats_and_backward(be(), ref(), CeInputs(N, V));
}

INSTANTIATE_TEST_SUITE_P(Conformance, LayerOps, ::testing::Values("cpu", "guarded", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ete::backend_test
