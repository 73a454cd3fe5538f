// tests/backend/gemm_test.cpp — Backend::gemm on the CPU backend against the reference backend:
// f32 through OpenBLAS and bf16/fp16 through oneDNN (every transpose, leading dimensions wider
// than the rows, M/N/K around the vector width, beta 0 and 1, f32 and 16-bit results), the shape
// and dtype checks, and the OpenBLAS core-type decision of DESIGN.md §8.
//
// Bounds, element by element (expect_gemm_within): the fp32 sum of K products, each rounded for
// fp32 operands and exact for bf16/fp16 ones, alpha's product and beta's addition, in any order
// (OpenBLAS's and oneDNN's kernels, or sgemm on converted operands): gamma of those roundings
// relative to alpha sum_k |a_ik b_kj| + |beta c0|, one more for the reference's rounding of its
// exact sum into fp32, and, for a 16-bit C, one rounding of the result (eps(dtype) |c|).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/error.h"
#include "kernel_bounds.h"

namespace ete {
namespace {

using namespace backend_test;

struct Dims {
    int M, N, K;
};

// Around the 16-lane width and the kernels' blocks, with every dimension 1 somewhere.
const Dims kDims[] = {{1, 1, 1},   {31, 33, 32}, {33, 7, 65}, {64, 96, 128},
                      {1, 33, 31}, {32, 1, 33},  {65, 31, 1}, {130, 64, 97}};

std::string describe(Dims d, bool ta, bool tb, float beta) {
    return std::to_string(d.M) + "x" + std::to_string(d.N) + "x" + std::to_string(d.K) +
           " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
           " beta=" + std::to_string(int(beta));
}

// Operands of one case in the given dtypes: a is (ta ? K : M, ta ? M : K) and b likewise, each
// with a leading dimension wider than its rows (as fused buffers use), c (M, N) with ldc = N + 2.
struct Operands {
    Buf a, b, c;
    Operands(Dims d, bool ta, bool tb, DType ab, DType ct, uint32_t seed) {
        const int ar = ta ? d.K : d.M, ac = ta ? d.M : d.K;
        const int br = tb ? d.N : d.K, bc = tb ? d.K : d.N;
        a = Buf::of(ab, random_vec(size_t(ar) * ac, seed), ar, ac, ac + 3);
        b = Buf::of(ab, random_vec(size_t(br) * bc, seed + 1), br, bc, bc + 5);
        c = Buf::of(ct, random_vec(size_t(d.M) * d.N, seed + 2), d.M, d.N, d.N + 2);
    }
    // sum_k |op(a)_ik op(b)_kj| in double.
    double abs_dot(int i, int j, int K, bool ta, bool tb) const {
        double s = 0;
        for (int k = 0; k < K; ++k)
            s += std::fabs((ta ? a.at(k, i) : a.at(i, k)) * (tb ? b.at(j, k) : b.at(k, j)));
        return s;
    }
};

// c (after the product) against c_ref, the reference's, within the bound of the file header;
// the worst fraction of it is logged under `key`.
void expect_gemm_within(const Operands& o, const Buf& c0, const Buf& c, const Buf& c_ref, Dims d,
                        bool ta, bool tb, float alpha, float beta, const std::string& what,
                        const std::string& key) {
    const DType ct = c.dtype();
    const double e16 = ct == DType::F32 ? 0.0 : eps_of(ct);
    const double roundings = d.K + (o.a.dtype() == DType::F32 ? 3 : 2);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < d.M; ++i)
        for (int j = 0; j < d.N; ++j) {
            const double mag = std::fabs(alpha) * o.abs_dot(i, j, d.K, ta, tb) +
                               (beta != 0 ? std::fabs(beta * c0.at(i, j)) : 0.0);
            const double want = c_ref.at(i, j), got = c.at(i, j);
            const double tol = testing::gamma_worst(roundings) * mag * (1 + e16) +
                               e16 * std::fabs(want) + tiny_of(ct);
            const double err = std::fabs(got - want);
            worst = std::max(worst, tol > 0 ? err / tol : err);
            if (!(err <= tol) && bad++ < 3)
                ADD_FAILURE() << what << " at " << i << "," << j << ": got " << got << " want "
                              << want << " (tolerance " << tol << ")";
        }
    EXPECT_EQ(bad, 0) << what;
    ErrorLog::get().note(key + " (fraction of tol)", worst, 1.0);
}

class BackendGemm : public ::testing::Test {
  protected:
    std::unique_ptr<Backend> cpu_ = make_cpu_backend();
    std::unique_ptr<Backend> ref_ = make_ref_backend();
};

TEST_F(BackendGemm, F32MatchesReferenceForEveryLayout) {
    for (Dims d : kDims)
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (float beta : {0.0f, 1.0f}) {
                    Operands o(d, ta, tb, DType::F32, DType::F32, 1);
                    const Buf c0 = o.c;
                    Buf c_ref = o.c;
                    cpu_->gemm(o.a.cmat(), ta, o.b.cmat(), tb, o.c.mat(), 0.5f, beta);
                    ref_->gemm(o.a.cmat(), ta, o.b.cmat(), tb, c_ref.mat(), 0.5f, beta);
                    expect_gemm_within(o, c0, o.c, c_ref, d, ta, tb, 0.5f, beta,
                                       describe(d, ta, tb, beta), "gemm F32 (OpenBLAS)");
                    expect_padding(o.c, -7.0f, describe(d, ta, tb, beta));
                }
}

TEST_F(BackendGemm, RejectsMismatchedShapesAndDtypes) {
    Buf a(DType::F32, 4, 3), b(DType::F32, 3, 5), c(DType::F32, 4, 5), c_bad(DType::F32, 4, 4);
    for (Backend* be : {cpu_.get(), ref_.get()}) {
        EXPECT_THROW(be->gemm(a.cmat(), false, b.cmat(), false, c_bad.mat()), Error) << be->name();
        EXPECT_THROW(be->gemm(a.cmat(), true, b.cmat(), false, c.mat()), Error) << be->name();
        EXPECT_THROW(be->gemm(a.cmat(), false, b.cmat(), true, c.mat()), Error) << be->name();
        EXPECT_NO_THROW(be->gemm(a.cmat(), false, b.cmat(), false, c.mat())) << be->name();
    }
    Buf b16(DType::BF16, 3, 5), c16(DType::BF16, 4, 5);
    EXPECT_THROW(cpu_->gemm(a.cmat(), false, b16.cmat(), false, c.mat()), Error);  // a, b dtypes
    EXPECT_THROW(cpu_->gemm(a.cmat(), false, b.cmat(), false, c16.mat()), Error);  // f32 -> F32
}

// A build without oneDNN says so for 16-bit operands rather than computing anything.
TEST_F(BackendGemm, SixteenBitWithoutOneDnnSaysSo) {
    if (cpu::dnnl_available()) GTEST_SKIP() << "this build links oneDNN";
    Buf a(DType::BF16, 4, 3), b(DType::BF16, 3, 5), c(DType::F32, 4, 5);
    EXPECT_NE(
        error_of([&] { cpu_->gemm(a.cmat(), false, b.cmat(), false, c.mat()); }).find("oneDNN"),
        std::string::npos);
}

// bf16/fp16 operands, f32 or 16-bit C, beta 0 and 1, every layout: oneDNN against ref (which
// widens the operands exactly, sums in double and rounds C once).
TEST_F(BackendGemm, SixteenBitMatchesReferenceForEveryLayout) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info() << ": 16-bit GEMM needs oneDNN";
    const float alpha = 0.5f;
    for (DType ab : {DType::BF16, DType::F16})
        for (DType ct : {DType::F32, ab})
            for (Dims d : kDims)
                for (int ta = 0; ta < 2; ++ta)
                    for (int tb = 0; tb < 2; ++tb)
                        for (float beta : {0.0f, 1.0f}) {
                            const std::string what = std::string(dname(ab)) + " -> " + dname(ct) +
                                                     " " + describe(d, ta, tb, beta);
                            Operands o(d, ta, tb, ab, ct, 7);
                            Buf c0 = o.c, c_ref = o.c;
                            cpu_->gemm(o.a.cmat(), ta, o.b.cmat(), tb, o.c.mat(), alpha, beta);
                            ref_->gemm(o.a.cmat(), ta, o.b.cmat(), tb, c_ref.mat(), alpha, beta);
                            expect_gemm_within(
                                o, c0, o.c, c_ref, d, ta, tb, alpha, beta, what,
                                std::string("gemm ") + dname(ab) + " -> " + dname(ct));
                            expect_padding(o.c, -7.0f, what);
                        }
}

// The widest kernels the CPU runs: an AVX-512 CPU gets SkylakeX unless OpenBLAS picked an AVX-512
// core itself (Zen 5 under OpenBLAS 0.3.21: an AVX2 core), an AVX2 CPU gets Haswell unless
// OpenBLAS picked an AVX2 core; older CPUs keep whatever OpenBLAS chose.
TEST(OpenBlasCore, PicksTheWidestKernelsTheCpuRuns) {
    EXPECT_STREQ(cpu::openblas_core_override("Prescott", true, true), "SkylakeX");
    EXPECT_STREQ(cpu::openblas_core_override("Prescott", false, true), "Haswell");
    EXPECT_EQ(cpu::openblas_core_override("Prescott", false, false), nullptr);
    EXPECT_STREQ(cpu::openblas_core_override("Nehalem", true, true), "SkylakeX");
    EXPECT_STREQ(cpu::openblas_core_override("Sandybridge", false, true), "Haswell");
    EXPECT_STREQ(cpu::openblas_core_override("Zen", true, true), "SkylakeX");
    EXPECT_STREQ(cpu::openblas_core_override("Haswell", true, true), "SkylakeX");
    EXPECT_EQ(cpu::openblas_core_override("Cooperlake", true, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("SkylakeX", true, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Sapphirerapids", true, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Zen", false, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Haswell", false, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Excavator", false, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Sandybridge", false, false), nullptr);
}

}  // namespace
}  // namespace ete
