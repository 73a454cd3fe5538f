// ete/backend/cuda/attention.cu — ETE's own causal attention on the GPU (GQA, packed documents):
// the fallback where cuDNN's fused attention does not apply, and its oracle. One warp per query
// row (forward, d_q) or per key row (d_k, d_v); a lane holds head dims lane, lane + 32, ... in
// registers (D <= 256); scores by warp butterfly sums; online softmax in fp32. No atomics: each
// output element is written by one warp, in a fixed order, so runs repeat bit for bit. Soft-capped
// scores (Attn::softcap > 0) are softcap·tanhf(s / softcap); the backward multiplies each dS by
// the cap's slope 1 - tanh². The kernels take the cap as a template parameter (kCap), so without
// one they are exactly the uncapped code.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

constexpr int kMaxPerLane = 8;  // D <= 32 · 8
constexpr int kWarps = 4;       // warps per block

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int doc_begin(const Attn& d, int64_t b, int t) {
    return d.doc_start ? d.doc_start[b * d.T + t] : 0;
}

// The first key query (b, t) sees: its document's start, or the sliding window's.
__device__ __forceinline__ int key_begin(const Attn& d, int64_t b, int t) {
    const int s = doc_begin(d, b, t);
    return d.window > 0 ? max(s, t - d.window + 1) : s;
}

// The (b, head, t) row of this thread's warp among B · heads · T rows (t fastest); valid = false
// past the last row (the whole warp returns together).
struct WarpRow {
    int64_t b;
    int head, t;
    bool valid;
};
__device__ __forceinline__ WarpRow warp_row(const Attn& d, int heads) {
    const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    return {w / (int64_t(d.T) * heads), int((w / d.T) % heads), int(w % d.T),
            w < int64_t(d.B) * heads * d.T};
}

// Loads D values at element offset o of m (row-major, 16-bit or F32) into lane registers.
__device__ __forceinline__ void load_head(float (&r)[kMaxPerLane], const void* p, Ft t, int64_t o,
                                          int D) {
    for (int k = 0; k < kMaxPerLane; ++k) {
        const int e = int(threadIdx.x % 32) + 32 * k;
        r[k] = e < D ? load(p, t, o + e) : 0.0f;
    }
}

__device__ __forceinline__ float dot(const float (&a)[kMaxPerLane], const float (&b)[kMaxPerLane]) {
    float s = 0;
    for (int k = 0; k < kMaxPerLane; ++k) s += a[k] * b[k];
    return warp_sum(s);
}

// A scaled score s under the soft-cap c > 0: c·tanh(s / c); slope = 1 - tanh².
__device__ __forceinline__ float capped(float s, float c, float& slope) {
    const float t = tanhf(s / c);
    slope = 1.0f - t * t;
    return c * t;
}

// The gradient of a scaled score q·k·scale from dP = dO·v, the row's lse and D_i: p (dP − D_i),
// times the cap's slope under a soft-cap (kCap); p, the probability, out for dV.
template <bool kCap>
__device__ __forceinline__ float score_grad(float qk, float dp, float lse, float di, const Attn& d,
                                            float scale, float& p) {
    if constexpr (kCap) {
        float slope;
        p = expf(capped(qk * scale, d.softcap, slope) - lse);
        return p * (dp - di) * slope * scale;
    } else {
        p = expf(qk * scale - lse);
        return p * (dp - di) * scale;
    }
}

template <bool kCap>
__global__ void k_attention_forward(Mat out, float* lse, CMat qkv, Attn d, float scale) {
    const WarpRow r = warp_row(d, d.H);
    if (!r.valid) return;
    const int i = r.t, h = r.head;
    const int64_t b = r.b;
    const int kh = h / (d.H / d.KV);
    float q[kMaxPerLane], k[kMaxPerLane], v[kMaxPerLane], acc[kMaxPerLane] = {};
    load_head(q, qkv.p, qkv.t, (b * d.T + i) * qkv.ld + int64_t(h) * d.D, d.D);
    float m = -INFINITY, l = 0;
    for (int j = key_begin(d, b, i); j <= i; ++j) {
        const int64_t row = (b * d.T + j) * qkv.ld;
        load_head(k, qkv.p, qkv.t, row + int64_t(d.H + kh) * d.D, d.D);
        float s = dot(q, k) * scale;
        if constexpr (kCap) {
            float slope;
            s = capped(s, d.softcap, slope);
        }
        const float m_new = fmaxf(m, s), c = expf(m - m_new), p = expf(s - m_new);
        load_head(v, qkv.p, qkv.t, row + int64_t(d.H + d.KV + kh) * d.D, d.D);
        for (int e = 0; e < kMaxPerLane; ++e) acc[e] = acc[e] * c + p * v[e];
        l = l * c + p;
        m = m_new;
    }
    const int64_t o = (b * d.T + i) * out.ld + int64_t(h) * d.D;
    for (int e = 0; e < kMaxPerLane; ++e) {
        const int dim = int(threadIdx.x % 32) + 32 * e;
        if (dim < d.D) store(out.p, out.t, o + dim, acc[e] / l);
    }
    if (threadIdx.x % 32 == 0) lse[(b * d.H + h) * d.T + i] = m + logf(l);
}

// di[(b·H + h)·T + i] = Σ_e d_out · out over the head (the softmax backward's row term).
__global__ void k_attention_di(float* di, CMat d_out, CMat out, Attn d) {
    const WarpRow r = warp_row(d, d.H);
    if (!r.valid) return;
    const int i = r.t, h = r.head;
    const int64_t b = r.b;
    float dy[kMaxPerLane], o[kMaxPerLane];
    load_head(dy, d_out.p, d_out.t, (b * d.T + i) * d_out.ld + int64_t(h) * d.D, d.D);
    load_head(o, out.p, out.t, (b * d.T + i) * out.ld + int64_t(h) * d.D, d.D);
    const float s = dot(dy, o);
    if (threadIdx.x % 32 == 0) di[(b * d.H + h) * d.T + i] = s;
}

// d_q of query row (b, h, i): Σ_j ds_ij · k_j.
template <bool kCap>
__global__ void k_attention_dq(Mat d_qkv, CMat d_out, const float* lse, const float* di, CMat qkv,
                               Attn d, float scale) {
    const WarpRow r = warp_row(d, d.H);
    if (!r.valid) return;
    const int i = r.t, h = r.head;
    const int64_t b = r.b;
    const int kh = h / (d.H / d.KV);
    const int64_t stat = (b * d.H + h) * d.T + i;
    float q[kMaxPerLane], dy[kMaxPerLane], k[kMaxPerLane], v[kMaxPerLane], dq[kMaxPerLane] = {};
    load_head(q, qkv.p, qkv.t, (b * d.T + i) * qkv.ld + int64_t(h) * d.D, d.D);
    load_head(dy, d_out.p, d_out.t, (b * d.T + i) * d_out.ld + int64_t(h) * d.D, d.D);
    for (int j = key_begin(d, b, i); j <= i; ++j) {
        const int64_t row = (b * d.T + j) * qkv.ld;
        load_head(k, qkv.p, qkv.t, row + int64_t(d.H + kh) * d.D, d.D);
        load_head(v, qkv.p, qkv.t, row + int64_t(d.H + d.KV + kh) * d.D, d.D);
        const float qk = dot(q, k), dp = dot(dy, v);
        float p;
        const float ds = score_grad<kCap>(qk, dp, lse[stat], di[stat], d, scale, p);
        for (int e = 0; e < kMaxPerLane; ++e) dq[e] += ds * k[e];
    }
    const int64_t o = (b * d.T + i) * d_qkv.ld + int64_t(h) * d.D;
    for (int e = 0; e < kMaxPerLane; ++e) {
        const int dim = int(threadIdx.x % 32) + 32 * e;
        if (dim < d.D) store(d_qkv.p, d_qkv.t, o + dim, dq[e]);
    }
}

// d_k and d_v of key row (b, kh, j): over the query heads of kv head kh and the queries i >= j of
// j's document (and window), Σ ds_ij · q_i and Σ p_ij · d_out_i.
template <bool kCap>
__global__ void k_attention_dkv(Mat d_qkv, CMat d_out, const float* lse, const float* di, CMat qkv,
                                Attn d, float scale) {
    const WarpRow r = warp_row(d, d.KV);
    if (!r.valid) return;
    const int j = r.t, kh = r.head;
    const int64_t b = r.b;
    const int group = d.H / d.KV;
    const int64_t krow = (b * d.T + j) * qkv.ld;
    float k[kMaxPerLane], v[kMaxPerLane], q[kMaxPerLane], dy[kMaxPerLane];
    float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
    load_head(k, qkv.p, qkv.t, krow + int64_t(d.H + kh) * d.D, d.D);
    load_head(v, qkv.p, qkv.t, krow + int64_t(d.H + d.KV + kh) * d.D, d.D);
    const int s_j = doc_begin(d, b, j), i_end = d.window > 0 ? min(d.T, j + d.window) : d.T;
    for (int h = kh * group; h < (kh + 1) * group; ++h) {
        for (int i = j; i < i_end && doc_begin(d, b, i) == s_j; ++i) {
            const int64_t stat = (b * d.H + h) * d.T + i;
            load_head(q, qkv.p, qkv.t, (b * d.T + i) * qkv.ld + int64_t(h) * d.D, d.D);
            load_head(dy, d_out.p, d_out.t, (b * d.T + i) * d_out.ld + int64_t(h) * d.D, d.D);
            const float qk = dot(q, k), dp = dot(dy, v);
            float p;
            const float ds = score_grad<kCap>(qk, dp, lse[stat], di[stat], d, scale, p);
            for (int e = 0; e < kMaxPerLane; ++e) {
                dk[e] += ds * q[e];
                dv[e] += p * dy[e];
            }
        }
    }
    const int64_t o = (b * d.T + j) * d_qkv.ld;
    for (int e = 0; e < kMaxPerLane; ++e) {
        const int dim = int(threadIdx.x % 32) + 32 * e;
        if (dim >= d.D) continue;
        store(d_qkv.p, d_qkv.t, o + int64_t(d.H + kh) * d.D + dim, dk[e]);
        store(d_qkv.p, d_qkv.t, o + int64_t(d.H + d.KV + kh) * d.D + dim, dv[e]);
    }
}

unsigned warp_blocks(int64_t warps) {
    return unsigned((warps + kWarps - 1) / kWarps);
}

}  // namespace

int attention_max_head_dim() {
    return 32 * kMaxPerLane;
}

void attention_forward(cudaStream_t s, Mat out, float* lse, CMat qkv, Attn d, float scale) {
    const int64_t rows = int64_t(d.B) * d.H * d.T;
    if (rows == 0) return;
    const unsigned blocks = warp_blocks(rows), threads = 32 * kWarps;
    if (d.softcap > 0) {
        k_attention_forward<true><<<blocks, threads, 0, s>>>(out, lse, qkv, d, scale);
    } else {
        k_attention_forward<false><<<blocks, threads, 0, s>>>(out, lse, qkv, d, scale);
    }
}

int64_t attention_backward_work(Attn d) {
    return int64_t(d.B) * d.H * d.T;
}

void attention_backward(cudaStream_t s, Mat d_qkv, CMat d_out, CMat out, const float* lse, CMat qkv,
                        Attn d, float scale, float* work) {
    const int64_t rows = int64_t(d.B) * d.H * d.T;
    if (rows == 0) return;
    k_attention_di<<<warp_blocks(rows), 32 * kWarps, 0, s>>>(work, d_out, out, d);
    const unsigned q_blocks = warp_blocks(rows), threads = 32 * kWarps;
    const unsigned k_blocks = warp_blocks(int64_t(d.B) * d.KV * d.T);
    if (d.softcap > 0) {
        k_attention_dq<true><<<q_blocks, threads, 0, s>>>(d_qkv, d_out, lse, work, qkv, d, scale);
        k_attention_dkv<true><<<k_blocks, threads, 0, s>>>(d_qkv, d_out, lse, work, qkv, d, scale);
    } else {
        k_attention_dq<false><<<q_blocks, threads, 0, s>>>(d_qkv, d_out, lse, work, qkv, d, scale);
        k_attention_dkv<false><<<k_blocks, threads, 0, s>>>(d_qkv, d_out, lse, work, qkv, d, scale);
    }
}

}  // namespace ete::cuda
