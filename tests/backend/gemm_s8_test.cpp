// tests/backend/gemm_s8_test.cpp — the integer GEMM of quantized inference (backend.h gemm_s8):
// the CPU backend (oneDNN's int8 matmul where it is exact, else ETE's exact kernel) against the
// reference and against the product computed in double, exactly, for I8 and U8 activations over
// awkward shapes, strided rows and the grid's extreme values; the exact kernel alone against the
// scalar loops; the engine's start-up check; bad arguments.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string_view>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

template <typename T>
std::vector<T> random_ints(size_t n, int lo, int hi, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = T(d(gen));
    return v;
}

TEST(GemmS8, CpuMatchesReferenceAndTheExactProduct) {
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    struct Shape {
        int64_t M, N, K;
    };
    for (const Shape s :
         {Shape{1, 1, 1}, {7, 5, 3}, {33, 67, 129}, {64, 64, 1000}, {5, 96, 4096}, {130, 17, 64}}) {
        for (const DType at : {DType::I8, DType::U8}) {
            SCOPED_TRACE(fmt::format("{}x{}x{} {}", s.M, s.N, s.K, dtype_name(at)));
            const int64_t lda = s.K + 3, ldw = s.K + 5, ldc = s.N + 2;
            const bool u8 = at == DType::U8;
            std::vector<uint8_t> a = random_ints<uint8_t>(size_t(s.M * lda), u8 ? 0 : -128,
                                                          u8 ? 255 : 127, uint32_t(s.K));
            std::vector<int8_t> w = random_ints<int8_t>(size_t(s.N * ldw), -128, 127, 7);
            // The extremes at the start of every row: the largest products the grids allow.
            for (int64_t m = 0; m < s.M; ++m) a[size_t(m * lda)] = u8 ? 255 : uint8_t(-128);
            for (int64_t n = 0; n < s.N; ++n) w[size_t(n * ldw)] = -128;
            std::vector<int32_t> cr(size_t(s.M * ldc), -1), cc = cr, cl = cr;
            const CMat A{a.data(), at, s.M, s.K, lda}, W{w.data(), DType::I8, s.N, s.K, ldw};
            ref->gemm_s8(A, W, {cr.data(), DType::I32, s.M, s.N, ldc});
            cpu->gemm_s8(A, W, {cc.data(), DType::I32, s.M, s.N, ldc});
            cpu::gemm_s8_loops(s.M, s.N, s.K, a.data(), lda, at, w.data(), ldw, cl.data(), ldc);
            EXPECT_EQ(cc, cr);  // padding columns of c untouched too
            EXPECT_EQ(cl, cr);
            for (int64_t m = 0; m < s.M; ++m)
                for (int64_t n = 0; n < s.N; ++n) {
                    double want = 0;
                    for (int64_t k = 0; k < s.K; ++k) {
                        const double x = u8 ? double(a[size_t(m * lda + k)])
                                            : double(int8_t(a[size_t(m * lda + k)]));
                        want += x * double(w[size_t(n * ldw + k)]);
                    }
                    ASSERT_EQ(double(cr[size_t(m * ldc + n)]), want) << m << "," << n;
                }
            EXPECT_FALSE(cpu::dnnl_gemm_s8_impl(s.M, s.N, s.K, lda, at, ldw, ldc).empty());
        }
    }
}

// ETE's exact kernel (what runs without VNNI) against the scalar loops: every tail of its tiles
// (rows of A and W in 1..9 past a multiple of 4, K around its 16- and 32-wide steps), strided
// rows, both activation types, and the grid's ends everywhere, where an int16 pair sum saturates.
TEST(GemmS8, ExactKernelMatchesTheScalarLoops) {
    for (const int64_t K : {1, 15, 16, 17, 31, 32, 33, 64, 95, 200, 4096 + 17}) {
        for (const int64_t M : {1, 3, 4, 5, 9, 70}) {
            for (const DType at : {DType::I8, DType::U8}) {
                const int64_t N = M == 70 ? 101 : M + 2, lda = K + 1, ldw = K + 7, ldc = N + 3;
                SCOPED_TRACE(fmt::format("{}x{}x{} {}", M, N, K, dtype_name(at)));
                const bool u8 = at == DType::U8;
                std::vector<uint8_t> a = random_ints<uint8_t>(size_t(M * lda), u8 ? 0 : -128,
                                                              u8 ? 255 : 127, uint32_t(K + M));
                std::vector<int8_t> w = random_ints<int8_t>(size_t(N * ldw), -128, 127, 3);
                for (int64_t i = 0; i < M * lda; i += 3) a[size_t(i)] = u8 ? 255 : uint8_t(-128);
                for (int64_t i = 0; i < N * ldw; i += 2) w[size_t(i)] = (i / 2) % 2 ? 127 : -128;
                std::vector<int32_t> want(size_t(M * ldc), -5), got = want;
                cpu::gemm_s8_scalar(M, N, K, a.data(), lda, at, w.data(), ldw, want.data(), ldc);
                cpu::gemm_s8_loops(M, N, K, a.data(), lda, at, w.data(), ldw, got.data(), ldc);
                ASSERT_EQ(got, want);  // padding columns untouched too
            }
        }
    }
}

// The largest sums the kernel admits (K = 65536 terms of 255 · −128 = −2139095040 and of
// −128 · −128 = 2^30) come out exactly: no int32 overflow, no saturation anywhere.
TEST(GemmS8, ExactKernelHoldsTheLargestSums) {
    const int64_t K = 65536;
    std::vector<uint8_t> a(size_t(2 * K));
    std::fill_n(a.begin(), K, uint8_t(255));
    std::fill_n(a.begin() + K, K, uint8_t(-128));
    std::vector<int8_t> w(size_t(K), int8_t(-128));
    std::vector<int32_t> c(1);
    cpu::gemm_s8_loops(1, 1, K, a.data(), K, DType::U8, w.data(), K, c.data(), 1);
    EXPECT_EQ(c[0], -2139095040);
    cpu::gemm_s8_loops(1, 1, K, a.data() + K, K, DType::I8, w.data(), K, c.data(), 1);
    EXPECT_EQ(c[0], 1 << 30);
}

// oneDNN's int8 matmul runs only where the start-up check found it exact. With oneDNN capped at
// AVX2 (no VNNI: vpmaddubsw's saturating int16 pair sums), the check must see the wrong sums.
TEST(GemmS8, OneDnnRunsOnlyWhereItsStartUpCheckIsExact) {
    const std::string check = cpu::dnnl_gemm_s8_check();
    if (cpu::dnnl_gemm_s8_uses_onednn()) {
        EXPECT_EQ(check, "");
    }
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (cpu::dnnl_available() && cap && std::string_view(cap) == "AVX2") {
        EXPECT_NE(check, "");
        EXPECT_FALSE(cpu::dnnl_gemm_s8_uses_onednn());
        EXPECT_NE(cpu::dnnl_s8_info().find("has no VNNI"), std::string::npos)
            << cpu::dnnl_s8_info();
    }
}

// The start-up check JIT-compiles six oneDNN primitives (a third of a small training process's
// CPU time): the backend's description, which every run logs, does not run it; the first int8
// GEMM does, and the description then says what it chose.
TEST(GemmS8, TheEngineIsChosenAtTheFirstInt8GemmNotByTheBackendsDescription) {
    auto cpu = make_cpu_backend();
    const bool chosen_before = cpu::dnnl_s8_info(false) != cpu::kS8NotYetChosen;
    const std::string before = cpu->describe();
    if (!chosen_before) {  // ctest runs each test in a process of its own
        EXPECT_NE(before.find(std::string("int8 GEMM: ") + cpu::kS8NotYetChosen), std::string::npos)
            << before;
        EXPECT_EQ(cpu::dnnl_s8_info(false), cpu::kS8NotYetChosen);
    }
    std::vector<int8_t> a{3}, w{-5};
    std::vector<int32_t> c(1);
    cpu->gemm_s8({a.data(), DType::I8, 1, 1}, {w.data(), DType::I8, 1, 1},
                 {c.data(), DType::I32, 1, 1});
    EXPECT_EQ(c[0], -15);  // 3 · (-5) in int32: exact on every engine, no bound
    const std::string chosen = cpu::dnnl_s8_info(false);
    EXPECT_NE(chosen, cpu::kS8NotYetChosen);
    EXPECT_EQ(chosen, cpu::dnnl_s8_info(true));
    EXPECT_NE(cpu->describe().find("int8 GEMM: " + chosen), std::string::npos) << cpu->describe();
}

TEST(GemmS8, BadArgumentsAreNamed) {
    auto cpu = make_cpu_backend();
    std::vector<int8_t> a(12), w(12);
    std::vector<int32_t> c(9);
    EXPECT_EQ(error_of([&] {
                  cpu->gemm_s8({a.data(), DType::I8, 3, 4}, {w.data(), DType::I8, 3, 4},
                               {c.data(), DType::F32, 3, 3});
              }),
              "gemm_s8: a (3, 4) I8 times w (3, 4) I8 transposed does not give c (3, 3) F32 "
              "(expected I8 or U8 times I8 into I32)");
    EXPECT_EQ(error_of([&] {
                  cpu::gemm_s8_loops(3, 3, 4, a.data(), 4, DType::F32, w.data(), 4, c.data(), 3);
              }),
              "[gemm_s8] A is F32: expected I8 or U8");
}

}  // namespace
}  // namespace ete::backend_test
