// ete/core/dynamic_map.h — bitsandbytes' 8-bit dynamic quantization maps, and the blockwise
// format of 8-bit AdamW's moments (optim/adamw8bit.h).
//
// The maps (bitsandbytes' create_dynamic_map): for i = 0..6 the n − 1 midpoints m of
// linspace(0.1, 1, n), scaled by 10^(i−6) — signed: n = 2^i + 1 and both ±m; unsigned: n =
// 2^(i+1) + 1 — then 0 and 1, sorted: 256 values in [−1, 1] (signed) or [0, 1] (unsigned), dense
// near zero (seven decades, 1e-7..1) and linear within each decade. Computed in double and
// rounded once.
//
// The optimizer's format. A moment tensor is cut into blocks of `block` consecutive elements (the
// last may be shorter); a block keeps its absmax a (fp32: max |x| over the block) and one byte per
// element, the index of the map value nearest to x / a (fp32 division; distances in fp32, a tie
// goes to the lower index); an element is map[code] · a. A block of zeros (a = 0) stores the index
// of 0. The signed map used for the first moment is bitsandbytes' with its lowest value −0.99297
// made −1: then both signs of a block's absmax element map to ±1 exactly, so quantizing a
// dequantized block gives back the same absmax and codes (checkpoints hold the moments
// dequantized and layout-free; a resume restores the same bytes). The second moment is >= 0 and
// uses the unsigned map as is (it has 1).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ete {

const std::array<float, 256>& bnb_dynamic_map_signed();
const std::array<float, 256>& bnb_dynamic_map_unsigned();
// The first moment's map: bnb_dynamic_map_signed() with map[0] = -1.
const std::array<float, 256>& moment_map_signed();

// The index of the value of the sorted 256-entry map nearest to x (in [map[0], map[255]]):
// fp32 distances to the two neighbours, a tie to the lower index.
inline uint8_t dynamic_code(float x, const float* map) {
    int lo = 0, hi = 256;  // the first index whose value exceeds x, in [lo, hi]
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (map[mid] > x) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    const int j = lo < 1 ? 1 : (lo > 255 ? 255 : lo);
    const float below = x - map[j - 1], above = map[j] - x;
    return uint8_t(above < below ? j : j - 1);
}

// dynamic_code without a search, for the optimizer's inner loop. Floats fall into buckets by
// their sign, exponent and top kMantissaBits mantissa bits (every |x| below 2^(kMinExponent−127),
// and every |x| >= 2, NaN and inf included, share one bucket per sign). Over a bucket's floats
// dynamic_code is non-decreasing (the count of map values <= x grows with x, and so does the
// choice between the two neighbours: x − below rises as above − x falls), and the constructor
// checks that it takes at most two neighbouring codes there (one in the two clamped buckets).
// Each bucket is one 32-bit entry: the lower code, the upper code, and the place in value order
// of the bucket's first float that gets the upper code (a float's `rank`: its low
// 23 − kMantissaBits bits, counted down for negatives; 0 where the bucket has one code, both
// codes then equal). code(x) = rank(x) >= that place ? upper : lower — dynamic_code's byte for
// every finite x, its tie rule included (for NaN, the code of its clamped bucket). One lookup,
// and in the vector kernel one gather per 16 codes (backend/cpu/dynamic_code.h); the signed
// table is 24 KiB, so it stays in L1 beside the block.
class DynamicCoder {
  public:
    static constexpr int kMantissaBits = 7;
    static constexpr uint32_t kMinExponent = 104;  // 2^-23: below half the smallest map gap
    static constexpr uint32_t kBucketsPerSign = ((128 - kMinExponent) << kMantissaBits) + 2;
    static constexpr uint32_t kRankMask = (1u << (23 - kMantissaBits)) - 1;
    static_assert(kRankMask <= 0xffff);  // a rank fits an entry's 16 bits

    explicit DynamicCoder(const std::array<float, 256>& map);

    // The bucket of a float's bits: sign * kBucketsPerSign + magnitude bucket, where magnitude
    // bucket 0 holds |x| < 2^(kMinExponent−127) and the last one |x| >= 2.
    static uint32_t bucket(uint32_t bits) {
        const int32_t top = int32_t((bits & 0x7fffffffu) >> (23 - kMantissaBits));
        const int32_t mag = std::min(std::max(top - int32_t(kMinExponent << kMantissaBits) + 1, 0),
                                     int32_t(kBucketsPerSign) - 1);
        return (bits >> 31) * kBucketsPerSign + uint32_t(mag);
    }
    // A float's place in value order within its (unclamped) bucket.
    static uint32_t rank(uint32_t bits) {
        return (bits >> 31) ? kRankMask - (bits & kRankMask) : bits & kRankMask;
    }
    uint8_t code(float x) const {
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        const uint32_t e = entries_[bucket(bits)];
        return uint8_t(rank(bits) >= e >> 16 ? e >> 8 : e);
    }

    // The table, for a vector kernel that runs code() lane by lane: by bucket, the lower code in
    // bits 0-7, the upper one in bits 8-15, the upper code's first rank in bits 16-31.
    const uint32_t* entries() const { return entries_.data(); }

  private:
    std::vector<uint32_t> entries_;
};
// The coders of moment_map_signed() and bnb_dynamic_map_unsigned().
const DynamicCoder& moment_coder_signed();
const DynamicCoder& moment_coder_unsigned();

// Host reference of one block: codes and absmax of x[0..n) (absmax of |x| for the signed map, of
// x for the unsigned one, whose inputs are >= 0), and back.
float quantize_block(const float* x, int64_t n, const float* map, bool is_signed, uint8_t* codes);
void dequantize_block(const uint8_t* codes, int64_t n, float absmax, const float* map, float* x);

}  // namespace ete
