// tests/backend/kernels16_test.cpp — the CPU backend's ops on bf16 and fp16 views (other than
// GEMM, attention and the loss) against the reference backend, which widens 16-bit inputs
// exactly, computes in f32 with double accumulations and rounds each output once.
//
// Inputs are random values rounded to their dtype, so both backends read the same exact numbers.
// Ops that load, do one f32 operation and store (copy, fill, add, scale, bias, embeddings) round
// the same f32 value the reference rounds: bit-identical. Ops with transcendental functions or
// reductions (norms, SwiGLU, GELU) differ from the reference in f32 before the one rounding:
// the f32 computation's error estimate on these exact inputs (backend_test_util.h, as the f32
// tests) plus one ulp of the output dtype (eps * |want|). Outputs and inputs are strided
// (ld > cols) where the op takes a row stride.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/dtype.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"

namespace ete {
namespace kernels16_test {

using namespace backend_test;

constexpr DType kFloat[] = {DType::F32, DType::BF16, DType::F16};
constexpr DType k16[] = {DType::BF16, DType::F16};

std::string tag(std::initializer_list<DType> ts, Shape s) {
    std::string r;
    for (DType t : ts) r += std::string(dname(t)) + " ";
    return r + name(s);
}

// (N, C) of random values in [lo, hi) rounded to t, rows C + 3 apart (padding -7).
Buf rnd(DType t, Shape s, uint32_t seed, double lo = -1.0, double hi = 1.0) {
    return Buf::of(t, random_vec(size_t(s.N) * s.C, seed, lo, hi), s.N, s.C, s.C + 3);
}

class Kernels16 : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

// ---- data movement ----

// x rounded to t by core/dtype.h (nearest even).
float rounded(DType t, float x) {
    return t == DType::BF16  ? bf16_to_f32(f32_to_bf16(x))
           : t == DType::F16 ? f16_to_f32(f32_to_f16(x))
                             : x;
}

// dst (one dtype) = src (another), strided on both sides: bit for bit the core/dtype.h
// conversion (rounding to nearest even), as the reference does it; NaN stays NaN.
TEST_F(Kernels16, CopyConvertsEveryPairOfDtypesLikeCoreDtype) {
    for (DType dt : kFloat)
        for (DType st : kFloat)
            for (Shape s : shapes()) {
                const std::string what = "copy " + tag({st, dt}, s);
                Buf src = Buf::of(st, conversion_inputs(size_t(s.N) * s.C, 1), s.N, s.C, s.C + 5);
                Buf dst = Buf::of(dt, FVec(size_t(s.N) * s.C, 3.0f), s.N, s.C, s.C + 2);
                Buf dst_ref = dst;
                cpu_->copy(dst.mat(), src.cmat());
                ref_->copy(dst_ref.mat(), src.cmat());
                expect_bitwise(dst, dst_ref, what);
                int bad = 0;
                for (int64_t r = 0; r < s.N; ++r)
                    for (int64_t c = 0; c < s.C; ++c) {
                        const float x = float(src.at(r, c)), y = float(dst.at(r, c));
                        const float want = rounded(dt, x);
                        const bool ok = std::isnan(x) ? std::isnan(y) : y == want;
                        if (!ok && bad++ < 3)
                            ADD_FAILURE() << what << " (" << r << ", " << c << "): " << x
                                          << " became " << y << ", want " << want;
                    }
                EXPECT_EQ(bad, 0) << what;
            }
}

TEST_F(Kernels16, CopyOfContiguousViewsIsExact) {
    for (DType t : kFloat) {
        Buf src = Buf::of(t, conversion_inputs(1000, 2), 10, 100), dst(t, 10, 100);
        cpu_->copy(dst.mat(), src.cmat());
        expect_bitwise(dst, src, std::string("contiguous copy ") + dname(t));
    }
    Buf a(DType::F32, 3, 4), b(DType::BF16, 4, 3);
    EXPECT_THROW(cpu_->copy(b.mat(), a.cmat()), Error);  // shapes differ
}

TEST_F(Kernels16, FillStoresTheRoundedValueAndLeavesPadding) {
    for (DType t : kFloat)
        for (Shape s : shapes())
            for (float value : {0.0f, 0.1f, -3.7f, 1e-7f}) {
                Buf b = Buf::of(t, FVec(size_t(s.N) * s.C, 5.0f), s.N, s.C, s.C + 3);
                Buf want = Buf::of(t, FVec(size_t(s.N) * s.C, value), s.N, s.C, s.C + 3);
                cpu_->fill(b.mat(), value);
                expect_bitwise(b, want, "fill " + tag({t}, s));  // the padding -7 included
            }
}

// x += y for any pair of dtypes: one f32 addition rounded once.
TEST_F(Kernels16, AddIsBitIdenticalToRefForEveryPairOfDtypes) {
    for (DType xt : kFloat)
        for (DType yt : kFloat)
            for (Shape s : shapes()) {
                Buf x = rnd(xt, s, 3), y = rnd(yt, s, 4), x_ref = x;
                cpu_->add(x.mat(), y.cmat());
                ref_->add(x_ref.mat(), y.cmat());
                expect_bitwise(x, x_ref, "add " + tag({xt, yt}, s));
            }
}

TEST_F(Kernels16, ScaleAndSumSquaresMatchRef) {
    for (DType t : k16)
        for (int64_t n : {1, 7, 31, 32, 33, 1000, 100003}) {
            const std::string what = std::string(dname(t)) + " n=" + std::to_string(n);
            Buf x = Buf::of(t, random_vec(size_t(n), 5, -3.0, 3.0)), x_ref = x;
            // squares exact in double, summed in another order: two orders of n positive terms.
            const double want = ref_->sum_squares(x.cvec());
            EXPECT_NEAR(cpu_->sum_squares(x.cvec()), want,
                        testing::reorder_worst(double(n), kUnitF64) * want)
                << "sum_squares " << what;
            cpu_->scale(x.vec(), 0.3f);
            ref_->scale(x_ref.vec(), 0.3f);
            expect_bitwise(x, x_ref, "scale " + what);
        }
}

// ---- bias and embeddings: one f32 operation per element, rounded once ----

TEST_F(Kernels16, BiasOnSixteenBitActivationsIsBitIdenticalToRef) {
    for (DType t : k16)
        for (Shape s : shapes()) {
            Buf y = rnd(t, s, 6), y_ref = y;
            FVec b = random_vec(size_t(s.C), 7), d_b = random_vec(size_t(s.C), 8), d_b_ref = d_b;
            cpu_->bias_forward(y.mat(), host_cvec(b));
            ref_->bias_forward(y_ref.mat(), host_cvec(b));
            expect_bitwise(y, y_ref, "bias_forward " + tag({t}, s));
            cpu_->bias_backward(host_vec(d_b), y.cmat());  // F32 d_b += column sums of 16-bit d_y
            ref_->bias_backward(host_vec(d_b_ref), y.cmat());
            expect_bitwise(d_b, d_b_ref, "bias_backward " + tag({t}, s));
        }
}

TEST_F(Kernels16, EmbeddingsOfAnyDtypesAreBitIdenticalToRef) {
    const int V = 50, first = 10, rows = 25;  // a shard: ids [10, 35) of [0, 50)
    for (DType ot : kFloat)
        for (DType wt : kFloat)
            for (Shape s : shapes()) {
                const std::string what = tag({ot, wt}, s);
                std::vector<int32_t> ids = random_ids(s.N, V, 9);
                Buf table = Buf::of(wt, random_vec(size_t(rows) * s.C, 10), rows, s.C, s.C + 1);
                Buf out = Buf::of(ot, FVec(size_t(s.N) * s.C, NAN), s.N, s.C, s.C + 3), o2 = out;
                cpu_->embedding_forward(out.mat(), host_cvec(ids), table.cmat(), first);
                ref_->embedding_forward(o2.mat(), host_cvec(ids), table.cmat(), first);
                expect_bitwise(out, o2, "embedding_forward " + what);
                if (wt != DType::F32) continue;  // the table gradient is F32
                Buf d_out = rnd(ot, s, 11);
                FVec d_table = random_vec(size_t(rows) * s.C, 12), d_ref = d_table;
                cpu_->embedding_backward(host_mat(d_table, rows, s.C), d_out.cmat(), host_cvec(ids),
                                         first);
                ref_->embedding_backward(host_mat(d_ref, rows, s.C), d_out.cmat(), host_cvec(ids),
                                         first);
                expect_bitwise(d_table, d_ref, "embedding_backward " + what);
            }
}

TEST_F(Kernels16, PosEmbeddingOnSixteenBitActivationsIsBitIdenticalToRef) {
    for (DType t : k16)
        for (Shape s : shapes())
            for (bool packed : {false, true}) {
                const int B = 3, T = s.N, C = s.C;
                const std::string what = tag({t}, s) + (packed ? " packed" : "");
                std::vector<int32_t> starts = packed_starts(B, T);
                const CVec doc = packed ? host_cvec(starts) : CVec{};
                // wpe holds more positions than T (the model's context), rows C + 2 apart
                const int P = T + 5;
                Buf wpe = Buf::of(DType::F32, random_vec(size_t(P) * C, 13), P, C, C + 2);
                Buf out = rnd(t, {B * T, C}, 14), out_ref = out;
                cpu_->pos_embedding_forward(out.mat(), wpe.cmat(), doc, B, T);
                ref_->pos_embedding_forward(out_ref.mat(), wpe.cmat(), doc, B, T);
                expect_bitwise(out, out_ref, "pos_embedding_forward " + what);
                Buf d_wpe = Buf::of(DType::F32, random_vec(size_t(P) * C, 15), P, C, C + 2);
                Buf d_ref = d_wpe;
                cpu_->pos_embedding_backward(d_wpe.mat(), out.cmat(), doc, B, T);
                ref_->pos_embedding_backward(d_ref.mat(), out.cmat(), doc, B, T);
                expect_bitwise(d_wpe, d_ref, "pos_embedding_backward " + what);
            }
}

// ---- norms: x and out in any float dtype, F32 weights, statistics and d_x ----

TEST_F(Kernels16, RmsNormOnSixteenBitViewsMatchesRef) {
    const float eps = 1e-5f;
    for (DType xt : kFloat)
        for (DType ot : kFloat) {
            if (xt == DType::F32 && ot == DType::F32) continue;  // kernels_test.cpp
            for (Shape s : shapes()) {
                const std::string what = tag({xt, ot}, s);
                Buf x = rnd(xt, s, 16), out(ot, s.N, s.C, s.C + 2), out_ref = out;
                FVec w = random_vec(size_t(s.C), 17, 0.5, 1.5), rstd(size_t(s.N)), r_ref = rstd;
                cpu_->rmsnorm_forward(out.mat(), host_vec(rstd), x.cmat(), host_cvec(w), eps);
                ref_->rmsnorm_forward(out_ref.mat(), host_vec(r_ref), x.cmat(), host_cvec(w), eps);
                // f32 statistics of the same exact inputs: as the f32 test; out rounded once.
                const NormBound fb =
                    rmsnorm_forward_bound(x.values(), dvec(w), s.N, s.C, eps, Impl::kCpu);
                expect_within_bound(dvec(rstd), dvec(r_ref), fb.rstd, "rmsnorm rstd " + what,
                                    "rmsnorm rstd (16-bit inputs)");
                expect_rounded_within(out, out_ref, fb.out, "rmsnorm out " + what, "rmsnorm out");

                // Backward: d_out in the output's dtype, x in its own; d_x, d_w F32 (+=).
                Buf d_out = rnd(ot, s, 18);
                FVec d_x = random_vec(size_t(s.N) * s.C, 19), d_w = random_vec(size_t(s.C), 20);
                const FVec d_x0 = d_x, d_w0 = d_w;
                FVec d_x_ref = d_x, d_w_ref = d_w;
                cpu_->rmsnorm_backward(host_mat(d_x, s.N, s.C), host_vec(d_w), d_out.cmat(),
                                       x.cmat(), host_cvec(w), host_cvec(r_ref));
                ref_->rmsnorm_backward(host_mat(d_x_ref, s.N, s.C), host_vec(d_w_ref), d_out.cmat(),
                                       x.cmat(), host_cvec(w), host_cvec(r_ref));
                // f32 outputs of exact inputs: the f32 test's estimate
                const NormBound bb =
                    rmsnorm_backward_bound(x.values(), dvec(w), dvec(r_ref), d_out.values(),
                                           dvec(d_x0), dvec(d_w0), s.N, s.C, Impl::kCpu);
                expect_within_bound(dvec(d_x), dvec(d_x_ref), bb.out, "rmsnorm d_x " + what,
                                    "rmsnorm d_x (16-bit inputs)");
                expect_within_bound(dvec(d_w), dvec(d_w_ref), bb.d_w, "rmsnorm d_w " + what,
                                    "rmsnorm d_w (16-bit inputs)");
            }
        }
}

TEST_F(Kernels16, LayerNormOnSixteenBitViewsMatchesRef) {
    const float eps = 1e-5f;
    for (DType xt : kFloat)
        for (DType ot : kFloat) {
            if (xt == DType::F32 && ot == DType::F32) continue;  // kernels_test.cpp
            for (Shape s : shapes()) {
                const std::string what = tag({xt, ot}, s);
                Buf x = rnd(xt, s, 21, -1.0, 3.0), out(ot, s.N, s.C, s.C + 2), out_ref = out;
                FVec w = random_vec(size_t(s.C), 22, 0.5, 1.5), b = random_vec(size_t(s.C), 23);
                FVec mean(size_t(s.N)), rstd(size_t(s.N)), mean_ref = mean, rstd_ref = rstd;
                cpu_->layernorm_forward(out.mat(), host_vec(mean), host_vec(rstd), x.cmat(),
                                        host_cvec(w), host_cvec(b), eps);
                ref_->layernorm_forward(out_ref.mat(), host_vec(mean_ref), host_vec(rstd_ref),
                                        x.cmat(), host_cvec(w), host_cvec(b), eps);
                const NormBound fb = layernorm_forward_bound(x.values(), dvec(w), dvec(b), s.N, s.C,
                                                             eps, Impl::kCpu);
                expect_within_bound(dvec(mean), dvec(mean_ref), fb.mean, "layernorm mean " + what,
                                    "layernorm mean (16-bit inputs)");
                expect_within_bound(dvec(rstd), dvec(rstd_ref), fb.rstd, "layernorm rstd " + what,
                                    "layernorm rstd (16-bit inputs)");
                expect_rounded_within(out, out_ref, fb.out, "layernorm out " + what,
                                      "layernorm out");

                Buf d_out = rnd(ot, s, 24);
                FVec d_x = random_vec(size_t(s.N) * s.C, 25), d_w = random_vec(size_t(s.C), 26);
                FVec d_b = random_vec(size_t(s.C), 27), d_x_ref = d_x, d_w_ref = d_w;
                FVec d_b_ref = d_b;
                const FVec d_x0 = d_x, d_w0 = d_w, d_b0 = d_b;
                cpu_->layernorm_backward(host_mat(d_x, s.N, s.C), host_vec(d_w), host_vec(d_b),
                                         d_out.cmat(), x.cmat(), host_cvec(w), host_cvec(mean_ref),
                                         host_cvec(rstd_ref));
                ref_->layernorm_backward(host_mat(d_x_ref, s.N, s.C), host_vec(d_w_ref),
                                         host_vec(d_b_ref), d_out.cmat(), x.cmat(), host_cvec(w),
                                         host_cvec(mean_ref), host_cvec(rstd_ref));
                // as the f32 test: d_x's cancelling terms scaled by rstd (C = 1: rstd 316)
                const NormBound bb = layernorm_backward_bound(
                    x.values(), dvec(w), dvec(mean_ref), dvec(rstd_ref), d_out.values(), dvec(d_x0),
                    dvec(d_w0), dvec(d_b0), s.N, s.C, Impl::kCpu);
                expect_within_bound(dvec(d_x), dvec(d_x_ref), bb.out, "layernorm d_x " + what,
                                    "layernorm d_x (16-bit inputs)");
                expect_within_bound(dvec(d_w), dvec(d_w_ref), bb.d_w, "layernorm d_w " + what,
                                    "layernorm d_w (16-bit inputs)");
                expect_within_bound(dvec(d_b), dvec(d_b_ref), bb.d_b, "layernorm d_b " + what,
                                    "layernorm d_b (16-bit inputs)");
            }
        }
}

// Norm dtype rules: the residual-stream gradient d_x and the weights are F32.
TEST_F(Kernels16, NormsRejectSixteenBitWeightsAndDx) {
    Buf x(DType::BF16, 4, 8), out(DType::BF16, 4, 8), dx16(DType::BF16, 4, 8);
    Buf w16(DType::BF16, 1, 8);
    FVec w(8, 1.0f), rstd(4, 1.0f), d_w(8);
    EXPECT_THROW(cpu_->rmsnorm_forward(out.mat(), host_vec(rstd), x.cmat(), w16.cvec(), 1e-5f),
                 Error);
    EXPECT_THROW(cpu_->rmsnorm_backward(dx16.mat(), host_vec(d_w), out.cmat(), x.cmat(),
                                        host_cvec(w), host_cvec(rstd)),
                 Error);
}

// ---- activations: one activation dtype for all their matrices ----

TEST_F(Kernels16, SwigluOnSixteenBitViewsMatchesRef) {
    for (DType t : k16)
        for (Shape s : shapes()) {
            const std::string what = tag({t}, s);
            const int F = s.C;
            Buf gu = Buf::of(t, activation_inputs(size_t(s.N) * 2 * F, 29), s.N, 2 * F, 2 * F + 3);
            Buf d_out = rnd(t, s, 30), out(t, s.N, F, F + 1), out_ref = out;
            Buf d_gu = Buf::of(t, FVec(size_t(s.N) * 2 * F, NAN), s.N, 2 * F, 2 * F + 5);
            Buf d_gu_ref = d_gu;
            cpu_->swiglu_forward(out.mat(), gu.cmat());
            ref_->swiglu_forward(out_ref.mat(), gu.cmat());
            cpu_->swiglu_backward(d_gu.mat(), d_out.cmat(), gu.cmat());
            ref_->swiglu_backward(d_gu_ref.mat(), d_out.cmat(), gu.cmat());
            // the f32 test's estimate on these exact inputs, plus one rounding of the output
            const ActBound bd = swiglu_bound(gu.values(), d_out.values(), s.N, F, Impl::kCpu);
            expect_rounded_within(out, out_ref, bd.out, "swiglu out " + what, "swiglu out");
            expect_rounded_within(d_gu, d_gu_ref, bd.d_in, "swiglu d_gate_up " + what,
                                  "swiglu d_gate_up");
            expect_padding(d_gu, -7.0f, "swiglu d_gate_up " + what);
        }
}

TEST_F(Kernels16, GeluOnSixteenBitViewsMatchesRef) {
    for (DType t : k16)
        for (Shape s : shapes()) {
            const std::string what = tag({t}, s);
            Buf x = Buf::of(t, activation_inputs(size_t(s.N) * s.C, 31), s.N, s.C, s.C + 3);
            Buf d_out = rnd(t, s, 32), out(t, s.N, s.C, s.C + 1), out_ref = out;
            Buf d_x = Buf::of(t, FVec(size_t(s.N) * s.C, NAN), s.N, s.C, s.C + 2), d_x_ref = d_x;
            cpu_->gelu_forward(out.mat(), x.cmat());
            ref_->gelu_forward(out_ref.mat(), x.cmat());
            cpu_->gelu_backward(d_x.mat(), d_out.cmat(), x.cmat());
            ref_->gelu_backward(d_x_ref.mat(), d_out.cmat(), x.cmat());
            // the f32 test's estimate on these exact inputs, plus one rounding of the output
            const ActBound bd = gelu_bound(x.values(), d_out.values(), Impl::kCpu);
            expect_rounded_within(out, out_ref, bd.out, "gelu out " + what, "gelu out");
            expect_rounded_within(d_x, d_x_ref, bd.d_in, "gelu d_x " + what, "gelu d_x");
            expect_padding(d_x, -7.0f, "gelu d_x " + what);
        }
}

TEST_F(Kernels16, ActivationsRejectMixedDtypes) {
    Buf gu(DType::BF16, 4, 16), out(DType::F16, 4, 8), x(DType::BF16, 4, 8);
    EXPECT_THROW(cpu_->swiglu_forward(out.mat(), gu.cmat()), Error);
    EXPECT_THROW(cpu_->gelu_forward(out.mat(), x.cmat()), Error);
}

}  // namespace kernels16_test
}  // namespace ete
