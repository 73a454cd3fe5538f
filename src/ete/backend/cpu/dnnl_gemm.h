// ete/backend/cpu/dnnl_gemm.h — 16-bit GEMM (BF16/F16 operands, fp32 accumulation) on CPU.
//
// Backed by oneDNN's matmul primitive when the build links oneDNN (backend/cpu/dnnl/), else by a
// stub that throws (backend/cpu/no_dnnl/); CMake picks one, so this header has no #ifdef. Where
// oneDNN cannot run a dtype on this CPU, dnnl_gemm converts the operands to fp32 and calls
// OpenBLAS sgemm instead: same arguments, same result up to fp32 summation order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ete/core/dtype.h"

namespace ete::cpu {

// C(M, N) = alpha * op(A)(M, K) * op(B)(K, N) + beta * C, row-major with leading dimensions
// (elements), op(X) = X^T when trans. A and B share one dtype, BF16 or F16; C is F32 or that same
// dtype; products accumulate in fp32. beta is 0 (C is not read) or any value (C is read).
void dnnl_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype, float beta,
               void* C, int64_t ldc, DType c_dtype);

// The integer GEMM of quantized inference: C(M, N) = A(M, K) · W(N, K)ᵀ exactly in int32, A I8
// or U8, W I8, row-major with leading dimensions (elements). oneDNN's int8 matmul where it is
// exact (a VNNI or AMX ISA, checked at start-up: without VNNI its int16 pair sums saturate) and
// has a non-reference kernel, else ETE's exact kernel (gemm_s8_exact.cpp; the same numbers:
// integer sums do not depend on their order). K <= 65536, so no sum can overflow int32.
void dnnl_gemm_s8(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                  const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc);
// W (N, K) I8 packed for dnnl_gemm_s8_packed: it keeps W's pointer (W must outlive it unchanged)
// and, for each weights layout a matmul asks for, one reordered copy, made on first use and kept
// (a layout depends on N, K and the ISA, so in practice one). Thread-safe.
class PackedS8 {
  public:
    PackedS8(const int8_t* W, int64_t N, int64_t K, int64_t ldw);
    ~PackedS8();
    PackedS8(const PackedS8&) = delete;
    PackedS8& operator=(const PackedS8&) = delete;
    const int8_t* plain() const { return w_; }
    int64_t N() const { return n_; }
    int64_t K() const { return k_; }
    int64_t ldw() const { return ldw_; }
    struct Layouts;  // defined where oneDNN is

  private:
    friend void dnnl_gemm_s8_packed(int64_t, const void*, int64_t, DType, const PackedS8&, int32_t*,
                                    int64_t);
    friend bool dnnl_gemm_s8_scaled(int64_t, const void*, int64_t, DType, const PackedS8&,
                                    const float*, int32_t, float, float*, int64_t);
    const int8_t* w_;
    int64_t n_, k_, ldw_;
    std::unique_ptr<Layouts> layouts_;
};
// dnnl_gemm_s8 with a packed W: the same exact integers, without a reorder of W per call.
void dnnl_gemm_s8_packed(int64_t M, const void* A, int64_t lda, DType a_dtype, const PackedS8& W,
                         int32_t* C, int64_t ldc);

// Y (M, N) F32 = scale[n] · Σ_k (A[m, k] − zero) · W[n, k] + beta · Y (beta 0 or 1) through
// oneDNN's int8 matmul with output scales and a source zero point; false (Y untouched) where
// oneDNN has no such kernel (or the build has no oneDNN). From the second call in a row with the
// same rows and scales, W's own primitive with those scales fixed runs (brgemm; oneDNN 2.6 runs
// run-time scales as gemm:jit): the same results.
bool dnnl_gemm_s8_scaled(int64_t M, const void* A, int64_t lda, DType a_dtype, const PackedS8& W,
                         const float* scale, int32_t zero, float beta, float* Y, int64_t ldy);

// The implementation dnnl_gemm_s8 runs for a shape (e.g. "brg:avx512_core_vnni", or "loops").
std::string dnnl_gemm_s8_impl(int64_t M, int64_t N, int64_t K, int64_t lda, DType a_dtype,
                              int64_t ldw, int64_t ldc);

// Host bytes dnnl_gemm keeps for `ab` products whose largest operand has `largest` elements: the
// fp32 fallback's staging (thread-local, kept at its high-water mark) where the fallback runs
// them, else 0 (oneDNN's scratchpads are of the order of OpenBLAS's per-thread buffers).
uint64_t dnnl_gemm_staging_bytes(DType ab, uint64_t largest);

// This build links oneDNN.
bool dnnl_available();
// The CPU has native instructions for this dtype (AVX512-BF16 / AMX / AVX512-FP16) per oneDNN's
// ISA query; false = oneDNN emulates it or cannot run it (dnnl_gemm then uses the fp32 fallback).
bool dnnl_native(DType ab);
// One line, e.g. "oneDNN 2.6.3 (ISA avx512_core_bf16)".
std::string dnnl_info();
// The int8 GEMM engine and why, e.g. "oneDNN 2.6.3 (ISA avx512_core_bf16), VNNI (start-up check
// exact)" or "exact avx2 kernel (oneDNN 2.6.3 (ISA avx2) has no VNNI: ...)". The choice runs
// oneDNN's start-up check (six JIT-compiled primitives, ~30 ms: a third of a small training
// process's CPU time); with choose = false a process that has not chosen yet (no int8 GEMM so
// far) gets kS8NotYetChosen instead, and the choice stays with the first int8 GEMM.
inline constexpr const char* kS8NotYetChosen = "chosen at the first int8 GEMM";
std::string dnnl_s8_info(bool choose = true);

}  // namespace ete::cpu
