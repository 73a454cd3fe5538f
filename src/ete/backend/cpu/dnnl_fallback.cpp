// ete/backend/cpu/dnnl_fallback.cpp — what dnnl_gemm runs when oneDNN cannot: the 16-bit operands
// converted to fp32 and one OpenBLAS sgemm. Also the argument checks both paths share.
//
// Numerics match the oneDNN path: a bf16 or f16 value converts to fp32 exactly, and the product of
// two of them (at most 11 + 11 significant bits) is exact in fp32, so both paths are "exact
// products, fp32 sums" and differ only in summation order. A 16-bit C is read into fp32 (only when
// beta != 0), updated, and rounded once to nearest-even on the way back.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/core/error.h"

namespace ete::cpu {
namespace {

bool is_16bit_float(DType t) {
    return t == DType::BF16 || t == DType::F16;
}

// A stored (rows, cols) 16-bit matrix with leading dimension ld, as dense fp32 (ld = cols).
std::vector<float> to_dense_f32(const void* X, DType t, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(size_t(rows) * size_t(cols));
    const auto* x = static_cast<const uint16_t*>(X);
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        convert_to_f32(out.data() + size_t(r) * cols, x + size_t(r) * ld, t, size_t(cols));
    }
    return out;
}

// Dense (rows, cols) fp32 back into a 16-bit C with leading dimension ld (round to nearest even).
void from_dense_f32(void* X, DType t, const float* src, int64_t rows, int64_t cols, int64_t ld) {
    auto* x = static_cast<uint16_t*>(X);
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        convert_from_f32(x + size_t(r) * ld, t, src + size_t(r) * cols, size_t(cols));
    }
}

}  // namespace

void dnnl_gemm_check_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                          const void* C, int64_t ldc, DType c_dtype) {
    ETE_CHECK(is_16bit_float(ab_dtype), "[gemm] A and B are {}: the 16-bit GEMM takes BF16 or F16",
              dtype_name(ab_dtype));
    ETE_CHECK(c_dtype == DType::F32 || c_dtype == ab_dtype,
              "[gemm] C is {} with {} operands: expected F32 or {}", dtype_name(c_dtype),
              dtype_name(ab_dtype), dtype_name(ab_dtype));
    // The fallback hands sizes to cblas as int.
    ETE_CHECK(M >= 0 && N >= 0 && K >= 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX,
              "[gemm] {}x{}x{}: sizes must be in [0, 2^31)", M, N, K);
    int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
    ETE_CHECK(lda >= std::max<int64_t>(1, a_cols) && lda <= INT_MAX,
              "[gemm] {}x{}x{}: lda {} is below A's row width {}", M, N, K, lda, a_cols);
    ETE_CHECK(ldb >= std::max<int64_t>(1, b_cols) && ldb <= INT_MAX,
              "[gemm] {}x{}x{}: ldb {} is below B's row width {}", M, N, K, ldb, b_cols);
    ETE_CHECK(ldc >= std::max<int64_t>(1, N) && ldc <= INT_MAX,
              "[gemm] {}x{}x{}: ldc {} is below C's row width {}", M, N, K, ldc, N);
    ETE_CHECK(M == 0 || N == 0 || C, "[gemm] {}x{}x{}: C is null", M, N, K);
    ETE_CHECK(M == 0 || N == 0 || K == 0 || (A && B), "[gemm] {}x{}x{}: A or B is null", M, N, K);
}

void dnnl_gemm_fallback(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                        float beta, void* C, int64_t ldc, DType c_dtype) {
    dnnl_gemm_check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, ab_dtype, C, ldc, c_dtype);
    if (M == 0 || N == 0) return;
    // Stored shapes: A is (M, K) or, transposed, (K, M); B is (K, N) or (N, K).
    int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    std::vector<float> a = to_dense_f32(A, ab_dtype, a_rows, a_cols, lda);
    std::vector<float> b = to_dense_f32(B, ab_dtype, b_rows, b_cols, ldb);
    // K = 0 leaves empty operands; cblas still wants leading dimensions >= 1 and applies beta.
    int a_ld = int(std::max<int64_t>(1, a_cols)), b_ld = int(std::max<int64_t>(1, b_cols));
    auto sgemm = [&](float* c, int64_t c_ld) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, a.data(),
                    a_ld, b.data(), b_ld, beta, c, int(c_ld));
    };
    if (c_dtype == DType::F32) {
        sgemm(static_cast<float*>(C), ldc);
        return;
    }
    // beta 0: C is not read (it may hold NaN); the zeros only give sgemm defined input.
    std::vector<float> c = beta != 0.0f ? to_dense_f32(C, c_dtype, M, N, ldc)
                                        : std::vector<float>(size_t(M) * size_t(N), 0.0f);
    sgemm(c.data(), N);
    from_dense_f32(C, c_dtype, c.data(), M, N, ldc);
}

void dnnl_gemm_s8_check_args(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                             DType a_dtype, const int8_t* W, int64_t ldw, const int32_t* C,
                             int64_t ldc) {
    ETE_CHECK(a_dtype == DType::I8 || a_dtype == DType::U8, "[gemm_s8] A is {}: expected I8 or U8",
              dtype_name(a_dtype));
    ETE_CHECK(M >= 0 && N >= 0 && K >= 0 && K <= 65536 && M <= INT_MAX && N <= INT_MAX,
              "[gemm_s8] {}x{}x{}: expected sizes in [0, 2^31) and K <= 65536", M, N, K);
    ETE_CHECK(lda >= std::max<int64_t>(1, K) && ldw >= std::max<int64_t>(1, K) &&
                  ldc >= std::max<int64_t>(1, N),
              "[gemm_s8] {}x{}x{}: leading dimensions lda {}, ldw {}, ldc {} below the rows", M, N,
              K, lda, ldw, ldc);
    ETE_CHECK(M == 0 || N == 0 || C, "[gemm_s8] {}x{}x{}: C is null", M, N, K);
    ETE_CHECK(M == 0 || N == 0 || K == 0 || (A && W), "[gemm_s8] {}x{}x{}: A or W is null", M, N,
              K);
}

namespace {

template <typename A>
void gemm_s8_rows(int64_t M, int64_t N, int64_t K, const A* a, int64_t lda, const int8_t* w,
                  int64_t ldw, int32_t* c, int64_t ldc) {
#pragma omp parallel for schedule(static) if (M * N * K > (int64_t(1) << 18))
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            int32_t acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t k = 0; k < K; ++k)
                acc += int32_t(a[m * lda + k]) * int32_t(w[n * ldw + k]);
            c[m * ldc + n] = acc;
        }
}

}  // namespace

void gemm_s8_loops(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                   const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc) {
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);
    if (a_dtype == DType::U8)
        gemm_s8_rows(M, N, K, static_cast<const uint8_t*>(A), lda, W, ldw, C, ldc);
    else
        gemm_s8_rows(M, N, K, static_cast<const int8_t*>(A), lda, W, ldw, C, ldc);
}

}  // namespace ete::cpu
