// ete/backend/cpu/attention_tiles.h — SIMD building blocks of the flash attention in attention.cpp.
//
//   gemm_tile       C(rows, cols) (=, +=, or row-scaled +=) A(rows, inner) * B(inner, cols), the
//                   one matrix kernel: A is read through two strides (so A or A^T), B and C are
//                   row-major with cols a multiple of kLanes and 64-byte aligned rows.
//   transpose_pack  dst(D, n_pad) = src(n, D)^T, zero past n: the vector operand of the
//                   score products (queries, or output gradients, along the vector lanes).
//   exp2_scalar     2^x, straight-line float code that vectorises inside `omp simd` loops.
//
// gemm_tile and transpose_pack use AVX-512 intrinsics when the compiler targets AVX-512F and
// plain loops otherwise. Only intrinsics that take every input explicitly are used: GCC 12 flags
// the ones built on _mm512_undefined_ps() as maybe-uninitialized under -Werror.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ete::cpu::attn {

constexpr int kLanes = 16;  // f32 lanes of a 512-bit vector

inline int round_up(int x, int m) {
    return (x + m - 1) / m * m;
}

// Taylor coefficients of 2^f = e^(f ln2), ln2^k / k!. With f in [-0.5, 0.5] the truncation error
// after degree 6 is (0.5 ln2)^7 / 7! ≈ 1.2e-7, about one f32 ulp of 2^f.
constexpr float kExp2C[7] = {1.0f,
                             0.6931471805599453f,
                             0.2402265069591007f,
                             0.055504108664821576f,
                             0.009618129107628477f,
                             0.0013333558146428441f,
                             0.00015403530393381606f};

// 2^x, relative error ~2e-7, for x in [-126, 127]; 0 below -126 (masked scores are -inf, and
// 2^-126 is far below the f32 resolution of a softmax sum that holds a 1). x = n + f with
// n = round(x) by the 1.5 * 2^23 trick, 2^n built in the exponent bits.
inline float exp2_scalar(float x) {
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float xc = std::min(std::max(x, -127.0f), 127.0f);
    float n = (xc + kRound) - kRound;
    float f = xc - n;
    float p = kExp2C[6];
    for (int k = 5; k >= 0; --k) p = p * f + kExp2C[k];
    float pow2n = std::bit_cast<float>((int32_t(n) + 127) << 23);
    return x >= -126.0f ? p * pow2n : 0.0f;
}

// How gemm_tile starts from C: overwrite, accumulate, or accumulate onto row_scale[r] * C.
enum class Init { kZero, kLoad, kScaled };

#if defined(__AVX512F__)

// C(R, 16*NV) init-ed, then += A(R, inner) * B(inner, 16*NV), A read as A[r*a_rs + k*a_cs].
// R*NV accumulators stay in registers across the whole inner loop.
template <int R, int NV>
void gemm_block(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B, int ldb,
                int inner, Init init, const float* row_scale) {
    __m512 acc[R][NV];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_set1_ps(init == Init::kScaled ? row_scale[r] : 1.0f);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v)
            acc[r][v] = init == Init::kZero
                            ? _mm512_setzero_ps()
                            : _mm512_mul_ps(s, _mm512_load_ps(C + size_t(r) * ldc + v * kLanes));
    }
    for (int k = 0; k < inner; ++k) {
        __m512 b[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) {
            b[v] = _mm512_load_ps(B + size_t(k) * ldb + v * kLanes);
            // Keeps b[v] in a register: otherwise GCC folds the load into each of the R FMAs
            // that use it, R times the load traffic of the loop.
            __asm__("" : "+v"(b[v]));
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const __m512 a = _mm512_set1_ps(A[size_t(r) * a_rs + size_t(k) * a_cs]);
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) _mm512_store_ps(C + size_t(r) * ldc + v * kLanes, acc[r][v]);
}

using GemmFn = void (*)(float*, int, const float*, int, int, const float*, int, int, Init,
                        const float*);

// Rows per register block for NV column vectors: about 16-24 accumulators of the 32 registers.
constexpr int block_rows(int nv) {
    return nv >= 4 ? 4 : nv == 3 ? 6 : 8;
}

// gemm_block<1..block_rows(NV), NV> by row count.
template <int NV, int... Rm1>
constexpr std::array<GemmFn, sizeof...(Rm1)> gemm_table(std::integer_sequence<int, Rm1...>) {
    return {gemm_block<Rm1 + 1, NV>...};
}
template <int NV>
constexpr auto kGemmTable = gemm_table<NV>(std::make_integer_sequence<int, block_rows(NV)>{});

inline GemmFn gemm_pick(int nv, int rows) {
    switch (nv) {
        case 1:
            return kGemmTable<1>[size_t(rows - 1)];
        case 2:
            return kGemmTable<2>[size_t(rows - 1)];
        case 3:
            return kGemmTable<3>[size_t(rows - 1)];
        default:
            return kGemmTable<4>[size_t(rows - 1)];
    }
}

// Cuts C into register blocks of up to 64 columns by block_rows rows (see the file header).
inline void gemm_tile(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B,
                      int ldb, int rows, int inner, int cols, Init init,
                      const float* row_scale = nullptr) {
    for (int c0 = 0; c0 < cols; c0 += 4 * kLanes) {
        const int nv = std::min(4, (cols - c0) / kLanes), br = block_rows(nv);
        for (int r = 0; r < rows; r += br) {
            const int n = std::min(br, rows - r);
            gemm_pick(nv, n)(C + size_t(r) * ldc + c0, ldc, A + size_t(r) * a_rs, a_rs, a_cs,
                             B + c0, ldb, inner, init, row_scale ? row_scale + r : nullptr);
        }
    }
}

// Index vectors of the 16x16 register transpose: at level h (8, 4, 2, 1) rows i and i+h swap
// their off-diagonal h-wide blocks, through two-source permutes (lanes 16..31 = second source).
struct TransposeIdx {
    alignas(64) int32_t lo[4][16];
    alignas(64) int32_t hi[4][16];
};
constexpr TransposeIdx make_transpose_idx() {
    TransposeIdx t{};
    for (int l = 0; l < 4; ++l) {
        const int h = 8 >> l;
        for (int k = 0; k < 16; ++k) {
            const int blk = k / (2 * h) * 2 * h, pos = k % (2 * h);
            t.lo[l][k] = pos < h ? blk + pos : 16 + blk + pos - h;
            t.hi[l][k] = pos < h ? blk + h + pos : 16 + blk + pos;
        }
    }
    return t;
}
inline constexpr TransposeIdx kTransposeIdx = make_transpose_idx();

// One level of the transpose; a template so that h is a constant and r[] stays in registers.
template <int L>
inline void transpose_level(__m512 (&r)[16]) {
    constexpr int h = 8 >> L;
    const __m512i lo = _mm512_load_si512(kTransposeIdx.lo[L]);
    const __m512i hi = _mm512_load_si512(kTransposeIdx.hi[L]);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
        if (i & h) continue;
        const __m512 a = r[i], b = r[i + h];
        r[i] = _mm512_permutex2var_ps(a, lo, b);
        r[i + h] = _mm512_permutex2var_ps(a, hi, b);
    }
}

inline void transpose16(__m512 (&r)[16]) {
    transpose_level<0>(r);
    transpose_level<1>(r);
    transpose_level<2>(r);
    transpose_level<3>(r);
}

// dst[e][t] = src[t][e] for e < D and t < n_pad (n_pad a multiple of 16), 0 for t >= n.
// dst rows have stride ld (a multiple of 16, 64-byte aligned); src rows stride src_ld.
inline void transpose_pack(float* dst, int ld, const float* src, size_t src_ld, int n, int n_pad,
                           int D) {
    for (int t0 = 0; t0 < n_pad; t0 += kLanes) {
        for (int e0 = 0; e0 < D; e0 += kLanes) {
            const int ne = std::min(kLanes, D - e0);
            const __mmask16 live = __mmask16((1u << ne) - 1u);
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i)
                r[i] = t0 + i < n ? _mm512_maskz_loadu_ps(live, src + size_t(t0 + i) * src_ld + e0)
                                  : _mm512_setzero_ps();
            transpose16(r);
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i)
                if (i < ne) _mm512_store_ps(dst + size_t(e0 + i) * ld + t0, r[i]);
        }
    }
}

#else  // portable fallback: the same contracts in plain loops

inline void gemm_tile(float* C, int ldc, const float* A, int a_rs, int a_cs, const float* B,
                      int ldb, int rows, int inner, int cols, Init init,
                      const float* row_scale = nullptr) {
    for (int r = 0; r < rows; ++r) {
        float* c = C + size_t(r) * ldc;
        if (init == Init::kZero) std::fill(c, c + cols, 0.0f);
        if (init == Init::kScaled)
            for (int j = 0; j < cols; ++j) c[j] *= row_scale[r];
        for (int k = 0; k < inner; ++k) {
            const float a = A[size_t(r) * a_rs + size_t(k) * a_cs];
            const float* b = B + size_t(k) * ldb;
#pragma omp simd
            for (int j = 0; j < cols; ++j) c[j] += a * b[j];
        }
    }
}

inline void transpose_pack(float* dst, int ld, const float* src, size_t src_ld, int n, int n_pad,
                           int D) {
    for (int e = 0; e < D; ++e) {
        float* o = dst + size_t(e) * ld;
        for (int t = 0; t < n; ++t) o[t] = src[size_t(t) * src_ld + e];
        std::fill(o + n, o + n_pad, 0.0f);
    }
}

#endif

}  // namespace ete::cpu::attn
