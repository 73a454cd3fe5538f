// tests/backend/conformance_test.cpp — every Backend op on any backend, through its memory
// interface only, against the reference backend: inputs uploaded, the op run, the backend
// synchronized, the outputs downloaded (device_buf.h) and compared with what make_ref_backend()
// computes on host copies of the same bytes. One test case per (op family, backend): "cpu",
// "guarded" (the CPU kernels on memory the host cannot touch: a harness that dereferenced backend
// memory would crash it) and "cuda" (skipped with cuda_unavailable_reason() where it cannot run).
//
// What each check proves. Outputs start poisoned (NaN / 0xA5 bytes), so an element the op does
// not write fails; ops that accumulate (+=, backend.h) start from the same random values on both
// sides instead. Outputs are strided (ld > cols) and their padding columns must come back as the
// reference leaves them (untouched). Shapes are small and awkward (rows 1..39, odd widths).
//
// Tolerances, per op, each with its reason where it is used:
//   - exact where backend.h or core/*.h define the result bit for bit: dtype conversion (round
//     to nearest even), fill, gathers (embedding rows), the integer ops (gemm_s8, quantize_s8),
//     NF4 dequantization (code · absmax in fp32, rounded once), min_max, quant_params, fake
//     quantization and its mask and backward (core/fake_quant.h's shared scalar code) and LSQ's
//     scale gradient ("summed in double in column order (every backend the same sums)");
//   - sums (GEMMs, column sums, scatters) within (n + 2) 2^-24 Σ|terms| (device_buf.h sum_tol);
//   - the int8 scalings (gemm_s8_scaled, dequantize_s32): an exact integer bracket scaled by a
//     few fp32 roundings, within 2^-21 of the terms' magnitude;
//   - the fused quantizations (rmsnorm_quantize, swiglu_quantize) exactly the backend's own two
//     ops (backend.h defines them so), and within one integer step of the reference's;
//   - the other float ops within the error estimate of their formula as any backend computes it
//     (backend_test_util.h's estimates with Impl::kAny: the CPU kernels' operations or CUDA's,
//     sums in any order), plus, for a 16-bit output, one rounding of its dtype (eps(dtype)
//     |want|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_buf.h"
#include "ete/backend/backend.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/quant/nf4.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

// ---- memory and elementwise ----

TEST_P(Ops, MemoryMovesBytesWhereTold) {
    std::vector<uint8_t> v(4000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 37 + 11);
    DeviceBuffer a(be(), v.size()), b(be(), v.size());
    DeviceBuffer z = DeviceBuffer::zeroed(be(), 3000);
    be().upload(a.data(), v.data(), v.size());
    be().copy_bytes(b.data(), a.data(), v.size());
    be().fill_bytes(static_cast<char*>(a.data()) + 401, 0x5A, 800);
    std::vector<uint8_t> ga(v.size()), gb(v.size()), gz(3000, 1);
    be().synchronize();
    be().download(ga.data(), a.data(), ga.size());
    be().download(gb.data(), b.data(), gb.size());
    be().download(gz.data(), z.data(), gz.size());
    std::vector<uint8_t> want = v;
    std::fill(want.begin() + 401, want.begin() + 1201, uint8_t(0x5A));
    EXPECT_EQ(ga, want);
    EXPECT_EQ(gb, v);
    EXPECT_EQ(gz, std::vector<uint8_t>(3000, 0));
}

// copy converts with one rounding to nearest even (backend.h): exact.
TEST_P(Ops, CopyConvertsBetweenEveryPairOfFloatDtypes) {
    for (DType dt : kFloats)
        for (DType st : kFloats) {
            SCOPED_TRACE(pair_name(dt, st));
            const Buf src = Buf::of(st, conversion_inputs(13 * 37, 1), 13, 37, 41);
            Buf want = poisoned(dt, 13, 37, 39);
            DevBuf s = up(src), d = up(want);
            ref().copy(want.mat(), src.cmat());
            be().copy(d.mat(), s.cmat());
            expect_exact(d.download(), want, "copy");
        }
    for (DType t : kFloats) {  // contiguous, one dtype: a byte copy where the backend has one
        const Buf src = Buf::of(t, conversion_inputs(5 * 40, 2), 5, 40);
        DevBuf s = up(src), d = up(poisoned(t, 5, 40));
        be().copy(d.mat(), s.cmat());
        expect_exact(d.download(), src, std::string("contiguous copy ") + dname(t));
    }
}

// fill stores the value rounded once into the dtype: exact.
TEST_P(Ops, FillStoresTheRoundedValue) {
    for (DType t : kFloats) {
        SCOPED_TRACE(dname(t));
        Buf want = poisoned(t, 9, 37, 40);
        DevBuf d = up(want);
        ref().fill(want.mat(), 0.1f);
        be().fill(d.mat(), 0.1f);
        expect_exact(d.download(), want, "fill");
    }
}

// add and scale: one fp32 operation on exact inputs, rounded once into x's dtype (one ulp).
TEST_P(Ops, AddAndScale) {
    const Tol one_op{0x1p-23, 0};
    for (DType xt : kFloats)
        for (DType yt : kFloats) {
            SCOPED_TRACE(pair_name(xt, yt));
            const Buf x0 = rnd(xt, 11, 37, 40, 3), y = rnd(yt, 11, 37, 45, 4);
            Buf want = x0;
            DevBuf x = up(x0), yd = up(y);
            ref().add(want.mat(), y.cmat());
            be().add(x.mat(), yd.cmat());
            expect_near(x.download(), want, one_op, "add");
        }
    for (DType t : kFloats) {
        SCOPED_TRACE(dname(t));
        const Buf x0 = Buf::of(t, random_vec(301, 5, -3.0, 3.0));
        Buf want = x0;
        DevBuf x = up(x0);
        ref().scale(want.vec(), 0.3f);
        be().scale(x.vec(), 0.3f);
        expect_near(x.download(), want, one_op, "scale");
    }
}

// y = x · keep / (1 - p), or y += that. The keep mask is defined bit for bit (DropoutMask); the
// value is fp32 arithmetic rounded once: x · (1 / (1 - p)) or x / (1 - p) differ by an fp32 ulp
// of |v| <= 1.43, and the accumulation adds one fp32 rounding of |y + v| <= 2.43 (atol 2^-21).
// A wrong keep bit is off by |v|, far outside.
TEST_P(Ops, DropoutKeepsTheMasksElements) {
    DropoutMask m;
    m.seed = 0x5eed;
    m.stream = 7;
    m.row0 = 100;
    m.row_stride = 517;
    m.col0 = 11;
    m.p = 0.3f;
    const DType pairs[][2] = {{kF32, kF32}, {kBF16, kBF16}, {kF32, kBF16}, {kBF16, kF16}};
    for (const auto& pr : pairs)
        for (bool acc : {false, true}) {
            SCOPED_TRACE(pair_name(pr[0], pr[1]) + (acc ? " accumulate" : ""));
            const Buf x = rnd(pr[1], 13, 37, 41, 6);
            const Buf y0 = acc ? rnd(pr[0], 13, 37, 39, 7) : poisoned(pr[0], 13, 37, 39);
            Buf want = y0;
            DevBuf xd = up(x), y = up(y0);
            ref().dropout(want.mat(), x.cmat(), m, acc);
            be().dropout(y.mat(), xd.cmat(), m, acc);
            expect_near(y.download(), want, Tol{0x1p-22, 0x1p-21}, "dropout");
        }
}

// A sum of squares in double in another order: squares of floats are exact in double, so two
// orders of n positive terms differ by at most twice gamma_n(2^-53) of the sum. Non-finite with
// any element.
TEST_P(Ops, SumSquares) {
    for (DType t : kFloats) {
        SCOPED_TRACE(dname(t));
        Buf x = Buf::of(t, random_vec(100003, 8, -3.0, 3.0));  // several blocks of any reduction
        const double want = ref().sum_squares(x.cvec());
        EXPECT_NEAR(be().sum_squares(up(x).cvec()), want,
                    testing::reorder_worst(double(x.cols()), kUnitF64) * want);
        for (float bad : {INFINITY, NAN}) {
            x.put(70001, bad);
            EXPECT_FALSE(std::isfinite(be().sum_squares(up(x).cvec()))) << bad;
        }
    }
}

// ---- matrix products ----

// Σ_k |op(a)[i, k] op(b)[k, j]| (M, N): the scale of a product's rounding error.
DVec abs_products(const Buf& a, bool ta, const Buf& b, bool tb) {
    const int64_t M = ta ? a.cols() : a.rows(), K = ta ? a.rows() : a.cols();
    const int64_t N = tb ? b.rows() : b.cols();
    const DVec av = a.values(), bv = b.values();  // row-major, a.cols() and b.cols() wide
    DVec s(size_t(M * N), 0.0);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            for (int64_t k = 0; k < K; ++k)
                s[size_t(i * N + j)] +=
                    std::fabs(av[size_t(ta ? k * a.cols() + i : i * a.cols() + k)] *
                              bv[size_t(tb ? j * b.cols() + k : k * b.cols() + j)]);
    return s;
}

// Per-element bound of c = alpha op(a) op(b) + beta c0: K products (exact in fp32 for 16-bit
// operands) summed with the beta term in fp32, then c's rounding (device_buf.h sum_tol).
DVec gemm_tol(const Buf& a, bool ta, const Buf& b, bool tb, const Buf& c0, const Buf& want,
              float alpha, float beta) {
    const DVec ad = abs_products(a, ta, b, tb), w = want.values(), c0v = c0.values();
    const int64_t K = ta ? a.rows() : a.cols();
    DVec tol(ad.size());
    for (size_t i = 0; i < ad.size(); ++i) {
        const double c = beta != 0 ? std::fabs(beta * c0v[i]) : 0.0;
        tol[i] = sum_tol(alpha * ad[i] + c, K + 1, want.dtype(), w[i]);
    }
    return tol;
}

// Odd sizes, a row or column of one, and a product over more than one 64-wide tile each way.
constexpr GemmDims kGemmDims[] = {{13, 21, 37}, {33, 7, 65}, {1, 9, 5}, {70, 67, 41}};

// Every transpose, beta 0 (c poisoned: beta == 0 never reads c) and 1, strided a, b and c.
void check_gemm(Backend& be, Backend& ref, DType ab, DType ct) {
    const float alpha = 0.5f;
    uint32_t seed = 10;
    for (GemmDims d : kGemmDims)
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (float beta : {0.0f, 1.0f}) {
                    SCOPED_TRACE(fmt::format("{} -> {} {}x{}x{} ta={} tb={} beta={}", dname(ab),
                                             dname(ct), d.M, d.N, d.K, ta, tb, beta));
                    const int ar = ta ? d.K : d.M, ac = ta ? d.M : d.K;
                    const int br = tb ? d.N : d.K, bc = tb ? d.K : d.N;
                    const Buf a = rnd(ab, ar, ac, ac + 3, seed++),
                              b = rnd(ab, br, bc, bc + 5, seed++);
                    const Buf c0 = beta != 0 ? rnd(ct, d.M, d.N, d.N + 2, seed++)
                                             : poisoned(ct, d.M, d.N, d.N + 2);
                    Buf want = c0;
                    DevBuf ad(be, a), bd(be, b), c(be, c0);
                    ref.gemm(a.cmat(), ta, b.cmat(), tb, want.mat(), alpha, beta);
                    be.gemm(ad.cmat(), ta, bd.cmat(), tb, c.mat(), alpha, beta);
                    expect_within(c.download(), want, gemm_tol(a, ta, b, tb, c0, want, alpha, beta),
                                  "gemm");
                }
}

TEST_P(Ops, GemmF32) {
    check_gemm(be(), ref(), kF32, kF32);
}

TEST_P(Ops, Gemm16) {
    if (gemm16_missing()) GTEST_SKIP() << cpu::dnnl_info() << ": 16-bit GEMM needs oneDNN";
    for (DType ab : {kBF16, kF16})
        for (DType ct : {kF32, ab}) check_gemm(be(), ref(), ab, ct);
}

// Odd widths put row starts mid-byte and mid-block; 24 x 70 has a partial last block.
struct Nf4Case {
    int64_t rows, cols;
    int blocksize;
    bool dq;
};
constexpr Nf4Case kNf4Cases[] = {{24, 70, 64, true}, {18, 45, 32, false}};

Nf4Tensor random_nf4(const Nf4Case& c, uint32_t seed) {
    FVec w = random_vec(size_t(c.rows * c.cols), seed, -0.2, 0.2);
    for (int64_t r = 0; r < c.rows; r += 3) w[size_t(r * c.cols)] *= 4.0f;  // varied absmax
    return nf4_quantize(w.data(), c.rows, c.cols, {c.blocksize, c.dq});
}

// dequantize_nf4 is code · absmax in fp32 rounded once into out's dtype: exact.
TEST_P(Ops, Nf4Dequantize) {
    for (const Nf4Case& s : kNf4Cases) {
        const Nf4Tensor q = random_nf4(s, 20);
        const Nf4Buffer wd(be(), q), wr(ref(), q);
        for (DType t : kFloats) {
            SCOPED_TRACE(fmt::format("{}x{} dq={} {}", s.rows, s.cols, s.dq, dname(t)));
            const int64_t row0 = 3, n = s.rows - 5;
            Buf want = poisoned(t, n, s.cols, s.cols + 3);
            DevBuf out = up(want);
            ref().dequantize_nf4(want.mat(), wr.view(), row0);
            be().dequantize_nf4(out.mat(), wd.view(), row0);
            expect_exact(out.download(), want, "dequantize_nf4");
        }
    }
}

// gemm_nf4 is dequantize_nf4 (into a's dtype) then gemm: the GEMM bound with W so rounded.
void check_gemm_nf4(Backend& be, Backend& ref, DType t) {
    uint32_t seed = 30;
    for (const Nf4Case& s : kNf4Cases) {
        const Nf4Tensor q = random_nf4(s, 21);
        const Nf4Buffer wd(be, q), wr(ref, q);
        FVec wf(size_t(q.numel()));
        nf4_dequantize_ref(q, wf.data());
        const Buf w = Buf::of(t, wf, s.rows, s.cols);
        for (bool trans_w : {true, false})
            for (float beta : {0.0f, 1.0f}) {
                SCOPED_TRACE(fmt::format("{}x{} dq={} {} trans_w={} beta={}", s.rows, s.cols, s.dq,
                                         dname(t), trans_w, beta));
                const int64_t M = 9, K = trans_w ? s.cols : s.rows, N = trans_w ? s.rows : s.cols;
                const Buf a = rnd(t, M, K, K + 3, seed++);
                const Buf c0 =
                    beta != 0 ? rnd(kF32, M, N, N + 2, seed++) : poisoned(kF32, M, N, N + 2);
                Buf want = c0;
                DevBuf ad(be, a), c(be, c0);
                ref.gemm_nf4(a.cmat(), wr.view(), trans_w, want.mat(), 0.5f, beta);
                be.gemm_nf4(ad.cmat(), wd.view(), trans_w, c.mat(), 0.5f, beta);
                expect_within(c.download(), want,
                              gemm_tol(a, false, w, trans_w, c0, want, 0.5f, beta), "gemm_nf4");
            }
    }
}

TEST_P(Ops, Nf4GemmF32) {
    check_gemm_nf4(be(), ref(), kF32);
}

TEST_P(Ops, Nf4Gemm16) {
    if (gemm16_missing()) GTEST_SKIP() << cpu::dnnl_info() << ": 16-bit GEMM needs oneDNN";
    for (DType t : {kBF16, kF16}) check_gemm_nf4(be(), ref(), t);
}

// ---- bias and embeddings ----

// Forward: one fp32 addition rounded once into y's dtype. Backward: fp32 column sums (+=).
TEST_P(Ops, Bias) {
    const int64_t N = 13, C = 37;
    for (DType t : kFloats) {
        SCOPED_TRACE(dname(t));
        const Buf y0 = rnd(t, N, C, C + 3, 80), b = f32_row(random_vec(size_t(C), 81));
        Buf want = y0;
        DevBuf y = up(y0), bd = up(b);
        ref().bias_forward(want.mat(), b.cvec());
        be().bias_forward(y.mat(), bd.cvec());
        expect_near(y.download(), want, Tol{0x1p-23, 0}, "bias_forward");

        const Buf dy = rnd(t, N, C, C + 4, 82), db0 = f32_row(random_vec(size_t(C), 83));
        Buf dwant = db0;
        DevBuf dyd = up(dy), db = up(db0);
        ref().bias_backward(dwant.vec(), dy.cmat());
        be().bias_backward(db.vec(), dyd.cmat());
        DVec tol;
        for (int64_t c = 0; c < C; ++c) {
            double s = std::fabs(db0.at(0, c));
            for (int64_t n = 0; n < N; ++n) s += std::fabs(dy.at(n, c));
            tol.push_back(sum_tol(s, N + 1, kF32, dwant.at(0, c)));
        }
        expect_within(db.download(), dwant, tol, "bias_backward");
    }
}

// Forward gathers table rows (ids outside a vocab shard give zeros): exact. Backward scatters
// d_out rows into an F32 table gradient (+=): sums over the rows sharing an id.
TEST_P(Ops, Embedding) {
    const int V = 50, N = 29, C = 37;
    const std::vector<int32_t> idv = random_ids(N, V, 90);
    const auto ids = Ints<int32_t>::row(DType::I32, idv);
    for (const auto& [first, rows] : {std::pair<int, int>{0, V}, {10, 25}})
        for (DType ot : kFloats) {
            DevBuf idd = up(ids);
            for (DType wt : kFloats) {
                SCOPED_TRACE(fmt::format("first_id={} {}", first, pair_name(ot, wt)));
                const Buf table = rnd(wt, rows, C, C + 1, 91);
                Buf want = poisoned(ot, N, C, C + 3);
                DevBuf out = up(want), td = up(table);
                ref().embedding_forward(want.mat(), ids.cvec(), table.cmat(), first);
                be().embedding_forward(out.mat(), idd.cvec(), td.cmat(), first);
                expect_exact(out.download(), want, "embedding_forward");
            }
            SCOPED_TRACE(fmt::format("first_id={} d_out {}", first, dname(ot)));
            const Buf d_out = rnd(ot, N, C, C + 4, 92), dt0 = rnd(kF32, rows, C, C + 2, 93);
            Buf want = dt0;
            DevBuf dod = up(d_out), dt = up(dt0);
            ref().embedding_backward(want.mat(), d_out.cmat(), ids.cvec(), first);
            be().embedding_backward(dt.mat(), dod.cmat(), idd.cvec(), first);
            DVec tol;
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < C; ++c) {
                    double s = std::fabs(dt0.at(r, c));
                    int64_t n_terms = 0;
                    for (int n = 0; n < N; ++n)
                        if (idv[size_t(n)] - first == r) s += std::fabs(d_out.at(n, c)), ++n_terms;
                    tol.push_back(sum_tol(s, n_terms + 1, kF32, want.at(r, c)));
                }
            expect_within(dt.download(), want, tol, "embedding_backward");
        }
}

// out += wpe[t - doc_start]: one fp32 addition rounded into out's dtype. d_wpe += sums over the
// (b, t) at each position, in fp32 or better.
TEST_P(Ops, PosEmbedding) {
    const int B = 3, T = 13, C = 37, P = T + 4;  // wpe holds more positions than T
    const std::vector<int32_t> starts = packed_starts(B, T);
    const auto doc = Ints<int32_t>::row(DType::I32, starts);
    for (bool packed : {false, true})
        for (DType ot : kFloats) {
            SCOPED_TRACE(fmt::format("{} packed={}", dname(ot), packed));
            DevBuf docd = up(doc);
            const CVec doc_ref = packed ? doc.cvec() : CVec{},
                       doc_dev = packed ? docd.cvec() : CVec{};
            const Buf wpe = rnd(kF32, P, C, C + 2, 100), out0 = rnd(ot, B * T, C, C + 3, 101);
            Buf want = out0;
            DevBuf wd = up(wpe), out = up(out0);
            ref().pos_embedding_forward(want.mat(), wpe.cmat(), doc_ref, B, T);
            be().pos_embedding_forward(out.mat(), wd.cmat(), doc_dev, B, T);
            expect_near(out.download(), want, Tol{0x1p-23, 0}, "pos_embedding_forward");

            const Buf d_out = rnd(ot, B * T, C, C + 1, 102), dw0 = rnd(kF32, P, C, C + 2, 103);
            Buf dwant = dw0;
            DevBuf dod = up(d_out), dw = up(dw0);
            ref().pos_embedding_backward(dwant.mat(), d_out.cmat(), doc_ref, B, T);
            be().pos_embedding_backward(dw.mat(), dod.cmat(), doc_dev, B, T);
            DVec tol;
            for (int p = 0; p < P; ++p)
                for (int c = 0; c < C; ++c) {
                    double s = std::fabs(dw0.at(p, c));
                    int64_t n_terms = 0;
                    for (int r = 0; r < B * T; ++r)
                        if (r % T - (packed ? starts[size_t(r)] : 0) == p)
                            s += std::fabs(d_out.at(r, c)), ++n_terms;
                    tol.push_back(sum_tol(s, n_terms + 1, kF32, dwant.at(p, c)));
                }
            expect_within(dw.download(), dwant, tol, "pos_embedding_backward");
        }
}

// ---- optimizer ----

// Two steps (the second with grad_scale 0.5). A backend may contract a · b + c into fma where the
// reference does not (CUDA rounds every operation): both are evaluations of the same two steps,
// each within the running bound of the exact values (adamw_step_ev), so within twice it of each
// other. The compute copy is the backend's own new p rounded once: exact.
TEST_P(Ops, AdamW) {
    const int64_t n = 1003;
    const float b1 = 0.9f, b2 = 0.999f;
    for (int copy = 0; copy < 3; ++copy) {  // no compute copy, BF16, F16
        const DType ct = copy == 1 ? kBF16 : kF16;
        SCOPED_TRACE(copy == 0 ? "no compute copy" : dname(ct));
        Buf p = Buf::of(kF32, random_vec(size_t(n), 230, -3.0, 3.0));
        Buf m = Buf::of(kF32, FVec(size_t(n), 0.0f)), v = m, pc = poisoned(ct, 1, n);
        DevBuf pd = up(p), md = up(m), vd = up(v), pcd = up(pc);
        std::vector<AdamEv> st;
        for (double pi : p.values()) st.push_back({f32(pi), f32(0), f32(0)});
        for (int t = 1; t <= 2; ++t) {
            AdamWStep s{1e-3f,
                        b1,
                        b2,
                        1e-8f,
                        0.1f,
                        1.0f - std::pow(b1, float(t)),
                        1.0f - std::pow(b2, float(t))};
            s.grad_scale = t == 1 ? 1.0f : 0.5f;
            const Buf g = Buf::of(kF32, random_vec(size_t(n), 231 + uint32_t(t), -1e-2, 1e-2));
            DevBuf gd = up(g);
            ref().adamw_step(p.vec(), g.cvec(), m.vec(), v.vec(), s, copy ? pc.vec() : Vec{});
            adamw_step_ev(st, g.floats(), s);
            be().adamw_step(pd.vec(), gd.cvec(), md.vec(), vd.vec(), s, copy ? pcd.vec() : Vec{});
        }
        const Buf p_got = pd.download();
        DVec bp, bm, bv;
        for (const AdamEv& a : st)
            bp.push_back(2 * a.p.e), bm.push_back(2 * a.m.e), bv.push_back(2 * a.v.e);
        expect_within(p_got, p, bp, "adamw p");
        expect_within(md.download(), m, bm, "adamw m");
        expect_within(vd.download(), v, bv, "adamw v");
        if (copy) expect_exact(pcd.download(), Buf::of(ct, p_got.floats()), "adamw compute copy");
    }
}

INSTANTIATE_TEST_SUITE_P(Conformance, Ops, ::testing::Values("cpu", "guarded", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ete::backend_test
