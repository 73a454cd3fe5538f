// ete/backend/cuda/rope.cu — RoPE (HF rotate-half) on the first 2·half dims of the q and k heads
// of the fused qkv, in place, at position t − doc_start; the transposed rotation is its backward.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

__global__ void k_rope(Mat qkv, const float* cos, const float* sin, int half, Attn d, float sign) {
    const int heads = d.H + d.KV;
    ETE_GRID_STRIDE(i, int64_t(d.B) * d.T * heads * half) {
        const int j = int(i % half);
        const int h = int((i / half) % heads);
        const int64_t row = i / (int64_t(half) * heads);
        const int64_t t = row % d.T, p = d.doc_start ? t - d.doc_start[row] : t;
        const float c = cos[p * half + j], sn = sign * sin[p * half + j];
        const int64_t o = row * qkv.ld + int64_t(h) * d.D + j;
        const float x0 = load(qkv.p, qkv.t, o), x1 = load(qkv.p, qkv.t, o + half);
        store(qkv.p, qkv.t, o, x0 * c - x1 * sn);
        store(qkv.p, qkv.t, o + half, x1 * c + x0 * sn);
    }
}

}  // namespace

void rope(cudaStream_t s, Mat qkv, const float* cos, const float* sin, int half, Attn d,
          bool inverse) {
    const int64_t n = int64_t(d.B) * d.T * (d.H + d.KV) * half;
    if (n == 0) return;
    k_rope<<<grid_for(n), kThreads, 0, s>>>(qkv, cos, sin, half, d, inverse ? -1.0f : 1.0f);
}

}  // namespace ete::cuda
