// tests/backend/kernels_test.cpp — the CPU backend's f32 ops other than GEMM, attention and the
// loss, against the reference backend (make_ref_backend, f32 views: the scalar templates of
// ref_kernels.h with double accumulators).
//
// Sizes: N in {1, 31, 32, 33} x C in {1, 7, 31, 32, 33, 64, 1000}, plus one shape large enough to
// take the OpenMP path. Ops whose CPU version does the same float operations in the same order as
// the reference are compared bit for bit; the others element by element within the error
// estimate of both computations (backend_test_util.h, "error estimates").
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/backend/cpu/simd_math.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"

namespace ete {
namespace {

using namespace backend_test;

// Distance in units in the last place between two finite floats of any sign.
int64_t ulp_distance(float a, float b) {
    auto key = [](float f) {
        int32_t i = std::bit_cast<int32_t>(f);
        return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);  // monotone in f
    };
    return std::abs(key(a) - key(b));
}

Mat m(FVec& v, int64_t rows, int64_t cols, int64_t ld = -1) {
    return host_mat(v, rows, cols, ld);
}
Vec v(FVec& x) {
    return host_vec(x);
}
CVec ids_of(const std::vector<int32_t>& ids) {
    return host_cvec(ids);
}

class Kernels : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

// ---- bias, embeddings, residual add, scale: same float ops as ref, so bit-identical ----

TEST_F(Kernels, BiasForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes()) {
        int ldy = s.C + 5;  // padded rows: the 5 extra columns must stay untouched
        FVec y = random_vec(size_t(s.N) * ldy, 1), b = random_vec(size_t(s.C), 2);
        FVec y_ref = y;
        cpu_->bias_forward(m(y, s.N, s.C, ldy), v(b));
        ref_->bias_forward(m(y_ref, s.N, s.C, ldy), v(b));
        expect_bitwise(y, y_ref, "bias_forward " + name(s));

        FVec d_b = random_vec(size_t(s.C), 3), d_b_ref = d_b;  // pre-filled: backward adds
        cpu_->bias_backward(v(d_b), m(y, s.N, s.C, ldy));
        ref_->bias_backward(v(d_b_ref), m(y, s.N, s.C, ldy));
        expect_bitwise(d_b, d_b_ref, "bias_backward " + name(s));
    }
}

TEST_F(Kernels, EmbeddingForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes())
        for (int V : {3, 50}) {  // V = 3: almost every id repeats, the scatter must not race
            std::vector<int32_t> ids = random_ids(s.N, V, 4);
            FVec table = random_vec(size_t(V) * s.C, 5);
            FVec out(size_t(s.N) * s.C, -7.0f), out_ref = out;
            cpu_->embedding_forward(m(out, s.N, s.C), ids_of(ids), m(table, V, s.C), 0);
            ref_->embedding_forward(m(out_ref, s.N, s.C), ids_of(ids), m(table, V, s.C), 0);
            expect_bitwise(out, out_ref, "embedding_forward " + name(s));

            FVec d_out = random_vec(size_t(s.N) * s.C, 6);
            FVec d_table = random_vec(size_t(V) * s.C, 7), d_table_ref = d_table;
            cpu_->embedding_backward(m(d_table, V, s.C), m(d_out, s.N, s.C), ids_of(ids), 0);
            ref_->embedding_backward(m(d_table_ref, V, s.C), m(d_out, s.N, s.C), ids_of(ids), 0);
            expect_bitwise(d_table, d_table_ref, "embedding_backward " + name(s));
        }
}

// A vocab-parallel shard holds table rows [first_id, first_id + rows): other ids give zero rows
// and no gradient. Two shards together are exactly the whole table (the other shard adds 0, and
// each table row sums the same d_out rows in the same order).
TEST_F(Kernels, EmbeddingShardsGiveZeroRowsOutsideTheirIdsAndSumToTheWholeTable) {
    const int V = 40, V0 = 17;  // shard 0: ids [0, 17), shard 1: ids [17, 40)
    for (Shape s : shapes()) {
        std::vector<int32_t> ids = random_ids(s.N, V, 8);
        FVec table = random_vec(size_t(V) * s.C, 9), d_out = random_vec(size_t(s.N) * s.C, 10);
        FVec shard0(table.begin(), table.begin() + V0 * s.C);
        FVec shard1(table.begin() + V0 * s.C, table.end());
        FVec full(size_t(s.N) * s.C), out0(full.size(), -7.0f), out1(full.size(), -7.0f);
        FVec out1_ref(full.size(), -7.0f);
        cpu_->embedding_forward(m(full, s.N, s.C), ids_of(ids), m(table, V, s.C), 0);
        cpu_->embedding_forward(m(out0, s.N, s.C), ids_of(ids), m(shard0, V0, s.C), 0);
        cpu_->embedding_forward(m(out1, s.N, s.C), ids_of(ids), m(shard1, V - V0, s.C), V0);
        ref_->embedding_forward(m(out1_ref, s.N, s.C), ids_of(ids), m(shard1, V - V0, s.C), V0);
        expect_bitwise(out1, out1_ref, "shard embedding_forward " + name(s));
        FVec sum(full.size());
        for (size_t i = 0; i < full.size(); ++i) {
            const bool mine0 = ids[i / size_t(s.C)] < V0;
            ASSERT_EQ(mine0 ? out1[i] : out0[i], 0.0f) << "row of another shard " << name(s);
            sum[i] = out0[i] + out1[i];
        }
        expect_bitwise(sum, full, "shards sum to the whole table " + name(s));

        FVec d_full(table.size(), 0.0f), d0(shard0.size(), 0.0f), d1(shard1.size(), 0.0f);
        FVec d1_ref = d1;
        cpu_->embedding_backward(m(d_full, V, s.C), m(d_out, s.N, s.C), ids_of(ids), 0);
        cpu_->embedding_backward(m(d0, V0, s.C), m(d_out, s.N, s.C), ids_of(ids), 0);
        cpu_->embedding_backward(m(d1, V - V0, s.C), m(d_out, s.N, s.C), ids_of(ids), V0);
        ref_->embedding_backward(m(d1_ref, V - V0, s.C), m(d_out, s.N, s.C), ids_of(ids), V0);
        expect_bitwise(d1, d1_ref, "shard embedding_backward " + name(s));
        d0.insert(d0.end(), d1.begin(), d1.end());
        expect_bitwise(d0, d_full, "shard gradients are the whole table's " + name(s));
    }
}

TEST_F(Kernels, PosEmbeddingForwardAndBackwardAreBitIdenticalToRef) {
    for (Shape s : shapes())
        for (int B : {1, 3}) {
            int T = s.N;
            FVec wpe = random_vec(size_t(T) * s.C, 8);
            FVec out = random_vec(size_t(B) * T * s.C, 9), out_ref = out;
            cpu_->pos_embedding_forward(m(out, B * T, s.C), m(wpe, T, s.C), {}, B, T);
            ref_->pos_embedding_forward(m(out_ref, B * T, s.C), m(wpe, T, s.C), {}, B, T);
            expect_bitwise(out, out_ref, "pos_embedding_forward " + name(s));

            FVec d_wpe = random_vec(size_t(T) * s.C, 10), d_wpe_ref = d_wpe;
            cpu_->pos_embedding_backward(m(d_wpe, T, s.C), m(out, B * T, s.C), {}, B, T);
            ref_->pos_embedding_backward(m(d_wpe_ref, T, s.C), m(out, B * T, s.C), {}, B, T);
            expect_bitwise(d_wpe, d_wpe_ref, "pos_embedding_backward " + name(s));
        }
}

// Packed rows: position t - s. The forward adds exactly wpe[t - s]; the backward keeps ref's
// order per position (rows in order, double), so both are bit-identical to ref; and an explicit
// all-zero doc_start is bit-identical to none.
TEST_F(Kernels, PosEmbeddingPackedIsBitIdenticalToRefAndRestartsPositions) {
    for (Shape s : shapes()) {
        const int B = 3, T = s.N, C = s.C;
        std::vector<int32_t> starts = packed_starts(B, T), zeros(size_t(B) * T, 0);
        FVec wpe = random_vec(size_t(T) * C, 13), base = random_vec(size_t(B) * T * C, 14);
        FVec out = base, out_ref = base, want = base;
        cpu_->pos_embedding_forward(m(out, B * T, C), m(wpe, T, C), ids_of(starts), B, T);
        ref_->pos_embedding_forward(m(out_ref, B * T, C), m(wpe, T, C), ids_of(starts), B, T);
        for (size_t r = 0; r < size_t(B) * T; ++r)
            for (int c = 0; c < C; ++c)
                want[r * C + c] += wpe[(r % size_t(T) - size_t(starts[r])) * C + size_t(c)];
        expect_bitwise(out, out_ref, "packed pos_embedding_forward " + name(s));
        expect_bitwise(out, want, "packed pos_embedding_forward (definition) " + name(s));

        FVec d_wpe = random_vec(size_t(T) * C, 15), d_wpe_ref = d_wpe;
        cpu_->pos_embedding_backward(m(d_wpe, T, C), m(out, B * T, C), ids_of(starts), B, T);
        ref_->pos_embedding_backward(m(d_wpe_ref, T, C), m(out, B * T, C), ids_of(starts), B, T);
        expect_bitwise(d_wpe, d_wpe_ref, "packed pos_embedding_backward " + name(s));

        FVec z_out = base, n_out = base, z_d = d_wpe, n_d = d_wpe;
        cpu_->pos_embedding_forward(m(z_out, B * T, C), m(wpe, T, C), ids_of(zeros), B, T);
        cpu_->pos_embedding_forward(m(n_out, B * T, C), m(wpe, T, C), {}, B, T);
        cpu_->pos_embedding_backward(m(z_d, T, C), m(out, B * T, C), ids_of(zeros), B, T);
        cpu_->pos_embedding_backward(m(n_d, T, C), m(out, B * T, C), {}, B, T);
        expect_bitwise(z_out, n_out, "all-zero doc_start forward " + name(s));
        expect_bitwise(z_d, n_d, "all-zero doc_start backward " + name(s));
    }
}

TEST_F(Kernels, PosEmbeddingRejectsInvalidDocStart) {
    std::vector<int32_t> starts = {0, 0, 3, 3};  // position 2 claims a document starting at 3
    FVec wpe(4 * 2), out(4 * 2);
    for (Backend* be : {cpu_.get(), ref_.get()}) {
        EXPECT_THROW(be->pos_embedding_forward(m(out, 4, 2), m(wpe, 4, 2), ids_of(starts), 1, 4),
                     Error)
            << be->name();
        EXPECT_THROW(be->pos_embedding_backward(m(wpe, 4, 2), m(out, 4, 2), ids_of(starts), 1, 4),
                     Error)
            << be->name();
    }
}

TEST_F(Kernels, AddAndScaleAreBitIdenticalToLoops) {
    for (int64_t n : {1, 7, 31, 32, 33, 1000, 100003}) {
        FVec x = random_vec(size_t(n), 11), y = random_vec(size_t(n), 12);
        FVec want = x;
        for (size_t i = 0; i < want.size(); ++i) want[i] = (want[i] + y[i]) * 0.3f;
        cpu_->add(m(x, 1, n), m(y, 1, n));
        cpu_->scale(v(x), 0.3f);
        expect_bitwise(x, want, "add+scale n=" + std::to_string(n));
    }
}

// add on strided views (a column block of a wider buffer, as residual slices are) touches only
// its columns.
TEST_F(Kernels, AddOnStridedViewsLeavesPaddingAlone) {
    for (Shape s : shapes()) {
        const int ldx = s.C + 3, ldy = s.C + 9;
        FVec x = random_vec(size_t(s.N) * ldx, 16), y = random_vec(size_t(s.N) * ldy, 17);
        FVec want = x;
        for (int n = 0; n < s.N; ++n)
            for (int c = 0; c < s.C; ++c) want[size_t(n) * ldx + c] += y[size_t(n) * ldy + c];
        cpu_->add(m(x, s.N, s.C, ldx), m(y, s.N, s.C, ldy));
        expect_bitwise(x, want, "strided add " + name(s));
    }
}

// ---- norms ----

TEST_F(Kernels, RmsNormMatchesRef) {
    const float eps = 1e-5f;
    for (Shape s : shapes()) {
        size_t nc = size_t(s.N) * s.C;
        FVec x = random_vec(nc, 13), w = random_vec(size_t(s.C), 14, 0.5, 1.5);
        FVec out(nc), rstd(size_t(s.N)), out_ref(nc), rstd_ref(size_t(s.N));
        cpu_->rmsnorm_forward(m(out, s.N, s.C), v(rstd), m(x, s.N, s.C), v(w), eps);
        ref_->rmsnorm_forward(m(out_ref, s.N, s.C), v(rstd_ref), m(x, s.N, s.C), v(w), eps);
        // rstd rounded to fp32 before it scales x: out off by 3 roundings, the reference by 1.
        const NormBound fb = rmsnorm_forward_bound(dvec(x), dvec(w), s.N, s.C, eps, Impl::kCpu);
        expect_within_bound(dvec(rstd), dvec(rstd_ref), fb.rstd, "rmsnorm rstd " + name(s),
                            "rmsnorm rstd F32");
        expect_within_bound(dvec(out), dvec(out_ref), fb.out, "rmsnorm out " + name(s),
                            "rmsnorm out F32");

        FVec d_out = random_vec(nc, 15);
        FVec d_x = random_vec(nc, 16), d_w = random_vec(size_t(s.C), 17);  // pre-filled: +=
        const FVec d_x_ref0 = d_x, d_w_ref0 = d_w;
        FVec d_x_ref = d_x, d_w_ref = d_w;
        cpu_->rmsnorm_backward(m(d_x, s.N, s.C), v(d_w), m(d_out, s.N, s.C), m(x, s.N, s.C), v(w),
                               v(rstd_ref));
        ref_->rmsnorm_backward(m(d_x_ref, s.N, s.C), v(d_w_ref), m(d_out, s.N, s.C), m(x, s.N, s.C),
                               v(w), v(rstd_ref));
        // d_x: fp32 arithmetic on r (dy w - xhat k), k a row sum of C terms; d_w: fp32 sums over
        // the N rows (the reference's a running sum). Bounds relative to the terms, which cancel.
        const NormBound bb =
            rmsnorm_backward_bound(dvec(x), dvec(w), dvec(rstd_ref), dvec(d_out), dvec(d_x_ref0),
                                   dvec(d_w_ref0), s.N, s.C, Impl::kCpu);
        expect_within_bound(dvec(d_x), dvec(d_x_ref), bb.out, "rmsnorm d_x " + name(s),
                            "rmsnorm d_x F32");
        expect_within_bound(dvec(d_w), dvec(d_w_ref), bb.d_w, "rmsnorm d_w " + name(s),
                            "rmsnorm d_w F32");
    }
}

TEST_F(Kernels, LayerNormMatchesRef) {
    const float eps = 1e-5f;
    for (Shape s : shapes()) {
        size_t nc = size_t(s.N) * s.C;
        FVec x = random_vec(nc, 18, -1.0, 3.0);  // non-zero mean
        FVec w = random_vec(size_t(s.C), 19, 0.5, 1.5), b = random_vec(size_t(s.C), 20);
        FVec out(nc), mean(size_t(s.N)), rstd(size_t(s.N));
        FVec out_ref(nc), mean_ref(size_t(s.N)), rstd_ref(size_t(s.N));
        cpu_->layernorm_forward(m(out, s.N, s.C), v(mean), v(rstd), m(x, s.N, s.C), v(w), v(b),
                                eps);
        ref_->layernorm_forward(m(out_ref, s.N, s.C), v(mean_ref), v(rstd_ref), m(x, s.N, s.C),
                                v(w), v(b), eps);
        // mean and rstd rounded to fp32 before the fp32 affine map (x - mean) r w + b.
        const NormBound fb =
            layernorm_forward_bound(dvec(x), dvec(w), dvec(b), s.N, s.C, eps, Impl::kCpu);
        expect_within_bound(dvec(mean), dvec(mean_ref), fb.mean, "layernorm mean " + name(s),
                            "layernorm mean F32");
        expect_within_bound(dvec(rstd), dvec(rstd_ref), fb.rstd, "layernorm rstd " + name(s),
                            "layernorm rstd F32");
        expect_within_bound(dvec(out), dvec(out_ref), fb.out, "layernorm out " + name(s),
                            "layernorm out F32");

        FVec d_out = random_vec(nc, 21);
        FVec d_x = random_vec(nc, 22), d_w = random_vec(size_t(s.C), 23);  // pre-filled: +=
        FVec d_b = random_vec(size_t(s.C), 24);
        const FVec d_x0 = d_x, d_w0 = d_w, d_b0 = d_b;
        FVec d_x_ref = d_x, d_w_ref = d_w, d_b_ref = d_b;
        cpu_->layernorm_backward(m(d_x, s.N, s.C), v(d_w), v(d_b), m(d_out, s.N, s.C),
                                 m(x, s.N, s.C), v(w), v(mean_ref), v(rstd_ref));
        ref_->layernorm_backward(m(d_x_ref, s.N, s.C), v(d_w_ref), v(d_b_ref), m(d_out, s.N, s.C),
                                 m(x, s.N, s.C), v(w), v(mean_ref), v(rstd_ref));
        // d_x: fp32 arithmetic on r (g - mean(g) - xhat mean(g xhat)), whose terms cancel (at
        // C = 1 exactly: rstd 316 then scales the roundings of g); d_w, d_b: sums over N rows.
        const NormBound bb =
            layernorm_backward_bound(dvec(x), dvec(w), dvec(mean_ref), dvec(rstd_ref), dvec(d_out),
                                     dvec(d_x0), dvec(d_w0), dvec(d_b0), s.N, s.C, Impl::kCpu);
        expect_within_bound(dvec(d_x), dvec(d_x_ref), bb.out, "layernorm d_x " + name(s),
                            "layernorm d_x F32");
        expect_within_bound(dvec(d_w), dvec(d_w_ref), bb.d_w, "layernorm d_w " + name(s),
                            "layernorm d_w F32");
        expect_within_bound(dvec(d_b), dvec(d_b_ref), bb.d_b, "layernorm d_b " + name(s),
                            "layernorm d_b F32");
    }
}

// A frozen norm (empty d_w / d_b) still propagates d_x: bit for bit what the same call with
// weight gradients writes, since d_x never reads d_w. The given d_w of a partly frozen LayerNorm
// is still accumulated.
TEST_F(Kernels, FrozenNormsStillWriteDx) {
    for (Shape s : shapes()) {
        const size_t nc = size_t(s.N) * s.C;
        FVec x = random_vec(nc, 30, -1.0, 3.0), w = random_vec(size_t(s.C), 31, 0.5, 1.5);
        FVec d_out = random_vec(nc, 32), mean = random_vec(size_t(s.N), 33);
        FVec rstd = random_vec(size_t(s.N), 34, 0.5, 2.0), pre = random_vec(nc, 35);
        FVec d_x = pre, d_x_frozen = pre, d_w(size_t(s.C), 0.0f);
        cpu_->rmsnorm_backward(m(d_x, s.N, s.C), v(d_w), m(d_out, s.N, s.C), m(x, s.N, s.C), v(w),
                               v(rstd));
        cpu_->rmsnorm_backward(m(d_x_frozen, s.N, s.C), {}, m(d_out, s.N, s.C), m(x, s.N, s.C),
                               v(w), v(rstd));
        expect_bitwise(d_x_frozen, d_x, "frozen rmsnorm d_x " + name(s));

        FVec d_x2 = pre, d_x2_frozen = pre, d_x2_half = pre;
        FVec d_w_ln(size_t(s.C), 0.0f), d_w_half(size_t(s.C), 0.0f), d_b_ln(size_t(s.C), 0.0f);
        cpu_->layernorm_backward(m(d_x2, s.N, s.C), v(d_w_ln), v(d_b_ln), m(d_out, s.N, s.C),
                                 m(x, s.N, s.C), v(w), v(mean), v(rstd));
        cpu_->layernorm_backward(m(d_x2_frozen, s.N, s.C), {}, {}, m(d_out, s.N, s.C),
                                 m(x, s.N, s.C), v(w), v(mean), v(rstd));
        cpu_->layernorm_backward(m(d_x2_half, s.N, s.C), v(d_w_half), {}, m(d_out, s.N, s.C),
                                 m(x, s.N, s.C), v(w), v(mean), v(rstd));
        expect_bitwise(d_x2_frozen, d_x2, "frozen layernorm d_x " + name(s));
        expect_bitwise(d_x2_half, d_x2, "layernorm without d_b: d_x " + name(s));
        expect_bitwise(d_w_half, d_w_ln, "layernorm without d_b: d_w " + name(s));
    }
}

// The reference backend honours empty d_w / d_b too (backend.h: "an empty d_w or d_b: a frozen
// norm"). Run in a child process: a reference that writes through the empty view crashes the
// child and fails this test alone. The child exits 0 only when d_x matches the cpu backend's.
TEST(KernelsDeathTest, RefAcceptsFrozenNorms) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const int N = 5, C = 33;
    FVec x = random_vec(size_t(N) * C, 36), w = random_vec(C, 37, 0.5, 1.5);
    FVec d_out = random_vec(size_t(N) * C, 38), mean = random_vec(N, 39);
    FVec rstd = random_vec(N, 40, 0.5, 2.0);
    auto frozen_dx = [&](Backend& be, bool layernorm) {
        FVec d_x(size_t(N) * C, 0.0f);
        if (layernorm) {
            be.layernorm_backward(m(d_x, N, C), {}, {}, m(d_out, N, C), m(x, N, C), v(w), v(mean),
                                  v(rstd));
        } else {
            be.rmsnorm_backward(m(d_x, N, C), {}, m(d_out, N, C), m(x, N, C), v(w), v(rstd));
        }
        return d_x;
    };
    // Exits 0 when the reference's frozen d_x is the cpu backend's (the bounds of the tests
    // above).
    auto child = [&](bool layernorm) {
        auto cpu = make_cpu_backend();
        auto ref = make_ref_backend();
        FVec a = frozen_dx(*cpu, layernorm), b = frozen_dx(*ref, layernorm);
        const DVec zeros(a.size(), 0.0);
        const DVec bound =
            layernorm ? layernorm_backward_bound(dvec(x), dvec(w), dvec(mean), dvec(rstd),
                                                 dvec(d_out), zeros, {}, {}, N, C, Impl::kCpu)
                            .out
                      : rmsnorm_backward_bound(dvec(x), dvec(w), dvec(rstd), dvec(d_out), zeros, {},
                                               N, C, Impl::kCpu)
                            .out;
        bool ok = true;
        for (size_t i = 0; i < a.size(); ++i) ok = ok && std::fabs(a[i] - b[i]) <= bound[i];
        std::exit(ok ? 0 : 1);
    };
    EXPECT_EXIT(child(false), ::testing::ExitedWithCode(0), "") << "rmsnorm";
    EXPECT_EXIT(child(true), ::testing::ExitedWithCode(0), "") << "layernorm";
}

// The column reductions sum fixed blocks in a fixed order: the thread count must not matter.
TEST_F(Kernels, ColumnReductionsDoNotDependOnThreadCount) {
    const int N = 300, C = 517, saved = omp_get_max_threads();
    size_t nc = size_t(N) * C;
    FVec x = random_vec(nc, 25), w = random_vec(size_t(C), 26), dy = random_vec(nc, 27);
    FVec mean(size_t(N), 0.1f), rstd = random_vec(size_t(N), 28, 0.5, 2.0);
    auto run = [&](int threads) {
        omp_set_num_threads(threads);
        FVec d_x(nc, 0.0f), d_w(size_t(C), 0.0f), d_b(size_t(C), 0.0f), d_w2(size_t(C), 0.0f);
        cpu_->rmsnorm_backward(m(d_x, N, C), v(d_w), m(dy, N, C), m(x, N, C), v(w), v(rstd));
        cpu_->layernorm_backward(m(d_x, N, C), v(d_w2), v(d_b), m(dy, N, C), m(x, N, C), v(w),
                                 v(mean), v(rstd));
        cpu_->bias_backward(v(d_b), m(dy, N, C));
        FVec all = d_w;
        all.insert(all.end(), d_w2.begin(), d_w2.end());
        all.insert(all.end(), d_b.begin(), d_b.end());
        return all;
    };
    FVec one = run(1), two = run(2), three = run(3);
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
    // 1 / (1 + exp_fast(-0.5)): exp_fast's 5u and two fp32 roundings
    EXPECT_NEAR(cpu::sigmoid_fast(0.5f), 1.0 / (1.0 + std::exp(-0.5)),
                sigmoid_of(f32(0.5), kExpFastRel).e);
}

// tanh_fast against tanh in double rounded once, and its slope against 1 / cosh² in double, over
// every float exponent up to the clamp at 40 (kTanhFastRel: 8 ulp); past it tanh is 1 and the
// slope stays at its value at 40 (< 7.3e-35, above the true one but as small).
TEST(SimdMath, TanhFastAndItsSlopeAreWithinEightUlp) {
    int64_t worst_t = 0, worst_s = 0;
    for (float x = 1e-30f; x < 40.0f; x += 3.1e-5f * x + 1e-38f)
        for (float v : {x, -x}) {
            float t, slope;
            cpu::tanh_fast(v, t, slope);
            const double c = std::cosh(double(v));
            worst_t = std::max(worst_t, ulp_distance(t, float(std::tanh(double(v)))));
            worst_s = std::max(worst_s, ulp_distance(slope, float(1.0 / (c * c))));
        }
    EXPECT_LE(worst_t, 8);
    EXPECT_LE(worst_s, 8);
    RecordProperty("worst_ulp_tanh", int(worst_t));
    RecordProperty("worst_ulp_slope", int(worst_s));
    float t, slope;
    cpu::tanh_fast(0.0f, t, slope);
    EXPECT_EQ(t, 0.0f);
    EXPECT_EQ(slope, 1.0f);
    cpu::tanh_fast(-1e6f, t, slope);
    EXPECT_EQ(t, -1.0f);
    EXPECT_GT(slope, 0.0f);
    EXPECT_LT(slope, 7.3e-35f);
    cpu::tanh_fast(NAN, t, slope);
    EXPECT_TRUE(std::isnan(t) && std::isnan(slope));
}

TEST_F(Kernels, SwigluMatchesRef) {
    for (Shape s : shapes()) {
        int F = s.C;
        size_t nf = size_t(s.N) * F;
        FVec gu = activation_inputs(2 * nf, 29), d_out = random_vec(nf, 30);
        FVec out(nf), out_ref(nf), d_gu(2 * nf, 5.0f), d_gu_ref(2 * nf);
        cpu_->swiglu_forward(m(out, s.N, F), m(gu, s.N, 2 * F));
        ref_->swiglu_forward(m(out_ref, s.N, F), m(gu, s.N, 2 * F));
        cpu_->swiglu_backward(m(d_gu, s.N, 2 * F), m(d_out, s.N, F), m(gu, s.N, 2 * F));
        ref_->swiglu_backward(m(d_gu_ref, s.N, 2 * F), m(d_out, s.N, F), m(gu, s.N, 2 * F));
        // exp_fast (5u) and the fp32 formula's roundings against the double one, element by
        // element (silu'(g) = s (1 + g e s) cancels near g = -1.28: the bound is the terms').
        const ActBound bd = swiglu_bound(dvec(gu), dvec(d_out), s.N, F, Impl::kCpu);
        expect_within_bound(dvec(out), dvec(out_ref), bd.out, "swiglu out " + name(s),
                            "swiglu out F32");
        expect_within_bound(dvec(d_gu), dvec(d_gu_ref), bd.d_in, "swiglu d_gate_up " + name(s),
                            "swiglu d_gate_up F32");
    }
}

TEST_F(Kernels, GeluMatchesRef) {
    for (int64_t n : {1, 7, 31, 32, 33, 64, 1000, 100003}) {
        const size_t sz = static_cast<size_t>(n);
        FVec x = activation_inputs(sz, 31), d_out = random_vec(sz, 32);
        FVec out(sz), out_ref(sz), d_x(sz, 5.0f), d_x_ref(sz);
        cpu_->gelu_forward(m(out, 1, n), m(x, 1, n));
        ref_->gelu_forward(m(out_ref, 1, n), m(x, 1, n));
        cpu_->gelu_backward(m(d_x, 1, n), m(d_out, 1, n), m(x, 1, n));
        ref_->gelu_backward(m(d_x_ref, 1, n), m(d_out, 1, n), m(x, 1, n));
        // x sigmoid(2y) with exp_fast against the tanh form in double, element by element
        // (gelu' = s + x e s^2 y' cancels near x = -0.75: the bound is the terms').
        std::string what = " n=" + std::to_string(n);
        const ActBound bd = gelu_bound(dvec(x), dvec(d_out), Impl::kCpu);
        expect_within_bound(dvec(out), dvec(out_ref), bd.out, "gelu out" + what, "gelu out F32");
        expect_within_bound(dvec(d_x), dvec(d_x_ref), bd.d_in, "gelu d_x" + what, "gelu d_x F32");
    }
}

// GELU on a (N, C) matrix, as the MLP applies it: rows of any width, every element mapped.
TEST_F(Kernels, GeluOnMatricesMatchesRef) {
    for (Shape s : shapes()) {
        const size_t nc = size_t(s.N) * s.C;
        FVec x = activation_inputs(nc, 33), d_out = random_vec(nc, 34);
        FVec out(nc), out_ref(nc), d_x(nc, 5.0f), d_x_ref(nc);
        cpu_->gelu_forward(m(out, s.N, s.C), m(x, s.N, s.C));
        ref_->gelu_forward(m(out_ref, s.N, s.C), m(x, s.N, s.C));
        cpu_->gelu_backward(m(d_x, s.N, s.C), m(d_out, s.N, s.C), m(x, s.N, s.C));
        ref_->gelu_backward(m(d_x_ref, s.N, s.C), m(d_out, s.N, s.C), m(x, s.N, s.C));
        const ActBound bd = gelu_bound(dvec(x), dvec(d_out), Impl::kCpu);  // as above
        expect_within_bound(dvec(out), dvec(out_ref), bd.out, "gelu out " + name(s),
                            "gelu out F32");
        expect_within_bound(dvec(d_x), dvec(d_x_ref), bd.d_in, "gelu d_x " + name(s),
                            "gelu d_x F32");
    }
}

// ---- optimizer ----

AdamWStep adamw_hparams(int t) {
    const float b1 = 0.9f, b2 = 0.999f;
    return {
        1e-3f, b1, b2, 1e-8f, 0.1f, 1.0f - std::pow(b1, float(t)), 1.0f - std::pow(b2, float(t))};
}

// ref::adamw_step is plain C++; GCC contracts its a*b + c into fma only from -O2 up, so the
// reference rounds differently in -O0/-O1 builds. The kernel spells out the -O2+ fusion. This
// finds an m where m + (0 - m)(1 - b1) differs fused vs unfused and asks the reference backend.
bool reference_adamw_is_fused(Backend& ref) {
    const float b1 = 0.9f, one_m_b1 = 1.0f - b1;
    for (int i = 1; i < 10000; ++i) {
        float m0 = 1.0f + float(i) * 1.2345e-4f;
        volatile float product = (0.0f - m0) * one_m_b1;  // volatile: never fused
        float unfused = m0 + product, fused = std::fma(0.0f - m0, one_m_b1, m0);
        if (unfused == fused) continue;
        FVec p = {0.0f}, g = {0.0f}, mm = {m0}, vv = {0.0f};
        ref.adamw_step(v(p), v(g), v(mm), v(vv), {1e-3f, b1, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f},
                       {});
        return mm[0] == fused;
    }
    return false;
}

TEST_F(Kernels, AdamwIsBitIdenticalToRefOverSteps) {
    const bool fused = reference_adamw_is_fused(*ref_);
    if (!fused) std::printf("note: reference AdamW built without fma (-O0/-O1): tolerance check\n");
    for (int64_t n : {1, 17, 1000, 100003}) {
        FVec p = random_vec(size_t(n), 35), mm(size_t(n), 0.0f), vv(size_t(n), 0.0f);
        FVec p_ref = p, m_ref = mm, v_ref = vv;
        std::vector<AdamEv> st(static_cast<size_t>(n));  // exact state, each side's error bound
        for (size_t i = 0; i < st.size(); ++i) st[i] = {f32(p[i]), f32(0), f32(0)};
        for (int t = 1; t <= 5; ++t) {
            FVec g = random_vec(size_t(n), 36 + uint32_t(t), -1e-2, 1e-2);
            g[0] = 0.0f;
            cpu_->adamw_step(v(p), v(g), v(mm), v(vv), adamw_hparams(t), {});
            ref_->adamw_step(v(p_ref), v(g), v(m_ref), v(v_ref), adamw_hparams(t), {});
            if (!fused) adamw_step_ev(st, g, adamw_hparams(t));
        }
        std::string what = " n=" + std::to_string(n);
        if (fused) {  // the normal (-O2/-O3) build: same operations, same order, same roundings
            expect_bitwise(p, p_ref, "adamw p" + what);
            expect_bitwise(mm, m_ref, "adamw m" + what);
            expect_bitwise(vv, v_ref, "adamw v" + what);
        } else {
            // -O0/-O1: the reference rounds each product the kernel fuses. Both are evaluations
            // of the same five steps, each within the running bound of the exact values.
            DVec bp, bm, bv;
            for (const AdamEv& a : st)
                bp.push_back(2 * a.p.e), bm.push_back(2 * a.m.e), bv.push_back(2 * a.v.e);
            expect_within_bound(dvec(p), dvec(p_ref), bp, "adamw p (unfused ref)" + what);
            expect_within_bound(dvec(mm), dvec(m_ref), bm, "adamw m (unfused ref)" + what);
            expect_within_bound(dvec(vv), dvec(v_ref), bv, "adamw v (unfused ref)" + what);
        }
    }
}

// The 16-bit compute copy is the new f32 master rounded once (round to nearest even), on both
// backends, and writing it changes nothing else.
TEST_F(Kernels, AdamwComputeCopyIsTheRoundedMaster) {
    for (DType t : {DType::BF16, DType::F16})
        for (int64_t n : {1, 17, 1000, 100003})
            for (Backend* be : {cpu_.get(), ref_.get()}) {
                const std::string what =
                    std::string(dname(t)) + " n=" + std::to_string(n) + " " + be->name();
                FVec p = random_vec(size_t(n), 41, -3.0, 3.0), mm(size_t(n), 0.0f);
                FVec vv(size_t(n), 0.0f), g = random_vec(size_t(n), 42, -1e-2, 1e-2);
                FVec p2 = p, m2 = mm, v2 = vv;
                std::vector<uint16_t> copy(size_t(n), 0xffff);
                Vec pc{copy.data(), t, n};
                be->adamw_step(v(p), v(g), v(mm), v(vv), adamw_hparams(1), pc);
                be->adamw_step(v(p2), v(g), v(m2), v(v2), adamw_hparams(1), {});
                expect_bitwise(p, p2, "adamw p with a compute copy " + what);
                expect_bitwise(mm, m2, "adamw m with a compute copy " + what);
                expect_bitwise(vv, v2, "adamw v with a compute copy " + what);
                int bad = 0;
                for (size_t i = 0; i < size_t(n); ++i) {
                    uint16_t want = t == DType::BF16 ? f32_to_bf16(p[i]) : f32_to_f16(p[i]);
                    if (copy[i] != want && bad++ < 3)
                        ADD_FAILURE() << what << "[" << i << "]: copy " << copy[i] << " want "
                                      << want << " (p = " << p[i] << ")";
                }
                EXPECT_EQ(bad, 0) << what;
            }
}

TEST_F(Kernels, SumSquaresMatchesDoubleLoopForAnyThreadCount) {
    const int saved = omp_get_max_threads();
    for (int64_t n : {0, 1, 7, 1000, (1 << 20) + 3}) {
        FVec x = random_vec(size_t(n), 40, -3.0, 3.0);
        double want = 0;
        for (float f : x) want += double(f) * f;
        omp_set_num_threads(1);
        double one = cpu_->sum_squares(v(x));
        omp_set_num_threads(2);
        double two = cpu_->sum_squares(v(x));
        omp_set_num_threads(3);
        double three = cpu_->sum_squares(v(x));
        omp_set_num_threads(saved);
        // squares exact in double, summed in another order: two orders of n positive terms.
        const double tol = testing::reorder_worst(double(n), kUnitF64) * want;
        EXPECT_NEAR(one, want, tol) << "n=" << n;
        EXPECT_NEAR(ref_->sum_squares(v(x)), want, tol) << "ref n=" << n;
        EXPECT_EQ(std::bit_cast<uint64_t>(two), std::bit_cast<uint64_t>(one)) << "n=" << n;
        EXPECT_EQ(std::bit_cast<uint64_t>(three), std::bit_cast<uint64_t>(one)) << "n=" << n;
    }
}

// The fp16 loss scaler detects overflow through sum_squares: one inf or NaN anywhere (any block
// of the parallel split, any dtype) makes the sum non-finite.
TEST_F(Kernels, SumSquaresIsNonFiniteWhenAnyElementIs) {
    const int64_t n = (1 << 20) + 3;
    for (DType t : {DType::F32, DType::BF16, DType::F16})
        for (int64_t at : {int64_t(0), int64_t(40000), n - 1})
            for (float bad : {INFINITY, -INFINITY, NAN}) {
                Buf x = Buf::of(t, random_vec(size_t(n), 43));
                x.put(at, bad);
                EXPECT_FALSE(std::isfinite(cpu_->sum_squares(x.cvec())))
                    << dname(t) << " at " << at << " value " << bad;
            }
}

}  // namespace
}  // namespace ete
