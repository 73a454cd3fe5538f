// ete/backend/cuda/quant.cu — quantization on the GPU: QAT's block min/max, quantization
// parameters, fake quantization with its straight-through mask and LSQ's scale gradient; the
// integer model's activation quantization, exact int8 products and their dequantization; NF4
// dequantization; counter-based dropout. Each mirrors core/fake_quant.h, core/nf4.h and
// core/rng.h operation for operation (the _rn intrinsics where a compiler could otherwise fuse a
// multiply-add), so results equal the CPU reference's bit for bit.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

constexpr float kMinScale = 1.1920928955078125e-07f;  // core/fake_quant.h

__device__ __forceinline__ float clampq(float q, float qmin, float qmax) {
    return q < qmin ? qmin : (q > qmax ? qmax : q);  // NaN stays NaN
}

// One warp per block of `group` columns: the min and max of its finite elements.
__global__ void k_min_max(float* lo, float* hi, CMat x, int64_t group) {
    const int64_t per_row = x.cols / group, blocks = x.rows * per_row;
    const int64_t w = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (w >= blocks) return;
    const int64_t r = w / per_row, c0 = (w % per_row) * group;
    float mn = INFINITY, mx = -INFINITY;
    for (int64_t j = threadIdx.x % 32; j < group; j += 32) {
        const float v = load(x.p, x.t, r * x.ld + c0 + j);
        if (!isfinite(v)) continue;
        mn = fminf(mn, v);
        mx = fmaxf(mx, v);
    }
    for (int o = 16; o > 0; o >>= 1) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    if (threadIdx.x % 32 == 0) {
        lo[w] = mn;
        hi[w] = mx;
    }
}

__global__ void k_quant_params(float* scale, float* zero, const float* lo, const float* hi,
                               int64_t n, Grid g) {
    ETE_GRID_STRIDE(i, n) {
        float l = lo[i], h = hi[i];
        if (!(l <= h)) l = h = 0.0f;
        const float lo0 = fminf(l, 0.0f), hi0 = fmaxf(h, 0.0f);
        const float qmin = float(g.qmin), qmax = float(g.qmax);
        if (g.rule == 0) {
            scale[i] = fmaxf(__fdiv_rn(fmaxf(-lo0, hi0), (qmax - qmin) / 2), kMinScale);
            zero[i] = 0.0f;
            continue;
        }
        const float s = fmaxf(__fdiv_rn(hi0 - lo0, qmax - qmin), kMinScale);
        float z;
        if (g.rule == 1) {
            z = qmin - rintf(__fdiv_rn(lo0, s));
        } else {
            const float dmin = __fdiv_rn(lo0, s), dmax = __fdiv_rn(hi0, s);
            z = (qmin + dmin) + (qmax + dmax) > 0 ? qmin - dmin : qmax - dmax;
        }
        scale[i] = s;
        zero[i] = rintf(fminf(fmaxf(z, qmin), qmax));
    }
}

// One thread per mask byte: columns 8j .. 8j + 7 of a row.
__global__ void k_fake_quant(Mat y, CMat x, const float* scale, const float* zero, int64_t n_scale,
                             uint8_t* mask, int64_t group, Grid g) {
    const int64_t row_bytes = (x.cols + 7) / 8, per_row = x.cols / group;
    const float qmin = float(g.qmin), qmax = float(g.qmax);
    ETE_GRID_STRIDE(i, x.rows * row_bytes) {
        const int64_t r = i / row_bytes, c0 = (i % row_bytes) * 8;
        unsigned bits = 0;
        for (int64_t c = c0; c < c0 + 8 && c < x.cols; ++c) {
            const int64_t k = n_scale == 1 ? 0 : r * per_row + c / group;
            const float s = scale[k], inv_s = __fdiv_rn(1.0f, s), z = zero[k];
            float q = rintf(__fmul_rn(load(x.p, x.t, r * x.ld + c), inv_s)) + z;
            if (q >= qmin && q <= qmax) bits |= 1u << (c - c0);
            q = clampq(q, qmin, qmax);
            store(y.p, y.t, r * y.ld + c, __fmul_rn(q - z, s));
        }
        if (mask) mask[i] = uint8_t(bits);
    }
}

__global__ void k_fake_quant_backward(Mat d_x, CMat d_y, const uint8_t* mask) {
    const int64_t row_bytes = (d_y.cols + 7) / 8;
    ETE_GRID_STRIDE(i, d_y.rows * d_y.cols) {
        const int64_t r = i / d_y.cols, c = i % d_y.cols;
        const bool keep = (mask[r * row_bytes + c / 8] >> (c % 8)) & 1;
        store(d_x.p, d_x.t, r * d_x.ld + c, keep ? load(d_y.p, d_y.t, r * d_y.ld + c) : 0.0f);
    }
}

// One thread per block, summing in double in column order (as every backend does).
__global__ void k_fake_quant_scale_grad(float* d_scale, CMat x, CMat d_y, const float* scale,
                                        const float* zero, int64_t n_scale, int64_t group, Grid g) {
    const int64_t per_row = x.cols / group;
    const float qmin = float(g.qmin), qmax = float(g.qmax);
    ETE_GRID_STRIDE(i, x.rows * per_row) {
        const int64_t r = i / per_row, b = i % per_row, k = n_scale == 1 ? 0 : i;
        const float inv_s = __fdiv_rn(1.0f, scale[k]), z = zero[k];
        double sum = 0;
        for (int64_t c = b * group; c < (b + 1) * group; ++c) {
            const float xv = load(x.p, x.t, r * x.ld + c), xs = __fmul_rn(xv, inv_s);
            float q = rintf(xs) + z;
            const bool inside = q >= qmin && q <= qmax;
            q = clampq(q, qmin, qmax);
            const float slope = inside ? (q - z) - xs : q - z;
            sum += double(load(d_y.p, d_y.t, r * d_y.ld + c)) * double(slope);
        }
        d_scale[i] = float(sum);
    }
}

__global__ void k_quantize_s8(Mat8 q, CMat x, const float* scale, const float* zero,
                              int64_t n_scale, Grid g) {
    const float qmin = float(g.qmin), qmax = float(g.qmax);
    ETE_GRID_STRIDE(i, x.rows * x.cols) {
        const int64_t r = i / x.cols, c = i % x.cols, k = n_scale == 1 ? 0 : r;
        const float inv_s = __fdiv_rn(1.0f, scale[k]), z = zero[k];
        float v = clampq(rintf(__fmul_rn(load(x.p, x.t, r * x.ld + c), inv_s)) + z, qmin, qmax);
        v = v == v ? v : z;
        if (q.is_unsigned)
            static_cast<uint8_t*>(q.p)[r * q.ld + c] = uint8_t(int(v) + 128);
        else
            static_cast<int8_t*>(q.p)[r * q.ld + c] = int8_t(int(v));
    }
}

__global__ void k_dequantize_s32(Mat y, const int32_t* acc, int64_t acc_ld, const float* a_scale,
                                 const float* a_zero, int64_t n_a, int a_offset,
                                 const float* w_scale, const int32_t* w_sum, float beta) {
    ETE_GRID_STRIDE(i, y.rows * y.cols) {
        const int64_t m = i / y.cols, n = i % y.cols, k = n_a == 1 ? 0 : m;
        const int64_t zo = int64_t(a_zero[k]) + a_offset;
        const int64_t d = int64_t(acc[m * acc_ld + n]) - zo * int64_t(w_sum[n]);
        const float v = __fmul_rn(float(int32_t(d)), __fmul_rn(a_scale[k], w_scale[n]));
        const int64_t o = m * y.ld + n;
        store(y.p, y.t, o, beta == 0.0f ? v : __fmaf_rn(beta, load(y.p, y.t, o), v));
    }
}

// c (M, N) = Σ_k (a[m, k] − zero) · w[n, k], exactly in int32: 16 x 16 output tiles, K in steps
// of 16 through shared memory. With scale: y = scale[n] · c (+ beta · y) instead.
constexpr int kTile = 16;

__global__ void k_gemm_s8(Mat8C a, Mat8C w, int32_t zero, int32_t* c, int64_t c_ld, float* y,
                          int64_t y_ld, const float* scale, float beta) {
    __shared__ int32_t as[kTile][kTile + 1], ws[kTile][kTile + 1];
    const int64_t m = int64_t(blockIdx.y) * kTile + threadIdx.y;
    const int64_t n = int64_t(blockIdx.x) * kTile + threadIdx.x;
    const int64_t wn = int64_t(blockIdx.x) * kTile + threadIdx.y;  // the w row this thread loads
    int32_t acc = 0;
    for (int64_t k0 = 0; k0 < a.cols; k0 += kTile) {
        const int64_t k = k0 + threadIdx.x;
        int32_t av = 0, wv = 0;
        if (m < a.rows && k < a.cols) {
            av = a.is_unsigned ? int32_t(static_cast<const uint8_t*>(a.p)[m * a.ld + k])
                               : int32_t(static_cast<const int8_t*>(a.p)[m * a.ld + k]);
            av -= zero;
        }
        if (wn < w.rows && k < w.cols) wv = static_cast<const int8_t*>(w.p)[wn * w.ld + k];
        as[threadIdx.y][threadIdx.x] = av;
        ws[threadIdx.y][threadIdx.x] = wv;
        __syncthreads();
        for (int kk = 0; kk < kTile; ++kk) acc += as[threadIdx.y][kk] * ws[threadIdx.x][kk];
        __syncthreads();
    }
    if (m >= a.rows || n >= w.rows) return;
    if (c) {
        c[m * c_ld + n] = acc;
        return;
    }
    const float v = __fmul_rn(float(acc), __fmul_rn(1.0f, scale[n]));
    float& out = y[m * y_ld + n];
    out = beta == 0.0f ? v : __fmaf_rn(beta, out, v);
}

__global__ void k_dequantize_nf4(Mat out, Nf4 w, int64_t row0) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const int64_t r = i / out.cols, c = i % out.cols, e = (row0 + r) * w.cols + c;
        const uint8_t byte = w.packed[e >> 1];
        const int idx = (e & 1) ? (byte & 0x0f) : (byte >> 4);
        const int64_t b = e / w.blocksize;
        float absmax;
        if (w.nested_absmax) {
            const uint8_t q = static_cast<const uint8_t*>(w.absmax)[b];
            absmax = __fadd_rn(__fmul_rn(w.nested_map[q], w.nested_absmax[b / w.nested_blocksize]),
                               w.offset);
        } else {
            absmax = static_cast<const float*>(w.absmax)[b];
        }
        store(out.p, out.t, r * out.ld + c, __fmul_rn(w.code[idx], absmax));
    }
}

// core/rng.cpp's philox4x32 on counter {e >> 2, stream}: word e & 3.
__device__ uint32_t philox_word(uint64_t seed, uint64_t stream, uint64_t e) {
    const uint64_t q = e >> 2;
    uint32_t c0 = uint32_t(q), c1 = uint32_t(q >> 32), c2 = uint32_t(stream),
             c3 = uint32_t(stream >> 32);
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
        const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    const uint32_t words[4] = {c0, c1, c2, c3};
    return words[e & 3];
}

__global__ void k_dropout(Mat y, CMat x, Dropout d, bool accumulate) {
    ETE_GRID_STRIDE(i, x.rows * x.cols) {
        const int64_t r = i / x.cols, c = i % x.cols;
        const uint64_t e = (d.row0 + uint64_t(r)) * d.row_stride + d.col0 + uint64_t(c);
        // fp32 arithmetic, the product and the sum rounded apart (no fma), one rounding to y.
        float v = philox_word(d.seed, d.stream, e) >= d.threshold
                      ? __fmul_rn(load(x.p, x.t, r * x.ld + c), d.keep_scale)
                      : 0.0f;
        const int64_t o = r * y.ld + c;
        if (accumulate) v = __fadd_rn(load(y.p, y.t, o), v);
        store(y.p, y.t, o, v);
    }
}

}  // namespace

void min_max(cudaStream_t s, float* lo, float* hi, CMat x, int64_t group) {
    const int64_t blocks = x.rows * (x.cols / group);
    if (blocks == 0) return;
    k_min_max<<<unsigned((blocks + 7) / 8), 256, 0, s>>>(lo, hi, x, group);
}
void quant_params(cudaStream_t s, float* scale, float* zero, const float* lo, const float* hi,
                  int64_t n, Grid g) {
    if (n == 0) return;
    k_quant_params<<<grid_for(n), kThreads, 0, s>>>(scale, zero, lo, hi, n, g);
}
void fake_quant(cudaStream_t s, Mat y, CMat x, const float* scale, const float* zero,
                int64_t n_scale, uint8_t* mask, int64_t group, Grid g) {
    const int64_t n = x.rows * ((x.cols + 7) / 8);
    if (n == 0) return;
    k_fake_quant<<<grid_for(n), kThreads, 0, s>>>(y, x, scale, zero, n_scale, mask, group, g);
}
void fake_quant_backward(cudaStream_t s, Mat d_x, CMat d_y, const uint8_t* mask) {
    if (d_y.rows * d_y.cols == 0) return;
    k_fake_quant_backward<<<grid_for(d_y.rows * d_y.cols), kThreads, 0, s>>>(d_x, d_y, mask);
}
void fake_quant_scale_grad(cudaStream_t s, float* d_scale, CMat x, CMat d_y, const float* scale,
                           const float* zero, int64_t n_scale, int64_t group, Grid g) {
    const int64_t n = x.rows * (x.cols / group);
    if (n == 0) return;
    k_fake_quant_scale_grad<<<grid_for(n, 64), 64, 0, s>>>(d_scale, x, d_y, scale, zero, n_scale,
                                                           group, g);
}
void quantize_s8(cudaStream_t s, Mat8 q, CMat x, const float* scale, const float* zero,
                 int64_t n_scale, Grid g) {
    if (x.rows * x.cols == 0) return;
    k_quantize_s8<<<grid_for(x.rows * x.cols), kThreads, 0, s>>>(q, x, scale, zero, n_scale, g);
}
void dequantize_s32(cudaStream_t s, Mat y, const int32_t* acc, int64_t acc_ld, const float* a_scale,
                    const float* a_zero, int64_t n_a, int a_offset, const float* w_scale,
                    const int32_t* w_sum, float beta) {
    if (y.rows * y.cols == 0) return;
    k_dequantize_s32<<<grid_for(y.rows * y.cols), kThreads, 0, s>>>(
        y, acc, acc_ld, a_scale, a_zero, n_a, a_offset, w_scale, w_sum, beta);
}
void gemm_s8(cudaStream_t s, Mat8C a, Mat8C w, int32_t zero, int32_t* c, int64_t c_ld, float* y,
             int64_t y_ld, const float* scale, float beta) {
    if (a.rows == 0 || w.rows == 0) return;
    const dim3 grid(unsigned((w.rows + kTile - 1) / kTile), unsigned((a.rows + kTile - 1) / kTile));
    k_gemm_s8<<<grid, dim3(kTile, kTile), 0, s>>>(a, w, zero, c, c_ld, y, y_ld, scale, beta);
}
void dequantize_nf4(cudaStream_t s, Mat out, Nf4 w, int64_t row0) {
    if (out.rows * out.cols == 0) return;
    k_dequantize_nf4<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, w, row0);
}
void dropout(cudaStream_t s, Mat y, CMat x, Dropout d, bool accumulate) {
    if (x.rows * x.cols == 0) return;
    k_dropout<<<grid_for(x.rows * x.cols), kThreads, 0, s>>>(y, x, d, accumulate);
}

}  // namespace ete::cuda
