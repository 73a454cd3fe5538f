// tests/backend/dnnl_gemm_test.cpp — the 16-bit GEMM (oneDNN matmul and its fp32-sgemm fallback)
// against a scalar double-precision reference computed from the exact 16-bit operand values.
//
// Every (trans_a, trans_b), sizes 1/31/32/33/64/127 in M, N and K, dense and padded leading
// dimensions (oneDNN picks different kernels for the two), BF16 and F16 operands, C in F32 and in
// the operand dtype, alpha 1 and 0.5, beta 0 (C holds NaN: it must not be read), 1 and -0.75.
// Entries of C outside the N columns must come back untouched. The fallback runs on every machine
// (it needs no oneDNN); the oneDNN tests skip in a build without it.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/core/dtype.h"
#include "test_util.h"

namespace ete {
namespace {

using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t,
                        const void*, int64_t, DType, float, void*, int64_t, DType);

uint16_t to_16bit(float f, DType t) {
    return t == DType::BF16 ? f32_to_bf16(f) : f32_to_f16(f);
}
double from_16bit(uint16_t h, DType t) {
    return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// A matrix of F32 or 16-bit elements as raw bytes, read and written as double.
struct Matrix {
    DType t;
    std::vector<unsigned char> bytes;
    Matrix(DType type, size_t n) : t(type), bytes(n * dtype_size(type)) {}
    double get(size_t i) const {
        if (t == DType::F32) {
            float f;
            std::memcpy(&f, bytes.data() + 4 * i, 4);
            return f;
        }
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        return from_16bit(h, t);
    }
    // Stores f rounded to the dtype; the stored value is exactly what get() returns.
    void set(size_t i, float f) {
        if (t == DType::F32) {
            std::memcpy(bytes.data() + 4 * i, &f, 4);
        } else {
            uint16_t h = to_16bit(f, t);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
        }
    }
    size_t size() const { return bytes.size() / dtype_size(t); }
    void* data() { return bytes.data(); }
};

struct Problem {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    DType ab, c;
    float alpha, beta;
};

std::string describe(const Problem& p) {
    return fmt::format("{}x{}x{} {}{} {}->{} lda {} ldb {} ldc {} alpha {} beta {}", p.M, p.N, p.K,
                       p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', dtype_name(p.ab), dtype_name(p.c), p.lda,
                       p.ldb, p.ldc, p.alpha, p.beta);
}

Matrix random_matrix(DType t, size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Matrix m(t, n);
    for (size_t i = 0; i < n; ++i) m.set(i, u(rng));
    return m;
}

// The exact value of C[i, j] after the product, from the 16-bit operands and C0, in double, and
// the size of what was summed (|alpha|·sum|a·b| + |beta·c0|), which bounds the fp32 error.
struct Exact {
    double value, magnitude;
};
Exact reference_entry(const Problem& p, const Matrix& A, const Matrix& B, const Matrix& C0,
                      int64_t i, int64_t j) {
    double sum = 0, mag = 0;
    for (int64_t k = 0; k < p.K; ++k) {
        double a = A.get(p.ta ? size_t(k) * p.lda + i : size_t(i) * p.lda + k);
        double b = B.get(p.tb ? size_t(j) * p.ldb + k : size_t(k) * p.ldb + j);
        sum += a * b;
        mag += std::fabs(a * b);
    }
    double c0 = p.beta == 0.0f ? 0.0 : double(p.beta) * C0.get(size_t(i) * p.ldc + j);
    return {double(p.alpha) * sum + c0, std::fabs(p.alpha) * mag + std::fabs(c0)};
}

// Runs p through gemm and returns max over C of |C - ref| / tolerance (<= 1 passes). Padding
// entries of C must come back bit for bit; with beta 0, C starts as NaN, which must not leak.
double worst_error_ratio(GemmFn gemm, const Problem& p, std::mt19937& rng) {
    Matrix A = random_matrix(p.ab, size_t(p.ta ? p.K : p.M) * p.lda, rng);
    Matrix B = random_matrix(p.ab, size_t(p.tb ? p.N : p.K) * p.ldb, rng);
    Matrix C = random_matrix(p.c, size_t(p.M) * p.ldc, rng);
    if (p.beta == 0.0f)
        for (int64_t i = 0; i < p.M; ++i)
            for (int64_t j = 0; j < p.N; ++j) C.set(size_t(i) * p.ldc + j, NAN);
    const Matrix C0 = C;
    gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.data(), p.lda, B.data(), p.ldb, p.ab, p.beta,
         C.data(), p.ldc, p.c);
    // fp32 sums of K exact products (+ alpha scale, + beta term): at most (K + 2) roundings of
    // 2^-24 relative to what was summed; a 16-bit C adds one rounding of its result, 2^-8 for bf16
    // (8 significant bits) and 2^-11 for f16 (11 bits), plus 2^-25 absolute in f16's subnormals.
    // The bound is attained: 16-bit results reach 0.99 of it.
    double u_c = p.c == DType::BF16 ? 0x1p-8 : p.c == DType::F16 ? 0x1p-11 : 0.0;
    double abs_c = p.c == DType::F16 ? 0x1p-25 : 0.0;
    size_t es = dtype_size(p.c);
    double worst = 0;
    for (int64_t i = 0; i < p.M; ++i) {
        for (int64_t j = p.N; j < p.ldc; ++j) {
            size_t at = (size_t(i) * p.ldc + j) * es;
            EXPECT_EQ(std::memcmp(&C.bytes[at], &C0.bytes[at], es), 0)
                << describe(p) << ": padding changed at " << i << "," << j;
        }
        for (int64_t j = 0; j < p.N; ++j) {
            Exact ref = reference_entry(p, A, B, C0, i, j);
            double tol = (1 + u_c) * double(p.K + 2) * 0x1p-24 * ref.magnitude +
                         u_c * std::fabs(ref.value) + abs_c + 1e-30;
            double got = C.get(size_t(i) * p.ldc + j);
            if (!std::isfinite(got)) return INFINITY;  // e.g. beta 0 read the NaN
            worst = std::max(worst, std::fabs(got - ref.value) / tol);
        }
    }
    return worst;
}

struct Size {
    int64_t M, N, K;
};

// The awkward sizes around oneDNN's 16/32/64 blockings, each size in each of M, N and K.
std::vector<Size> sizes() {
    return {{1, 1, 1},     {31, 33, 32}, {33, 31, 127}, {64, 127, 33},
            {127, 64, 31}, {32, 1, 64},  {1, 64, 127}};
}

// Every layout, dtype pair, (alpha, beta) and leading-dimension choice over sizes(), through gemm.
void check_every_layout(GemmFn gemm) {
    std::mt19937 rng(7);
    int problems = 0;
    for (Size s : sizes())
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (bool padded : {false, true})
                    for (DType ab : {DType::BF16, DType::F16})
                        for (DType c : {DType::F32, ab})
                            for (float alpha : {1.0f, 0.5f})
                                for (float beta : {0.0f, 1.0f, -0.75f}) {
                                    int64_t pa = padded ? 3 : 0, pb = padded ? 5 : 0;
                                    int64_t pc = padded ? 2 : 0;
                                    Problem p{bool(ta), bool(tb), s.M, s.N, s.K,   0,
                                              0,        0,        ab,  c,   alpha, beta};
                                    p.lda = (p.ta ? s.M : s.K) + pa;
                                    p.ldb = (p.tb ? s.K : s.N) + pb;
                                    p.ldc = s.N + pc;
                                    double r = worst_error_ratio(gemm, p, rng);
                                    EXPECT_LE(r, 1.0) << describe(p);
                                    ++problems;
                                }
    EXPECT_EQ(problems, int(sizes().size()) * 4 * 2 * 2 * 2 * 2 * 3);
}

TEST(DnnlGemm, MatchesReferenceForEveryLayout) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    std::printf("%s\n", cpu::dnnl_info().c_str());
    check_every_layout(&cpu::dnnl_gemm_onednn);
}

// The entry point the backend calls, through whichever engine this CPU chose.
TEST(DnnlGemm, ChosenEngineMatchesReferenceForEveryLayout) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    check_every_layout(&cpu::dnnl_gemm);
}

TEST(DnnlGemmFallback, MatchesReferenceForEveryLayout) {
    check_every_layout(&cpu::dnnl_gemm_fallback);
}

// Blocks far smaller than the products: the fallback converts and multiplies a few rows of M and
// N at a time, and K in chunks of 40 (up to four, the last one partial). With `whole` at 2000 one
// operand is converted whole where it fits (B first, else A) and at 300 neither is.
template <int64_t Whole>
void fallback_in_tiny_blocks(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                             const void* A, int64_t lda, const void* B, int64_t ldb, DType ab,
                             float beta, void* C, int64_t ldc, DType c) {
    cpu::dnnl_gemm_fallback_blocked(ta, tb, M, N, K, alpha, A, lda, B, ldb, ab, beta, C, ldc, c,
                                    {300, Whole, 40});
}

TEST(DnnlGemmFallback, MatchesReferenceInBlocks) {
    check_every_layout(&fallback_in_tiny_blocks<300>);
    check_every_layout(&fallback_in_tiny_blocks<2000>);
}

// The engine rule (dnnl_gemm_internal.h): oneDNN where its native kernels beat sgemm, sgemm on
// Intel's AVX512-BF16 without AMX and wherever oneDNN would emulate; ETE_GEMM16 overrides.
TEST(Gemm16Engine, ChoosesTheFasterEngine) {
    using cpu::Gemm16Engine;
    auto engine = [](DType t, const char* env, bool native, bool amx, bool amd) {
        return cpu::choose_gemm16_engine(t, env, {native, amx, amd}).engine;
    };
    EXPECT_EQ(engine(DType::BF16, nullptr, true, true, false), Gemm16Engine::OneDnn);  // AMX
    EXPECT_EQ(engine(DType::BF16, nullptr, true, false, true), Gemm16Engine::OneDnn);  // Zen 4
    EXPECT_EQ(engine(DType::BF16, "auto", true, false, false), Gemm16Engine::Sgemm);   // Intel
    EXPECT_EQ(engine(DType::BF16, nullptr, false, false, true), Gemm16Engine::Sgemm);  // emulated
    EXPECT_EQ(engine(DType::F16, nullptr, true, false, false), Gemm16Engine::OneDnn);  // FP16
    EXPECT_EQ(engine(DType::F16, nullptr, false, true, false), Gemm16Engine::Sgemm);
    EXPECT_EQ(engine(DType::BF16, "onednn", false, false, false), Gemm16Engine::OneDnn);
    EXPECT_EQ(engine(DType::BF16, "sgemm", true, true, false), Gemm16Engine::Sgemm);
    EXPECT_EQ(cpu::choose_gemm16_engine(DType::BF16, nullptr, {true, false, false}).why,
              "AVX512-BF16 without AMX on an Intel CPU is slower than sgemm");
    EXPECT_EQ(error_of([] { cpu::choose_gemm16_engine(DType::BF16, "fast\n", {}); }),
              "ETE_GEMM16=\"fast\\n\": expected auto, onednn or sgemm");
}

// K = 0 is C = beta·C (beta 0: zeros); M = 0 or N = 0 touches nothing.
void check_empty_products(GemmFn gemm) {
    for (DType c : {DType::F32, DType::BF16}) {
        Matrix C(c, 6);
        for (size_t i = 0; i < 6; ++i) C.set(i, float(i + 1));
        gemm(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, DType::BF16, 0.5f, C.data(), 3,
             c);
        for (size_t i = 0; i < 6; ++i) EXPECT_EQ(C.get(i), 0.5 * double(i + 1)) << dtype_name(c);
        gemm(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, DType::BF16, 0.0f, C.data(), 3,
             c);
        for (size_t i = 0; i < 6; ++i) EXPECT_EQ(C.get(i), 0.0) << dtype_name(c);
        C.set(0, 9.0f);
        gemm(false, false, 0, 3, 4, 1.0f, nullptr, 4, nullptr, 3, DType::BF16, 0.0f, C.data(), 3,
             c);
        gemm(false, false, 2, 0, 4, 1.0f, nullptr, 4, nullptr, 1, DType::BF16, 0.0f, C.data(), 1,
             c);
        EXPECT_EQ(C.get(0), 9.0) << dtype_name(c);
    }
}

TEST(DnnlGemm, EmptyProducts) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    check_empty_products(&cpu::dnnl_gemm_onednn);
    check_empty_products(&cpu::dnnl_gemm);
}

TEST(DnnlGemmFallback, EmptyProducts) {
    check_empty_products(&cpu::dnnl_gemm_fallback);
}

TEST(DnnlGemm, ReusesTheCachedPrimitive) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    // A shape and alpha no other test uses, so the first call must add exactly one cache entry.
    Problem p{false, true, 37, 41, 43, 43, 43, 41, DType::BF16, DType::F32, 0.375f, 0.0f};
    std::mt19937 rng(11);
    size_t before = cpu::dnnl_cache_entries();
    EXPECT_LE(worst_error_ratio(&cpu::dnnl_gemm_onednn, p, rng), 1.0);
    EXPECT_EQ(cpu::dnnl_cache_entries(), before + 1);
    EXPECT_LE(worst_error_ratio(&cpu::dnnl_gemm_onednn, p, rng), 1.0);
    EXPECT_EQ(cpu::dnnl_cache_entries(), before + 1) << "same key: no new entry";
    p.ldc = 48;  // a different key
    EXPECT_LE(worst_error_ratio(&cpu::dnnl_gemm_onednn, p, rng), 1.0);
    EXPECT_EQ(cpu::dnnl_cache_entries(), before + 2);
    // oneDNN fixes a primitive's thread count at creation: another OpenMP setting, another one.
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads + 1);
    EXPECT_LE(worst_error_ratio(&cpu::dnnl_gemm_onednn, p, rng), 1.0);
    omp_set_num_threads(threads);
    EXPECT_EQ(cpu::dnnl_cache_entries(), before + 3);
}

// Two threads run one cached primitive at the same time, each with its own buffers (oneDNN
// primitives with a user scratchpad are stateless; each thread brings its own scratchpad).
TEST(DnnlGemm, ConcurrentCallsFromTwoThreads) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    Problem p{true, false, 96, 80, 160, 96, 80, 80, DType::BF16, DType::F32, 1.0f, 1.0f};
    double worst[2] = {0, 0};
    auto work = [&](int t) {
        std::mt19937 rng(100 + t);
        for (int i = 0; i < 8; ++i)
            worst[t] = std::max(worst[t], worst_error_ratio(&cpu::dnnl_gemm_onednn, p, rng));
    };
    std::thread t0(work, 0), t1(work, 1);
    t0.join();
    t1.join();
    EXPECT_LE(worst[0], 1.0);
    EXPECT_LE(worst[1], 1.0);
}

TEST(DnnlGemm, RejectsBadArguments) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    std::vector<uint16_t> a(64), b(64), c(64);
    auto call = [&](DType ab, DType cd, int64_t lda) {
        return error_of([&] {
            cpu::dnnl_gemm(false, false, 4, 4, 4, 1.0f, a.data(), lda, b.data(), 4, ab, 0.0f,
                           c.data(), 4, cd);
        });
    };
    EXPECT_EQ(call(DType::F32, DType::F32, 4),
              "[gemm] A and B are F32: the 16-bit GEMM takes BF16 or F16");
    EXPECT_EQ(call(DType::BF16, DType::F16, 4),
              "[gemm] C is F16 with BF16 operands: expected F32 or BF16");
    EXPECT_EQ(call(DType::BF16, DType::BF16, 3), "[gemm] 4x4x4: lda 3 is below A's row width 4");
}

TEST(DnnlGemm, StubThrowsWithoutOneDnn) {
    if (cpu::dnnl_available()) GTEST_SKIP() << "this build links oneDNN";
    EXPECT_EQ(cpu::dnnl_info(), "oneDNN: not built");
    EXPECT_FALSE(cpu::dnnl_native(DType::BF16));
    EXPECT_EQ(error_of([] {
                  cpu::dnnl_gemm(false, false, 1, 1, 1, 1.0f, nullptr, 1, nullptr, 1, DType::BF16,
                                 0.0f, nullptr, 1, DType::F32);
              }),
              "[gemm] this build has no oneDNN: bf16/fp16 GEMM needs libdnnl-dev");
}

// oneDNN calls bf16 native only where the CPU has the instructions, and then runs a dense bf16
// product with its own kernel rather than the fallback.
TEST(DnnlGemm, NativeBf16MatchesTheCpu) {
    if (!cpu::dnnl_available()) GTEST_SKIP() << cpu::dnnl_info();
    __builtin_cpu_init();
    if (!cpu::dnnl_native(DType::BF16)) GTEST_SKIP() << cpu::dnnl_info() << ": bf16 not native";
    EXPECT_TRUE(__builtin_cpu_supports("avx512bf16"));
    std::string impl = cpu::dnnl_gemm_impl(false, false, 256, 256, 256, 1.0f, 256, 256, DType::BF16,
                                           0.0f, 256, DType::F32);
    EXPECT_NE(impl.rfind("fallback", 0), 0u) << impl;
    std::printf("bf16 256^3 NN dense: %s\n", impl.c_str());
}

}  // namespace
}  // namespace ete
