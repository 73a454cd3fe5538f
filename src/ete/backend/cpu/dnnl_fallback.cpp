// ete/backend/cpu/dnnl_fallback.cpp — what dnnl_gemm runs when oneDNN cannot, or where OpenBLAS
// sgemm is the faster engine (dnnl_gemm.h): the 16-bit operands converted to fp32 block by block
// into per-thread staging buffers, and OpenBLAS sgemm per block. Also the argument checks both
// paths share.
//
// Numerics match the oneDNN path: a bf16 or f16 value converts to fp32 exactly, and the product of
// two of them (at most 11 + 11 significant bits) is exact in fp32, so both paths are "exact
// products, fp32 sums" and differ only in summation order. A 16-bit C is read into fp32 (only when
// beta != 0), updated, and rounded once to nearest-even on the way back.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string_view>

#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/backend/cpu/kernel_use.h"
#include "ete/core/error.h"

namespace ete::cpu {
namespace {

bool is_16bit_float(DType t) {
    return t == DType::BF16 || t == DType::F16;
}

// A thread's fp32 staging buffer: grows to the largest block converted on this thread and is
// kept, so a training step's GEMMs allocate (and page-fault) nothing after the first step.
class Staging {
  public:
    float* get(size_t n) {
        if (n > size_) {
            buf_.reset(new float[n]);
            size_ = n;
        }
        return buf_.get();
    }

  private:
    std::unique_ptr<float[]> buf_;
    size_t size_ = 0;
};

// The (rows, cols) 16-bit block at X (leading dimension ld) as dense fp32 (ld = cols). bf16 is the
// top half of an fp32: a shift, which the compiler vectorises here (the generic convert_to_f32
// loop does not, and cost ~10% of a GEMM).
void to_dense_f32(float* out, const void* X, DType t, int64_t rows, int64_t cols, int64_t ld) {
    const auto* x = static_cast<const uint16_t*>(X);
    if (t != DType::BF16) {
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16))
        for (int64_t r = 0; r < rows; ++r)
            convert_to_f32(out + size_t(r) * cols, x + size_t(r) * ld, t, size_t(cols));
        return;
    }
    auto* o = reinterpret_cast<uint32_t*>(out);
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* src = x + size_t(r) * ld;
        uint32_t* dst = o + size_t(r) * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) dst[c] = uint32_t(src[c]) << 16;
    }
}

// Dense (rows, cols) fp32 back into a 16-bit C with leading dimension ld (round to nearest even).
void from_dense_f32(void* X, DType t, const float* src, int64_t rows, int64_t cols, int64_t ld) {
    auto* x = static_cast<uint16_t*>(X);
#pragma omp parallel for schedule(static) if (rows * cols > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        convert_from_f32(x + size_t(r) * ld, t, src + size_t(r) * cols, size_t(cols));
    }
}

// One operand of the product, op(X) of (outer, K) where outer is M for A and N for B: the stored
// block of outer indices [o0, o0 + n) converted into dense fp32. Stored (outer, K) when the
// operand's rows are its outer index (A not transposed, B transposed), else (K, outer).
struct Operand {
    const uint16_t* x;
    int64_t ld;
    bool outer_rows;
    // Converts outer indices [o0, o0 + n) by inner (K) indices [k0, k0 + kn) into dst; returns
    // the dense block's leading dimension.
    int64_t convert(float* dst, DType t, int64_t o0, int64_t n, int64_t k0, int64_t kn) const {
        if (outer_rows) {
            if (kn > 0) to_dense_f32(dst, x + o0 * ld + k0, t, n, kn, ld);
            return std::max<int64_t>(1, kn);
        }
        if (kn > 0) to_dense_f32(dst, x + k0 * ld + o0, t, kn, n, ld);
        return std::max<int64_t>(1, n);
    }
};

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
    note_profiled_kernel();
    dnnl_gemm_fallback_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, ab_dtype, beta, C,
                               ldc, c_dtype, FallbackBlocks{});
}

uint64_t dnnl_fallback_staging_bytes(uint64_t largest, const FallbackBlocks& bl) {
    const uint64_t whole = std::min<uint64_t>(largest, uint64_t(bl.whole));
    const uint64_t block = std::min<uint64_t>(largest, uint64_t(bl.block));
    return (whole + 2 * block) * sizeof(float);
}

// One operand (the weight, usually) is converted whole when it fits bl.whole elements, and the
// other streams through it in blocks of bl.block elements, so each is converted once. K longer
// than bl.k runs in chunks summed into C (a 16-bit C: into an fp32 staging block, rounded once at
// the end). Either way C gets fp32 sums of exact products.
void dnnl_gemm_fallback_blocked(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                float alpha, const void* A, int64_t lda, const void* B, int64_t ldb,
                                DType ab_dtype, float beta, void* C, int64_t ldc, DType c_dtype,
                                const FallbackBlocks& bl) {
    note_profiled_kernel();
    dnnl_gemm_check_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, ab_dtype, C, ldc, c_dtype);
    ETE_ASSERT(bl.block > 0 && bl.whole >= bl.block && bl.k > 0);
    if (M == 0 || N == 0) return;
    thread_local Staging stage_a, stage_b, stage_c;
    const Operand a{static_cast<const uint16_t*>(A), lda, !trans_a};
    const Operand b{static_cast<const uint16_t*>(B), ldb, trans_b};
    const int64_t kb = std::max<int64_t>(1, std::min(K, bl.k));
    const int64_t per = std::max<int64_t>(1, bl.block / kb);
    const bool b_whole = N * kb <= bl.whole, a_whole = !b_whole && M * kb <= bl.whole;
    int64_t mb = a_whole ? M : std::min(M, per), nb = b_whole ? N : std::min(N, per);
    const bool c16 = c_dtype != DType::F32;
    if (c16 && b_whole) mb = std::min(mb, std::max<int64_t>(1, bl.block / nb));  // C staging
    if (c16 && !b_whole) nb = std::min(nb, std::max<int64_t>(1, bl.block / mb));
    float* a32 = stage_a.get(size_t(mb) * size_t(kb));
    float* b32 = stage_b.get(size_t(nb) * size_t(kb));
    float* c32 = c16 ? stage_c.get(size_t(mb) * size_t(nb)) : nullptr;
    const bool a_once = mb == M && kb >= K, b_once = nb == N && kb >= K;
    int64_t a_ld = a_once ? a.convert(a32, ab_dtype, 0, M, 0, K) : 0;
    int64_t b_ld = b_once ? b.convert(b32, ab_dtype, 0, N, 0, K) : 0;
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
        const int64_t m = std::min(mb, M - m0);
        for (int64_t n0 = 0; n0 < N; n0 += nb) {
            const int64_t n = std::min(nb, N - n0);
            float* c = c16 ? c32 : static_cast<float*>(C) + m0 * ldc + n0;
            const int64_t c_ld = c16 ? n : ldc;
            auto* c_out = static_cast<uint16_t*>(C) + (m0 * ldc + n0);
            float beta_k = beta;
            if (c16 && beta != 0.0f) to_dense_f32(c32, c_out, c_dtype, m, n, ldc);
            // beta 0: C is not read (it may hold NaN); zeros give sgemm defined input.
            if (c16 && beta == 0.0f) std::fill_n(c32, size_t(m) * size_t(n), 0.0f);
            for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += kb) {
                const int64_t k = std::min(kb, K - k0);
                if (!a_once) a_ld = a.convert(a32, ab_dtype, m0, m, k0, k);
                if (!b_once) b_ld = b.convert(b32, ab_dtype, n0, n, k0, k);
                cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                            trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a32,
                            int(a_ld), b32, int(b_ld), beta_k, c, int(c_ld));
                beta_k = 1.0f;
            }
            if (c16) from_dense_f32(c_out, c_dtype, c32, m, n, ldc);
        }
    }
}

Gemm16Choice choose_gemm16_engine(DType ab, const char* env, const Gemm16Cpu& cpu) {
    const std::string_view e = env ? env : "";
    if (e == "onednn") return {Gemm16Engine::OneDnn, "ETE_GEMM16=onednn"};
    if (e == "sgemm") return {Gemm16Engine::Sgemm, "ETE_GEMM16=sgemm"};
    ETE_CHECK(e.empty() || e == "auto", "ETE_GEMM16={:?}: expected auto, onednn or sgemm", e);
    const char* dt = ab == DType::BF16 ? "BF16" : "F16";
    if (!cpu.native)
        return {Gemm16Engine::Sgemm, fmt::format("no native {} instructions on this CPU", dt)};
    if (ab == DType::F16 || cpu.amx || cpu.amd)
        return {Gemm16Engine::OneDnn, fmt::format("native {}", cpu.amx ? "AMX" : dt)};
    return {Gemm16Engine::Sgemm, "AVX512-BF16 without AMX on an Intel CPU is slower than sgemm"};
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

}  // namespace ete::cpu
