// ete/backend/cpu/simd16.h — 16 float lanes of AVX-512 for the host kernels that write them out
// by hand: loads that widen an element type to float and stores that round back exactly as
// elem.h's scalar load/store do (bf16: round to nearest even, a NaN kept a NaN with its quiet bit
// set; fp16: the F16C conversion), each under a lane mask so ragged ends need no scalar tail.
//
// ETE_SIMD16 is defined where the build targets AVX-512 F, BW and VL (the x86 CPUs since
// Skylake-X, Zen 4); a kernel keeps its scalar loop for every other build. Only intrinsics that
// take every input explicitly are used (maskz with the lanes given): GCC 12 flags the ones built
// on _mm512_undefined_*() as maybe-uninitialized under -Werror.
#pragma once

#include "ete/backend/cpu/elem.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ETE_SIMD16 1
#include <immintrin.h>

#include <cstdint>

namespace ete::cpu::simd {

constexpr __mmask16 kAll16 = 0xFFFF;

// The lanes [0, n) of 16 (n may exceed 16).
inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? kAll16 : __mmask16((1u << n) - 1u);
}

// Element types with a 16-lane load and store here.
template <typename T>
constexpr bool kHas16 =
    std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

[[gnu::always_inline]] inline __m512 load16(const float* p, __mmask16 k) {
    return _mm512_maskz_loadu_ps(k, p);
}
[[gnu::always_inline]] inline __m512 load16(const bf16* p, __mmask16 k) {
    const __m256i h = _mm256_maskz_loadu_epi16(k, p);
    return _mm512_castsi512_ps(
        _mm512_maskz_slli_epi32(kAll16, _mm512_maskz_cvtepu16_epi32(kAll16, h), 16));
}
[[gnu::always_inline]] inline __m512 load16(const f16* p, __mmask16 k) {
    return _mm512_maskz_cvtph_ps(kAll16, _mm256_maskz_loadu_epi16(k, p));
}

[[gnu::always_inline]] inline void store16(float* p, __m512 v, __mmask16 k) {
    _mm512_mask_storeu_ps(p, k, v);
}
[[gnu::always_inline]] inline void store16(bf16* p, __m512 v, __mmask16 k) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_maskz_srli_epi32(kAll16, u, 16);
    const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_maskz_srli_epi32(
        kAll16, _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16(p, k, _mm512_maskz_cvtepi32_epi16(kAll16, r));
}
[[gnu::always_inline]] inline void store16(f16* p, __m512 v, __mmask16 k) {
    _mm256_mask_storeu_epi16(
        p, k, _mm512_maskz_cvtps_ph(kAll16, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace ete::cpu::simd

#endif
