// ete/backend/cpu/dynamic_code.h — DynamicCoder::code (core/dynamic_map.h) 16 lanes at a time,
// for 8-bit AdamW's requantization (backend/cpu/optim8.cpp), where the build targets AVX-512:
// the bucket computed as DynamicCoder::bucket does, its entry read by one gather, and the same
// comparison of ranks, so every lane gets code()'s byte
// (tests/optim/adamw8bit_test.cpp checks it on the inputs the scalar coder is checked on).
#pragma once

#include <cstdint>

#include "ete/core/dynamic_map.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ETE_DYNAMIC_CODE_AVX512 1
#include <immintrin.h>
#endif

namespace ete::cpu {

#if ETE_DYNAMIC_CODE_AVX512
// The masked forms with every lane on throughout: GCC 12 reports the unmasked intrinsics'
// undefined source operand as uninitialized (-Wmaybe-uninitialized, an error under ETE_WERROR).
constexpr __mmask16 kAll = 0xffff;

inline __m512 gather(__m512i index, const float* table) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), kAll, index, table, 4);
}

// Lanes past the end of a range of `left` elements are masked off.
inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

inline __m512i lanes_code(__m512 x, const DynamicCoder& coder) {
    constexpr int kShift = 23 - DynamicCoder::kMantissaBits;
    const __m512i bits = _mm512_castps_si512(x);
    // DynamicCoder::bucket: the magnitude's top bits, offset and clamped, plus the sign's half.
    const __m512i top = _mm512_maskz_srli_epi32(
        kAll, _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), kShift);
    const __m512i offset = _mm512_sub_epi32(
        top,
        _mm512_set1_epi32(int32_t(DynamicCoder::kMinExponent << DynamicCoder::kMantissaBits) - 1));
    const __m512i mag =
        _mm512_maskz_min_epi32(kAll, _mm512_maskz_max_epi32(kAll, offset, _mm512_setzero_si512()),
                               _mm512_set1_epi32(int32_t(DynamicCoder::kBucketsPerSign) - 1));
    const __mmask16 negative = _mm512_cmplt_epi32_mask(bits, _mm512_setzero_si512());
    const __m512i bucket = _mm512_mask_add_epi32(
        mag, negative, mag, _mm512_set1_epi32(int32_t(DynamicCoder::kBucketsPerSign)));
    // The bucket's entry, and the upper code where the lane's rank reaches the entry's.
    const __m512i entry =
        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), kAll, bucket, coder.entries(), 4);
    const __m512i mask = _mm512_set1_epi32(int32_t(DynamicCoder::kRankMask));
    const __m512i low = _mm512_and_si512(bits, mask);
    const __m512i rank = _mm512_mask_sub_epi32(low, negative, mask, low);
    const __mmask16 upper = _mm512_cmpge_epu32_mask(rank, _mm512_maskz_srli_epi32(kAll, entry, 16));
    const __m512i code = _mm512_mask_srli_epi32(entry, upper, entry, 8);
    return _mm512_and_si512(code, _mm512_set1_epi32(0xff));
}
#endif

// out[i] = coder.code(x[i]) for i < n.
inline void dynamic_codes(const float* x, int64_t n, const DynamicCoder& coder, uint8_t* out) {
#if ETE_DYNAMIC_CODE_AVX512
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mask = tail_mask(n - i);
        _mm512_mask_cvtepi32_storeu_epi8(out + i, mask,
                                         lanes_code(_mm512_maskz_loadu_ps(mask, x + i), coder));
    }
#else
    for (int64_t i = 0; i < n; ++i) out[i] = coder.code(x[i]);
#endif
}

}  // namespace ete::cpu
