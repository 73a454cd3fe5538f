// ete/backend/cuda/common.cuh — what the CUDA kernels share: loads and stores of any float
// storage type (fp32 arithmetic, one rounding to nearest even on a 16-bit store), grid sizes,
// (rows, cols, ld) indexing and block-wide reductions whose order is fixed (so every run of a
// kernel on one GPU gives the same bits: bit-exact resume).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ete/backend/cuda/kernels.h"

namespace ete::cuda {

constexpr int kThreads = 256;  // threads per block of the elementwise and row kernels

__device__ __forceinline__ float load(const void* p, Ft t, int64_t i) {
    switch (t) {
        case Ft::BF16:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
        case Ft::F16:
            return __half2float(static_cast<const __half*>(p)[i]);
        default:
            return static_cast<const float*>(p)[i];
    }
}

__device__ __forceinline__ void store(void* p, Ft t, int64_t i, float v) {
    switch (t) {
        case Ft::BF16:
            static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
            return;
        case Ft::F16:
            static_cast<__half*>(p)[i] = __float2half_rn(v);
            return;
        default:
            static_cast<float*>(p)[i] = v;
    }
}

// Element i (row-major over rows x cols) of a matrix with leading dimension ld.
__device__ __forceinline__ int64_t at(int64_t i, int64_t cols, int64_t ld) {
    return (i / cols) * ld + i % cols;
}

// Blocks for a grid-stride loop over n elements (at most 65535 · 16 blocks; the loop covers the
// rest).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
    const int64_t b = (n + threads - 1) / threads;
    return unsigned(b < 1 ? 1 : b > 1048560 ? 1048560 : b);
}

#define ETE_GRID_STRIDE(i, n)                                                 \
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
         i += int64_t(gridDim.x) * blockDim.x)

// The sum (or max) of v over the block, returned to every thread. Fixed order: a butterfly in
// each warp, then warp 0 over the warps' results. Every thread of the block must call it.
template <typename T>
__device__ T block_sum(T v) {
    __shared__ T part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : T(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ inline float block_max(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < warps ? part[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Column sums in a fixed order: chunk k of column_chunks(rows) sums rows k, k + chunks, ... of
// each column into work[k · cols + c]; finish_column_sums adds the chunks in order into out.
inline int column_chunks(int64_t rows) {
    return int(rows < 64 ? (rows < 1 ? 1 : rows) : 64);
}
void finish_column_sums(cudaStream_t s, float* out, const float* work, int chunks, int64_t cols);

}  // namespace ete::cuda
