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
// Tiles of MR rows of A by NR rows of W share each widened load; the whole K of a tile is summed
// in registers (one int32 lane per pair of k) and reduced at the end. Compiled for AVX-512BW
// (32 int16 lanes) or AVX2 (16) as the build targets; other builds keep the scalar loops.
#include <algorithm>
#include <cstdint>
#include <type_traits>

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

#if ETE_S8_AVX512
using Vec = __m512i;
constexpr int64_t kStep = 32;  // k per widened vector
constexpr int kMR = 4, kNR = 4;

[[gnu::always_inline]] inline __mmask32 lanes(int64_t n) {
    return n >= 32 ? ~__mmask32(0) : __mmask32((uint64_t(1) << n) - 1);
}
[[gnu::always_inline]] inline Vec widen(const uint8_t* p, __mmask32 k) {
    return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, p));
}
[[gnu::always_inline]] inline Vec widen(const int8_t* p, __mmask32 k) {
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, p));
}
// (_mm512_reduce_add_epi32 is built on _mm256_undefined_si256(), which GCC 12 flags as
// maybe-uninitialized under -Werror; the maskz extract takes every input explicitly.)
[[gnu::always_inline]] inline int32_t reduce(Vec v) {
    const __m256i h = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, v, 0),
                                       _mm512_maskz_extracti64x4_epi64(0xFF, v, 1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
[[gnu::always_inline]] inline Vec zero() {
    return _mm512_setzero_si512();
}
[[gnu::always_inline]] inline Vec madd_add(Vec acc, Vec a, Vec w) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(a, w));
}
#elif ETE_S8_AVX2
using Vec = __m256i;
constexpr int64_t kStep = 16;
constexpr int kMR = 4, kNR = 3;  // 12 accumulators + 3 weights + 1 activation = 16 registers

// AVX2 has no masked byte load: the tail goes through a zero-padded copy.
template <typename T>
[[gnu::always_inline]] inline Vec widen_full(const T* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<T, uint8_t>)
        return _mm256_cvtepu8_epi16(b);
    else
        return _mm256_cvtepi8_epi16(b);
}
template <typename T>
[[gnu::always_inline]] inline Vec widen(const T* p, int64_t n) {
    if (n >= kStep) return widen_full(p);
    alignas(16) T tmp[kStep] = {};
    std::copy(p, p + n, tmp);
    return widen_full(tmp);
}
[[gnu::always_inline]] inline int32_t reduce(Vec v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
[[gnu::always_inline]] inline Vec zero() {
    return _mm256_setzero_si256();
}
[[gnu::always_inline]] inline Vec madd_add(Vec acc, Vec a, Vec w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, w));
}
#endif

#if ETE_S8_AVX512 || ETE_S8_AVX2
// One tile: rows [m, m + mr) of A by rows [n, n + nr) of W, the whole K.
template <int MR, int NR, typename A>
void tile(const A* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t K, int32_t* c,
          int64_t ldc) {
    Vec acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = zero();
    for (int64_t k = 0; k < K; k += kStep) {
#if ETE_S8_AVX512
        const auto part = lanes(K - k);
#else
        const int64_t part = K - k;
#endif
        Vec wv[NR];
        for (int j = 0; j < NR; ++j) wv[j] = widen(w + j * ldw + k, part);
        for (int i = 0; i < MR; ++i) {
            const Vec av = widen(a + i * lda + k, part);
            for (int j = 0; j < NR; ++j) acc[i][j] = madd_add(acc[i][j], av, wv[j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = reduce(acc[i][j]);
}

// Rows [m0, m1) of C by columns [n0, n1), in full tiles and then the ragged edges.
template <typename A>
void block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const A* a, int64_t lda,
           const int8_t* w, int64_t ldw, int32_t* c, int64_t ldc) {
    int64_t m = m0;
    for (; m + kMR <= m1; m += kMR) {
        int64_t n = n0;
        for (; n + kNR <= n1; n += kNR)
            tile<kMR, kNR>(a + m * lda, lda, w + n * ldw, ldw, K, c + m * ldc + n, ldc);
        for (; n < n1; ++n)
            tile<kMR, 1>(a + m * lda, lda, w + n * ldw, ldw, K, c + m * ldc + n, ldc);
    }
    for (; m < m1; ++m) {
        int64_t n = n0;
        for (; n + kNR <= n1; n += kNR)
            tile<1, kNR>(a + m * lda, lda, w + n * ldw, ldw, K, c + m * ldc + n, ldc);
        for (; n < n1; ++n) tile<1, 1>(a + m * lda, lda, w + n * ldw, ldw, K, c + m * ldc + n, ldc);
    }
}
#else
template <typename A>
void block(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const A* a, int64_t lda,
           const int8_t* w, int64_t ldw, int32_t* c, int64_t ldc) {
    gemm_s8_scalar_rows(m0, m1, n0, n1, K, a, lda, w, ldw, c, ldc);
}
#endif

// Blocks of C sized so a block's rows of W (kNB · K bytes) stay in L2 while the rows of A stream
// past them; the blocks are shared among the OpenMP threads.
template <typename A>
void gemm_s8_blocked(int64_t M, int64_t N, int64_t K, const A* a, int64_t lda, const int8_t* w,
                     int64_t ldw, int32_t* c, int64_t ldc) {
    constexpr int64_t kMB = 64, kNB = 96;
    const int64_t mb = (M + kMB - 1) / kMB, nb = (N + kNB - 1) / kNB;
#pragma omp parallel for schedule(dynamic) collapse(2) if (M * N * K > (int64_t(1) << 18))
    for (int64_t j = 0; j < nb; ++j)
        for (int64_t i = 0; i < mb; ++i)
            block(i * kMB, std::min(M, (i + 1) * kMB), j * kNB, std::min(N, (j + 1) * kNB), K, a,
                  lda, w, ldw, c, ldc);
}

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
