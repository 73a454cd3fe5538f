// ete/backend/cpu/nf4.cpp — NF4 dequantization and the NF4 GEMM (core/nf4.h, backend.h).
//
// Dequantization decodes 16 elements at a time where the build has AVX-512: 8 packed bytes are
// split into their nibbles (high first), widened to 16 indices and looked up in the code table
// held in one register (vpermps), then scaled by the block's absmax; elsewhere, and at the ragged
// ends of a block, the scalar decoder of core/nf4.h. Both give code · absmax rounded once.
//
// gemm_nf4 never holds the whole weight: it dequantizes tiles of about kTileElems elements (whole
// rows of W) into workspace in the activation dtype and runs the ordinary GEMM on each — the
// forward writes the tile's columns of c, the input gradient accumulates the tiles' products.
#include <algorithm>
#include <cstring>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/gemm_host.h"
#include "ete/backend/cpu/simd16.h"

namespace ete::cpu {

namespace {

// Elements of W per dequantized tile: 8 MB of bf16, which stays in the last-level cache while the
// GEMM reads it. Measured on the 1.1B QLoRA benchmark (Zen 4, 32 MB L3, docs/benchmarks.md): a
// step took 4.6 s with 1M-element tiles (small GEMMs), 3.1 s with 4M or 8M, 3.8 s with 16M
// (the tile no longer cached), against 3.0 s for the same step over a dense bf16 base.
constexpr int64_t kTileElems = int64_t(4) << 20;

#if defined(ETE_SIMD16)
constexpr __mmask16 kAll = simd::kAll16;

// 16 elements starting at flattened index e (a multiple of 16) as fp32, times absmax.
[[gnu::always_inline]] inline __m512 decode16(const uint8_t* packed, int64_t e, __m512 codes,
                                              __m512 absmax) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + e / 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m512i idx = _mm512_maskz_cvtepu8_epi32(kAll, _mm_unpacklo_epi8(hi, lo));
    return _mm512_mul_ps(_mm512_maskz_permutexvar_ps(kAll, idx, codes), absmax);
}

#endif

// out[0, n) = elements [e0, e0 + n) of w, all in block e0 / blocksize, times absmax m.
template <typename T>
void decode_run(T* out, const Nf4View& w, int64_t e0, int64_t n, float m) {
    const auto* packed = static_cast<const uint8_t*>(w.packed);
    int64_t i = 0;
#if defined(ETE_SIMD16)
    const __m512 codes = _mm512_loadu_ps(kNf4Code.data()), am = _mm512_set1_ps(m);
    for (; i < n && ((e0 + i) & 15); ++i)
        store(out[i], kNf4Code[size_t(nf4_nibble(packed, e0 + i))] * m);
    for (; i + 16 <= n; i += 16) simd::store16(out + i, decode16(packed, e0 + i, codes, am), kAll);
#endif
    for (; i < n; ++i) store(out[i], kNf4Code[size_t(nf4_nibble(packed, e0 + i))] * m);
}

// out (rows, cols) = rows [row0, row0 + rows) of w.
template <typename T>
void dequantize_rows(T* out, int64_t ld, const Nf4View& w, int64_t row0, int64_t rows) {
    const int64_t cols = w.cols, bs = w.blocksize;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 16))
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t e_begin = (row0 + r) * cols, e_end = e_begin + cols;
        for (int64_t e = e_begin; e < e_end;) {
            const int64_t b = e / bs, run = std::min(e_end, (b + 1) * bs) - e;
            decode_run(out + r * ld + (e - e_begin), w, e, run, nf4_block_absmax(w, b));
            e += run;
        }
    }
}

void dequantize_any(Mat out, const Nf4View& w, int64_t row0) {
    with_float_type(out.dtype, "dequantize_nf4", [&](auto t) {
        using T = decltype(t);
        dequantize_rows(elems<T>(out), out.ld, w, row0, out.rows);
    });
}

}  // namespace

Nf4View CpuBackend::host_view(const Nf4View& w) const {
    Nf4View h = w;
    h.packed = host_ptr(w.packed, w.packed_bytes());
    h.absmax = host_ptr(w.absmax, w.absmax_bytes());
    if (w.double_quant()) {
        h.nested_absmax = host_ptr(w.nested_absmax, size_t(w.nested_blocks()) * 4);
        h.nested_map = host_ptr(w.nested_map, 256 * 4);
    }
    return h;
}

void CpuBackend::dequantize_nf4(Mat out, const Nf4View& w, int64_t row0) {
    check_dequantize_nf4_args(out, w, row0);
    Scope h(*this, "dequantize_nf4");
    dequantize_any(h(out), host_view(w), row0);
}

void CpuBackend::gemm_nf4(CMat a, const Nf4View& w, bool trans_w, Mat c, float alpha, float beta) {
    const int64_t K = trans_w ? w.cols : w.rows, N = trans_w ? w.rows : w.cols;
    check_gemm_nf4_args(a, w, trans_w, c);
    Scope h(*this, trans_w ? "gemm_nf4_nt" : "gemm_nf4_nn",
            2.0 * double(a.rows) * double(N) * double(K));
    a = h(a);
    c = h(c);
    const Nf4View hw = host_view(w);
    if (a.rows == 0 || N == 0) return;
    if (K == 0) {
        if (beta == 0.0f) fill(c, 0.0f);
        return;
    }
    const int64_t tile_rows =
        std::clamp<int64_t>(kTileElems / std::max<int64_t>(w.cols, 1), 1, w.rows);
    const size_t esize = dtype_size(a.dtype);
    if (workspace_.size() < size_t(tile_rows * w.cols) * esize) {
        workspace_.resize(size_t(tile_rows * w.cols) * esize);
    }
    for (int64_t r0 = 0; r0 < w.rows; r0 += tile_rows) {
        const int64_t n = std::min(tile_rows, w.rows - r0);
        Mat tile{workspace_.data(), a.dtype, n, w.cols};
        dequantize_any(tile, hw, r0);
        if (trans_w) {
            gemm_host(a, false, tile, true, c.col_slice(r0, n), alpha, beta);
        } else {
            gemm_host(a.col_slice(r0, n), false, tile, false, c, alpha, r0 == 0 ? beta : 1.0f);
        }
    }
}

}  // namespace ete::cpu
