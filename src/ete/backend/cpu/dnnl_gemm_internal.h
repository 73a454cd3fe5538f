// ete/backend/cpu/dnnl_gemm_internal.h — the parts of dnnl_gemm that tests and the benchmark see
// but the backend does not: the fp32 fallback on its own, the argument checks both paths share,
// and the primitive cache's counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ete/core/dtype.h"

namespace ete::cpu {

// Throws ete::Error unless the dnnl_gemm arguments describe a valid product (dtypes, sizes,
// leading dimensions, non-null pointers where they are read or written).
void dnnl_gemm_check_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                          const void* C, int64_t ldc, DType c_dtype);

// dnnl_gemm without oneDNN: A and B converted to fp32 (exactly), OpenBLAS cblas_sgemm, and a 16-bit
// C converted back with round-to-nearest-even. Always available (backend/cpu/dnnl_fallback.cpp).
void dnnl_gemm_fallback(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                        float beta, void* C, int64_t ldc, DType c_dtype);

// dnnl_gemm_s8's argument checks, and its exact integer loops (always available).
void dnnl_gemm_s8_check_args(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                             DType a_dtype, const int8_t* W, int64_t ldw, const int32_t* C,
                             int64_t ldc);
void gemm_s8_loops(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                   const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc);

// How many oneDNN matmul primitives this process has created (one per distinct cache key);
// 0 without oneDNN. A repeated shape must not add one.
size_t dnnl_cached_primitives();

// The oneDNN implementation dnnl_gemm runs for these arguments, e.g. "brg:avx512_core_bf16" or
// "gemm:jit"; "fallback: fp32 sgemm (why)" when it uses dnnl_gemm_fallback; "none" without
// oneDNN.
// Creates (and caches) the primitive like a call would.
std::string dnnl_gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           int64_t lda, int64_t ldb, DType ab_dtype, float beta, int64_t ldc,
                           DType c_dtype);

}  // namespace ete::cpu
