// ete/core/rng.cpp
#include "ete/core/rng.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "ete/core/rng_normal.h"

namespace ete {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 2> key, std::array<uint32_t, 4> c) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = uint64_t(kM0) * c[0];
        uint64_t p1 = uint64_t(kM1) * c[2];
        c = {uint32_t(p1 >> 32) ^ c[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ key[1],
             uint32_t(p0)};
        key[0] += kW0;
        key[1] += kW1;
    }
    return c;
}

uint64_t stable_hash(std::string_view s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    return h;
}

std::array<uint32_t, 4> CounterRng::block(uint64_t index) const {
    return philox4x32(
        {uint32_t(seed_), uint32_t(seed_ >> 32)},
        {uint32_t(index), uint32_t(index >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)});
}

namespace {

// Eight Philox blocks at once: 64-bit lanes holding 32-bit values (GCC/Clang vector extensions,
// lowered to AVX-512, AVX2 or scalar code as the target allows), so each round's two 32x32->64
// products are one vector multiply.
using V8 = uint64_t __attribute__((vector_size(64)));

// out = a · m per lane, a < 2^32 and m < 2^32: AVX-512's 32x32->64 multiply (one uop) where there
// is one (the compiler would use the full 64-bit vpmullq). Vectors by reference: passing them by
// value changes the ABI between builds with and without AVX-512 (-Wpsabi).
inline void mul32(const V8& a, uint64_t m, V8& out) {
#if defined(__AVX512F__)
    // maskz with every lane set: GCC 12 flags the unmasked intrinsic (built on
    // _mm512_undefined_epi32) as maybe-uninitialized under -Werror.
    out = V8(_mm512_maskz_mul_epu32(0xFF, __m512i(a), _mm512_set1_epi64(int64_t(m))));
#else
    out = a * m;
#endif
}

void philox8(V8& c0, V8& c1, V8& c2, V8& c3, uint64_t seed) {
    constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kLo = 0xFFFFFFFFu;
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round, k0 += 0x9E3779B9u, k1 += 0xBB67AE85u) {
        V8 p0, p1;
        mul32(c0, kM0, p0);
        mul32(c2, kM1, p1);
        c0 = (p1 >> 32) ^ c1 ^ uint64_t(k0);
        c1 = p1 & kLo;
        c2 = (p0 >> 32) ^ c3 ^ uint64_t(k1);
        c3 = p0 & kLo;
    }
}

}  // namespace

void CounterRng::words(uint64_t first, int64_t n, uint32_t* out) const {
    uint64_t q = first >> 2;
    unsigned skip = unsigned(first & 3);  // words of the first block before `first`
    const V8 iota = {0, 1, 2, 3, 4, 5, 6, 7};
    while (n > 0) {
        const V8 idx = iota + q;
        V8 c0 = idx & 0xFFFFFFFFu, c1 = idx >> 32;
        V8 c2 = V8{} + uint64_t(uint32_t(stream_)), c3 = V8{} + (stream_ >> 32);
        philox8(c0, c1, c2, c3, seed_);
        if (skip == 0 && n >= 32) {  // whole blocks: word j of block l is element 4l + j
            for (int l = 0; l < 8; ++l) {
                out[4 * l] = uint32_t(c0[l]);
                out[4 * l + 1] = uint32_t(c1[l]);
                out[4 * l + 2] = uint32_t(c2[l]);
                out[4 * l + 3] = uint32_t(c3[l]);
            }
            out += 32;
            n -= 32;
            q += 8;
            continue;
        }
        for (int l = 0; l < 8 && n > 0; ++l) {
            const uint32_t w[4] = {uint32_t(c0[l]), uint32_t(c1[l]), uint32_t(c2[l]),
                                   uint32_t(c3[l])};
            for (unsigned j = skip; j < 4 && n > 0; ++j, --n) *out++ = w[j];
            skip = 0;
        }
        q += 8;
    }
}

uint32_t CounterRng::u32(uint64_t index) const {
    return block(index)[0];
}

float CounterRng::uniform(uint64_t index) const {
    return float(u32(index) >> 8) * (1.0f / 16777216.0f);
}

float CounterRng::normal(uint64_t index) const {
    auto b = block(index);
    return rng_detail::normal_from_words(b[0], b[1]);
}

}  // namespace ete
