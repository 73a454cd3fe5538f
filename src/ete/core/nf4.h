// ete/core/nf4.h — the NF4 format (DESIGN.md §5, REFERENCE.md "bitsandbytes 4-bit"): its code
// table, its thresholds, the packed block, and the typed view a backend reads a quantized weight
// through. The quantizer itself (host, scalar reference and fast path, double quantization) is
// quant/nf4.h; the kernels that read the format are backend ops (dequantize_nf4, gemm_nf4).
//
// The format. A tensor is flattened row-major and cut into blocks of `blocksize` consecutive
// elements (a power of two, 32..4096; the last block may be partial). Each block keeps its absmax
// (fp32) and one 4-bit index per element into kNf4Code; two indices per byte, element 2k in the
// HIGH nibble and 2k+1 in the LOW one (an odd count leaves the last low nibble 0). An element is
// code[index] · absmax of its block.
//
// Double quantization stores the absmax vector itself in 8 bits: absmax − offset (offset = the
// mean absmax) in blocks of `nested_blocksize` (256), each with its own fp32 absmax, as indices
// into bitsandbytes' signed 8-bit dynamic map (256 values in [−1, 1], kept with the tensor). A
// block's absmax is then map[q] · nested_absmax + offset, in fp32, in that order.
#pragma once

#include <array>
#include <cstdint>

#include "ete/core/view.h"

namespace ete {

// The 16 NF4 values: normal-distribution quantiles scaled to [-1, 1], with an exact zero (7).
inline constexpr std::array<float, 16> kNf4Code = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};
inline constexpr int kNf4Zero = 7;  // the index of 0.0

// The 15 decision thresholds between neighbouring codes: bitsandbytes' decision-tree constants
// (its kernels compare against these float literals). They are the midpoints of the codes
// computed from their decimal values; a midpoint computed from the fp32 codes can differ in the
// last bit (the first and the last do). A scaled value s gets the index of how many thresholds
// lie strictly below it: a tie goes to the lower code.
inline constexpr std::array<float, 15> kNf4Mid = {
    -0.8480964004993439f,  -0.6106329262256622f,  -0.4599952697753906f,   -0.33967943489551544f,
    -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
    0.1202552504837513f,   0.2035212516784668f,   0.2920137718319893f,    0.3893125355243683f,
    0.5016634166240692f,   0.6427869200706482f,   0.8614784181118011f,
};

inline constexpr int kNf4DefaultBlock = 64;
inline constexpr int kNf4NestedBlock = 256;
inline constexpr int kNf4MinBlock = 32, kNf4MaxBlock = 4096;

// One block at the default size as it lies in memory: 32 bytes of packed indices (its absmax is
// kept in a separate vector, as bitsandbytes stores it).
struct Nf4Block64 {
    uint8_t q[kNf4DefaultBlock / 2];
};
static_assert(sizeof(Nf4Block64) == 32, "an NF4 block of 64 elements packs into 32 bytes");

// Whether b is a valid NF4 block size (a power of two in [32, 4096]).
constexpr bool nf4_valid_blocksize(int64_t b) {
    return b >= kNf4MinBlock && b <= kNf4MaxBlock && (b & (b - 1)) == 0;
}

// A quantized (rows, cols) weight in backend memory. The pointers are device addresses: only a
// backend dereferences them.
struct Nf4View {
    const void* packed = nullptr;         // U8 [ceil(rows·cols / 2)]
    const void* absmax = nullptr;         // F32 [blocks], or U8 [blocks] with double quantization
    const void* nested_absmax = nullptr;  // F32 [nested blocks]; null without double quantization
    const void* nested_map = nullptr;     // F32 [256] the 8-bit map; null without double quant.
    float offset = 0.0f;                  // double quantization: the mean absmax
    int64_t rows = 0, cols = 0;
    int32_t blocksize = kNf4DefaultBlock;
    int32_t nested_blocksize = kNf4NestedBlock;

    bool empty() const { return packed == nullptr; }
    bool double_quant() const { return nested_absmax != nullptr; }
    int64_t numel() const { return rows * cols; }
    int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
    int64_t nested_blocks() const { return (blocks() + nested_blocksize - 1) / nested_blocksize; }
    size_t packed_bytes() const { return size_t((numel() + 1) / 2); }
    size_t absmax_bytes() const { return size_t(blocks()) * (double_quant() ? 1 : 4); }
};

// Scalar decoding on a view whose pointers the caller may read (host memory): the reference
// every kernel is checked against.
inline int nf4_nibble(const uint8_t* packed, int64_t e) {
    const uint8_t b = packed[e >> 1];
    return (e & 1) ? (b & 0x0f) : (b >> 4);
}
// The fp32 absmax of block b; with double quantization map[q] · nested_absmax rounded, then
// + offset (bitsandbytes' two roundings: the 8-bit dequantization, then the offset added).
inline float nf4_block_absmax(const Nf4View& w, int64_t b) {
    if (!w.double_quant()) return static_cast<const float*>(w.absmax)[b];
    const uint8_t q = static_cast<const uint8_t*>(w.absmax)[b];
    const float scaled = static_cast<const float*>(w.nested_map)[q] *
                         static_cast<const float*>(w.nested_absmax)[b / w.nested_blocksize];
    return fp32_rounded(scaled) + w.offset;
}
// Element e of the flattened weight.
inline float nf4_element(const Nf4View& w, int64_t e) {
    return kNf4Code[size_t(nf4_nibble(static_cast<const uint8_t*>(w.packed), e))] *
           nf4_block_absmax(w, e / w.blocksize);
}

}  // namespace ete
