// ete/backend/cpu/dnnl_gemm.h — 16-bit GEMM (BF16/F16 operands, fp32 accumulation) on CPU.
//
// Backed by oneDNN's matmul primitive when the build links oneDNN (backend/cpu/dnnl/), else by a
// stub that throws (backend/cpu/no_dnnl/); CMake picks one, so this header has no #ifdef. Where
// oneDNN cannot run a dtype on this CPU, dnnl_gemm converts the operands to fp32 and calls
// OpenBLAS sgemm instead: same arguments, same result up to fp32 summation order.
#pragma once

#include <cstdint>
#include <string>

#include "ete/core/dtype.h"

namespace ete::cpu {

// C(M, N) = alpha * op(A)(M, K) * op(B)(K, N) + beta * C, row-major with leading dimensions
// (elements), op(X) = X^T when trans. A and B share one dtype, BF16 or F16; C is F32 or that same
// dtype; products accumulate in fp32. beta is 0 (C is not read) or any value (C is read).
void dnnl_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype, float beta,
               void* C, int64_t ldc, DType c_dtype);

// This build links oneDNN.
bool dnnl_available();
// The CPU has native instructions for this dtype (AVX512-BF16 / AMX / AVX512-FP16) per oneDNN's
// ISA query; false = oneDNN emulates it or cannot run it (dnnl_gemm then uses the fp32 fallback).
bool dnnl_native(DType ab);
// One line, e.g. "oneDNN 2.6.3 (ISA avx512_core_bf16)".
std::string dnnl_info();

}  // namespace ete::cpu
