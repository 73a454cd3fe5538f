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

// dynamic_code in a few steps instead of a binary search, for the optimizer's inner loop: a
// table indexed by the top 15 bits of x's float representation (sign, exponent, 6 mantissa bits)
// gives how many map values lie below every float with those bits, and 3 comparisons count the
// rest (enough for the maps here: steps() is what a map needs, checked at construction). The same
// code as dynamic_code for every finite x, tie rule included: the last step is dynamic_code's.
class DynamicCoder {
  public:
    explicit DynamicCoder(const std::array<float, 256>& map);
    uint8_t code(float x) const {
        uint32_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        int lo = start_[bits >> kShift];
        for (int s = 0; s < kSteps; ++s) lo += padded_[size_t(lo)] <= x ? 1 : 0;  // unrolled
        const int j = lo < 1 ? 1 : (lo > 255 ? 255 : lo);
        const float below = x - padded_[size_t(j - 1)], above = padded_[size_t(j)] - x;
        return uint8_t(above < below ? j : j - 1);
    }
    int steps() const { return steps_; }

  private:
    static constexpr int kShift = 17;
    static constexpr int kSteps = 3;          // the constructor checks that the map needs <= 3
    std::array<float, 256 + kSteps> padded_;  // the map, then +inf
    std::vector<uint8_t> start_;              // by key: map values below the key's floats
    int steps_ = 0;
};
// The coders of moment_map_signed() and bnb_dynamic_map_unsigned().
const DynamicCoder& moment_coder_signed();
const DynamicCoder& moment_coder_unsigned();

// Host reference of one block: codes and absmax of x[0..n) (absmax of |x| for the signed map, of
// x for the unsigned one, whose inputs are >= 0), and back.
float quantize_block(const float* x, int64_t n, const float* map, bool is_signed, uint8_t* codes);
void dequantize_block(const uint8_t* codes, int64_t n, float absmax, const float* map, float* x);

}  // namespace ete
