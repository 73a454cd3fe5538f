// tests/backend/blas_test.cpp — GEMM through BLAS vs the scalar reference (every transpose, strided
// leading dimensions, beta), and the OpenBLAS core-type decision of DESIGN.md §8.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/ref/ref_kernels.h"

namespace ete {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (float& x : v) x = u(g);
    return v;
}

TEST(Gemm, MatchesReferenceForEveryLayout) {
    for (auto [M, N, K] : {std::tuple{1, 1, 1}, {31, 33, 32}, {33, 7, 65}, {64, 96, 128}}) {
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (float beta : {0.0f, 1.0f}) {
                    // Leading dimensions larger than the logical width, as fused buffers use.
                    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                    auto A = random_vec(size_t(ta ? K : M) * lda, 1);
                    auto B = random_vec(size_t(tb ? N : K) * ldb, 2);
                    auto C = random_vec(size_t(M) * ldc, 3), C_ref = C;
                    cpu::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(),
                              ldc);
                    ref::gemm<float>(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta,
                                     C_ref.data(), ldc);
                    for (int i = 0; i < M; ++i)
                        for (int j = 0; j < ldc; ++j) {
                            size_t k = size_t(i) * ldc + j;
                            // f32 sums of K products of values in [-1, 1]: ~K * 2^-24 relative.
                            EXPECT_NEAR(C[k], C_ref[k], 1e-5 * (1 + K / 8.0))
                                << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb
                                << " beta=" << beta << " at " << i << "," << j;
                        }
                }
    }
}

TEST(OpenBlasCore, OverridesOnlyGenericCoresOnCapableCpus) {
    EXPECT_STREQ(cpu::openblas_core_override("Prescott", true, true), "SkylakeX");
    EXPECT_STREQ(cpu::openblas_core_override("Prescott", false, true), "Haswell");
    EXPECT_EQ(cpu::openblas_core_override("Prescott", false, false), nullptr);
    EXPECT_STREQ(cpu::openblas_core_override("Nehalem", true, true), "SkylakeX");
    EXPECT_EQ(cpu::openblas_core_override("Cooperlake", true, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("SkylakeX", true, true), nullptr);
    EXPECT_EQ(cpu::openblas_core_override("Zen", true, true), nullptr);
}

}  // namespace
}  // namespace ete
