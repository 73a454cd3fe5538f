// ete/quant/nf4.h — NF4 quantization on the host, bitsandbytes-compatible (DESIGN.md §5; the
// format itself is core/nf4.h).
//
// Quantizing a block: absmax = max |x| (fp32); every element is scaled by the reciprocal,
// s = x · (1 / absmax) in fp32, clamped to [−1, 1], and gets the index of the number of
// thresholds kNf4Mid strictly below s (a tie goes to the lower code). An all-zero block keeps
// absmax 0 and codes every element as the exact zero (index 7). bitsandbytes' CUDA kernel
// computes 0 · (1/0) = NaN there and its decision tree sends NaN to index 0 (−1.0); both
// dequantize to 0 with a plain absmax, but under double quantization the stored absmax of a zero
// block is only approximately 0, so index 0 would turn the block into −absmax_dq: ETE's choice
// keeps a zero block exactly zero.
//
// Double quantization: offset = the mean of the block absmax values, summed in double and rounded
// to fp32 (bitsandbytes' fp32 torch.mean may differ in the last bit; files carry the offset, so a
// loaded tensor is exact either way); r = absmax − offset in fp32, in blocks of 256 each scaled
// by its own fp32 absmax like above and coded as the NEAREST value of the signed 8-bit dynamic
// map (an exact tie to the lower index; a nested block of zeros to the map's 0).
//
// nf4_quantize_ref / nf4_dequantize_ref are the scalar reference; nf4_quantize / nf4_dequantize
// the fast paths (OpenMP over blocks, branch-free threshold counting that vectorises) and must
// give the same bytes and values.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ete/core/device_memory.h"
#include "ete/core/nf4.h"

namespace ete {

// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map(signed=True)): for i = 0..6 the
// n − 1 midpoints m of linspace(0.1, 1, n = 2^i + 1), scaled by ±10^(i−6), then 0 and 1, sorted.
// Computed in double and rounded once (torch's float32 linspace can differ by an ulp; every file
// carries the map it was quantized with, and dequantization reads that one).
const std::array<float, 256>& nf4_dynamic_map();

// A quantized (rows, cols) tensor in host memory, laid out like bitsandbytes' files.
struct Nf4Tensor {
    int64_t rows = 0, cols = 0;
    int blocksize = kNf4DefaultBlock;
    std::vector<uint8_t> packed;       // ceil(n / 2): element 2k high nibble, 2k + 1 low nibble
    std::vector<float> absmax;         // [blocks] fp32; empty with double quantization
    std::vector<uint8_t> absmax_q;     // [blocks] 8-bit map indices (double quantization)
    std::vector<float> nested_absmax;  // [ceil(blocks / 256)]
    std::vector<float> nested_map;     // [256] the map absmax_q indexes
    float offset = 0.0f;
    int nested_blocksize = kNf4NestedBlock;

    bool double_quant() const { return !absmax_q.empty(); }
    int64_t numel() const { return rows * cols; }
    int64_t blocks() const { return (numel() + blocksize - 1) / blocksize; }
    // The fp32 absmax of every block (reconstructed from the 8-bit codes with double quant).
    std::vector<float> block_absmax() const;
    // Bytes of the quantized data and its statistics (maps and offset included).
    size_t storage_bytes() const;
    // A view of the same layout at the given addresses (e.g. after uploading the vectors).
    Nf4View view(const void* packed_at, const void* absmax_at, const void* nested_absmax_at,
                 const void* nested_map_at) const;
    // Throws ete::Error naming `what` unless the sizes agree with rows, cols and the block sizes.
    void check(const char* what) const;
};

// A quantized tensor in backend memory: its buffers, and the view the kernels read it through.
class Nf4Buffer {
  public:
    Nf4Buffer() = default;
    Nf4Buffer(DeviceMemory& mem, const Nf4Tensor& t);
    // Not loaded yet: the view has the shape and block size, no data (empty()).
    Nf4Buffer(int64_t rows, int64_t cols, int blocksize) {
        view_.rows = rows;
        view_.cols = cols;
        view_.blocksize = blocksize;
    }
    const Nf4View& view() const { return view_; }
    // A view of memory it does not own (ZeRO-3's windows, model/param_store.h): no buffers.
    static Nf4Buffer over(const Nf4View& v) {
        Nf4Buffer b;
        b.view_ = v;
        return b;
    }
    // Backend bytes held (packed data, absmax, nested absmax and map).
    size_t bytes() const {
        return packed_.bytes() + absmax_.bytes() + nested_absmax_.bytes() + nested_map_.bytes();
    }

  private:
    DeviceBuffer packed_, absmax_, nested_absmax_, nested_map_;
    Nf4View view_;
};

struct Nf4Options {
    int blocksize = kNf4DefaultBlock;
    bool double_quant = true;
};

// Throws ete::Error naming `what` unless blocksize is a power of two in [32, 4096].
void nf4_check_blocksize(int64_t blocksize, const char* what);

Nf4Tensor nf4_quantize_ref(const float* x, int64_t rows, int64_t cols, Nf4Options opt = {});
Nf4Tensor nf4_quantize(const float* x, int64_t rows, int64_t cols, Nf4Options opt = {});
// out (rows·cols) = code · absmax, in fp32.
void nf4_dequantize_ref(const Nf4Tensor& t, float* out);
void nf4_dequantize(const Nf4Tensor& t, float* out);

// The 4-bit index of one scaled value s (already in [−1, 1]).
inline int nf4_index(float s) {
    int q = 0;
    for (float m : kNf4Mid) q += s > m ? 1 : 0;
    return q;
}

}  // namespace ete
