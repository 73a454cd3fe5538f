// ete/backend/cpu/gemm_s8_exact.cpp — the exact integer GEMM that runs wherever oneDNN's int8
// matmul is not known to be exact (dnnl_gemm.h): C(M, N) = A(M, K) · W(N, K)ᵀ in int32, A U8 or
// I8, W I8.
//
// Why not oneDNN everywhere: without VNNI (AVX2, AVX-512 before Cascade Lake) its u8×s8 kernels
// multiply with vpmaddubsw, which adds two u8·s8 products into a *saturating* int16, so
// 255·127 + 255·127 comes out as 32767 (measured: −32949 where the product is −35053).
// Here every element is widened to int16 first and multiplied with vpmaddwd (int16·int16, pairs
// added into int32): |a·w| ≤ 255·128 = 32640, a pair ≤ 65280, and K ≤ 65536 terms stay below
// 2^31 (65536 · 32640 = 2139095040), so no intermediate is ever rounded or clamped and the result
// equals the plain loop's (integer sums do not depend on their order).
//
// Both operands are widened to int16 once per call (in chunks of rows, zero-padded to whole
// vectors); tiles of MR rows of A by NR rows of W share each load, and the whole K of a tile is
// summed in registers (one int32 lane per pair of k), reduced at the end. Compiled for AVX-512BW
// (32 int16 lanes) or AVX2 (16) as the build targets; other builds keep the scalar loops.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ete/backend/cpu/dnnl_gemm_internal.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define ETE_S8_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__)
#define ETE_S8_AVX2 1
#include <immintrin.h>
#endif

namespace ete::cpu {
namespace {

template <typename A>
void gemm_s8_scalar_rows(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const A* a,
                         int64_t lda, const int8_t* w, int64_t ldw, int32_t* c, int64_t ldc) {
    for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = n0; n < n1; ++n) {
            int32_t acc = 0;
            for (int64_t k = 0; k < K; ++k)
                acc += int32_t(a[m * lda + k]) * int32_t(w[n * ldw + k]);
            c[m * ldc + n] = acc;
        }
}

#if ETE_S8_AVX512 || ETE_S8_AVX2
// The sum of 8 int32 lanes.
[[gnu::always_inline]] inline int32_t reduce256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#if ETE_S8_AVX512
using Vec = __m512i;
constexpr int64_t kStep = 32;  // int16 lanes per vector
constexpr int kMR = 4, kNR = 4;

[[gnu::always_inline]] inline Vec load(const int16_t* p) {
    return _mm512_loadu_si512(p);
}
// (_mm512_reduce_add_epi32 and _mm512_castsi512_si256 are built on _mm256_undefined_si256(),
// which GCC 12 flags as maybe-uninitialized under -Werror; the maskz extract takes every input.)
[[gnu::always_inline]] inline int32_t reduce(Vec v) {
    return reduce256(_mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, v, 0),
                                      _mm512_maskz_extracti64x4_epi64(0xFF, v, 1)));
}
[[gnu::always_inline]] inline Vec zero() {
    return _mm512_setzero_si512();
}
[[gnu::always_inline]] inline Vec madd_add(Vec acc, Vec a, Vec w) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, w));
}
#else
using Vec = __m256i;
constexpr int64_t kStep = 16;
constexpr int kMR = 4, kNR = 3;  // 12 accumulators + 3 weights + 1 activation = 16 registers

[[gnu::always_inline]] inline Vec load(const int16_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
[[gnu::always_inline]] inline int32_t reduce(Vec v) {
    return reduce256(v);
}
[[gnu::always_inline]] inline Vec zero() {
    return _mm256_setzero_si256();
}
[[gnu::always_inline]] inline Vec madd_add(Vec acc, Vec a, Vec w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, w));
}
#endif

// One tile: MR rows of the widened A by NR rows of the widened W (row length kp, a multiple of
// kStep with zeros past K).
template <int MR, int NR>
void tile(const int16_t* a, const int16_t* w, int64_t kp, int32_t* c, int64_t ldc) {
    Vec acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = zero();
    for (int64_t k = 0; k < kp; k += kStep) {
        Vec wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = load(w + j * kp + k);
        for (int i = 0; i < MR; ++i) {
            const Vec av = load(a + i * kp + k);
            for (int j = 0; j < NR; ++j) acc[i][j] = madd_add(acc[i][j], av, wv[j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = reduce(acc[i][j]);
}

// Rows [m0, m1) of A by rows [n0, n1) of W (indices into the widened chunks), full tiles, then
// the ragged edges.
void block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, const int16_t* a, const int16_t* w,
           int64_t kp, int32_t* c, int64_t ldc) {
    int64_t m = m0;
    for (; m + kMR <= m1; m += kMR) {
        int64_t n = n0;
        for (; n + kNR <= n1; n += kNR)
            tile<kMR, kNR>(a + m * kp, w + n * kp, kp, c + m * ldc + n, ldc);
        for (; n < n1; ++n) tile<kMR, 1>(a + m * kp, w + n * kp, kp, c + m * ldc + n, ldc);
    }
    for (; m < m1; ++m) {
        int64_t n = n0;
        for (; n + kNR <= n1; n += kNR)
            tile<1, kNR>(a + m * kp, w + n * kp, kp, c + m * ldc + n, ldc);
        for (; n < n1; ++n) tile<1, 1>(a + m * kp, w + n * kp, kp, c + m * ldc + n, ldc);
    }
}

// rows x K of x (leading dimension ld) widened to int16 rows of kp, zero past K.
template <typename T>
void widen_rows(int16_t* out, const T* x, int64_t rows, int64_t K, int64_t ld, int64_t kp) {
#pragma omp parallel for schedule(static) if (rows * K > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) {
        int16_t* o = out + r * kp;
        const T* in = x + r * ld;
        for (int64_t k = 0; k < K; ++k) o[k] = int16_t(in[k]);
        for (int64_t k = K; k < kp; ++k) o[k] = 0;
    }
}

// Both operands widened to int16 in chunks of rows (kMC of A, kNC of W: at most 1024 · kp
// int16s each), the chunk pair's C in blocks shared among the OpenMP threads, each block's rows
// of W (kNB · kp · 2 bytes) staying in L2 while the block's rows of A stream past them.
template <typename A>
void gemm_s8_blocked(int64_t M, int64_t N, int64_t K, const A* a, int64_t lda, const int8_t* w,
                     int64_t ldw, int32_t* c, int64_t ldc) {
    constexpr int64_t kMC = 1024, kNC = 1024, kMB = 64, kNB = 96;
    const int64_t kp = std::max<int64_t>(kStep, (K + kStep - 1) / kStep * kStep);
    // The calling thread's staging, kept between calls (widen_rows writes every element used):
    // an integer model's forward makes the same calls again and page-faults nothing after the
    // first.
    // The pointers, not the thread_local names, go into the parallel loops: there a name would
    // be each worker's own (empty) buffer.
    thread_local std::vector<int16_t> a_stage, w_stage;
    a_stage.resize(std::max(a_stage.size(), size_t(std::min(M, kMC) * kp)));
    w_stage.resize(std::max(w_stage.size(), size_t(std::min(N, kNC) * kp)));
    int16_t* const aw = a_stage.data();
    int16_t* const ww = w_stage.data();
    for (int64_t m0 = 0; m0 < M; m0 += kMC) {
        const int64_t mc = std::min(kMC, M - m0);
        widen_rows(aw, a + m0 * lda, mc, K, lda, kp);
        for (int64_t n0 = 0; n0 < N; n0 += kNC) {
            const int64_t nc = std::min(kNC, N - n0);
            widen_rows(ww, w + n0 * ldw, nc, K, ldw, kp);
            const int64_t mb = (mc + kMB - 1) / kMB, nb = (nc + kNB - 1) / kNB;
            int32_t* cc = c + m0 * ldc + n0;
#pragma omp parallel for schedule(dynamic) collapse(2) if (mc * nc * K > (int64_t(1) << 18))
            for (int64_t j = 0; j < nb; ++j)
                for (int64_t i = 0; i < mb; ++i)
                    block(i * kMB, std::min(mc, (i + 1) * kMB), j * kNB,
                          std::min(nc, (j + 1) * kNB), aw, ww, kp, cc, ldc);
        }
    }
}
#else
template <typename A>
void gemm_s8_blocked(int64_t M, int64_t N, int64_t K, const A* a, int64_t lda, const int8_t* w,
                     int64_t ldw, int32_t* c, int64_t ldc) {
    gemm_s8_scalar_rows(0, M, 0, N, K, a, lda, w, ldw, c, ldc);
}
#endif

}  // namespace

void gemm_s8_loops(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                   const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc) {
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);
    if (M == 0 || N == 0) return;
    if (a_dtype == DType::U8)
        gemm_s8_blocked(M, N, K, static_cast<const uint8_t*>(A), lda, W, ldw, C, ldc);
    else
        gemm_s8_blocked(M, N, K, static_cast<const int8_t*>(A), lda, W, ldw, C, ldc);
}

void gemm_s8_scalar(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                    const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc) {
    dnnl_gemm_s8_check_args(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);
    if (a_dtype == DType::U8)
        gemm_s8_scalar_rows(0, M, 0, N, K, static_cast<const uint8_t*>(A), lda, W, ldw, C, ldc);
    else
        gemm_s8_scalar_rows(0, M, 0, N, K, static_cast<const int8_t*>(A), lda, W, ldw, C, ldc);
}

const char* gemm_s8_exact_isa() {
#if ETE_S8_AVX512
    return "avx512bw";
#elif ETE_S8_AVX2
    return "avx2";
#else
    return "scalar";
#endif
}

}  // namespace ete::cpu
