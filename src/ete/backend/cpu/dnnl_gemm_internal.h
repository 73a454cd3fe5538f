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
// dnnl_gemm through oneDNN whatever the engine choice (tests and the benchmark measure it on every
// CPU); it still falls back where oneDNN has no kernel for the key.
void dnnl_gemm_onednn(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dtype,
                      float beta, void* C, int64_t ldc, DType c_dtype);
// How the fallback stages its fp32 conversions. An operand of at most `whole` elements (16 MiB of
// fp32: every weight of the bench Llama, GPT-2's but its tied head) is converted whole, once; the
// other operand, and a 16-bit C, go through in blocks of at most `block` (4 MiB: a block stays in
// cache between its conversion and its sgemm); K runs in chunks of at most `k` (a long K, like the
// LM head's d_x over the vocabulary, would otherwise leave blocks a few rows wide).
struct FallbackBlocks {
    int64_t block = int64_t(1) << 20;
    int64_t whole = int64_t(1) << 22;
    int64_t k = 4096;
};
// The most the fallback's staging holds (bytes) for products whose largest operand has `largest`
// elements: one operand converted whole (at most bl.whole), one block of the other and one of C.
uint64_t dnnl_fallback_staging_bytes(uint64_t largest, const FallbackBlocks& bl = {});
// The fallback with other block sizes (tests use tiny ones to cross block edges).
void dnnl_gemm_fallback_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                                DType ab_dtype, float beta, void* C, int64_t ldc, DType c_dtype,
                                const FallbackBlocks& blocks);

// Which engine dnnl_gemm runs for a 16-bit dtype. oneDNN's native kernels are the fast path on
// AMX and on AMD's AVX512-BF16 (Zen 4: 420 GFLOP/s against sgemm's 209 at 2 threads); on an Intel
// CPU with AVX512-BF16 but no usable AMX (Sapphire/Emerald Rapids where the hypervisor hides
// AMX; Cooper Lake assumed alike, not measured) oneDNN's bf16 kernel is slower than sgemm
// (Emerald Rapids, 2 threads: 140 against 227 GFLOP/s), and without native instructions oneDNN
// emulates (gemm:jit, ~57). There the operands are converted and OpenBLAS sgemm runs: the same
// exact products and fp32 sums.
// `env` is ETE_GEMM16 (null or "auto": the rule above; "onednn" or "sgemm" force one).
enum class Gemm16Engine { OneDnn, Sgemm };
struct Gemm16Choice {
    Gemm16Engine engine;
    std::string why;  // one clause for the log and `ete --version`
};
struct Gemm16Cpu {
    bool native;  // oneDNN has non-emulated instructions for the dtype on this CPU
    bool amx;     // oneDNN's ISA includes AMX (the OS granted the tiles)
    bool amd;
};
Gemm16Choice choose_gemm16_engine(DType ab, const char* env, const Gemm16Cpu& cpu);

// dnnl_gemm_s8's argument checks.
void dnnl_gemm_s8_check_args(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                             DType a_dtype, const int8_t* W, int64_t ldw, const int32_t* C,
                             int64_t ldc);
// ETE's exact int8 GEMM (backend/cpu/gemm_s8_exact.cpp; always available): int16-widened
// operands, int32 sums, never saturating; what dnnl_gemm_s8 runs where oneDNN is not exact.
void gemm_s8_loops(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                   const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc);
// The plain scalar loops: the oracle of the start-up check and of the kernel's tests.
void gemm_s8_scalar(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                    const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc);
// The instructions gemm_s8_loops was built with: "avx512bw", "avx2" or "scalar".
const char* gemm_s8_exact_isa();
// The int8 engine's start-up check run now through oneDNN, whatever engine was chosen: empty when
// oneDNN gave the exact sums on products that saturate int16 pair sums (or has no kernel, or the
// build has no oneDNN), else what differed.
std::string dnnl_gemm_s8_check();
// Whether int8 GEMMs run through oneDNN (VNNI and the start-up check passed) or gemm_s8_loops.
bool dnnl_gemm_s8_uses_onednn();

// How many keys the 16-bit matmul cache holds: one per distinct key, made once, whether a oneDNN
// primitive or the fallback runs it; 0 without oneDNN. A repeated shape must not add one.
size_t dnnl_cache_entries();

// The oneDNN implementation dnnl_gemm_onednn runs for these arguments, e.g. "brg:avx512_core_bf16"
// or "gemm:jit"; "fallback: fp32 sgemm (why)" when it uses dnnl_gemm_fallback; "none" without
// oneDNN.
// Creates (and caches) the primitive like a call would.
std::string dnnl_gemm_impl(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           int64_t lda, int64_t ldb, DType ab_dtype, float beta, int64_t ldc,
                           DType c_dtype);

}  // namespace ete::cpu
