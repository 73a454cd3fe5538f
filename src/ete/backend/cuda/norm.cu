// ete/backend/cuda/norm.cu — RMSNorm and LayerNorm: one block per row (statistics in fp32 by a
// fixed-order block reduction); weight gradients as fixed-order column sums, no atomics.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

__global__ void k_rmsnorm_forward(Mat out, float* rstd, CMat x, CMat w, float eps) {
    const int64_t r = blockIdx.x, C = x.cols;
    float ss = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float v = load(x.p, x.t, r * x.ld + c);
        ss += v * v;
    }
    ss = block_sum(ss);
    const float rs = 1.0f / sqrtf(ss / float(C) + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        store(out.p, out.t, r * out.ld + c, load(x.p, x.t, r * x.ld + c) * rs * load(w.p, w.t, c));
}

__global__ void k_rmsnorm_backward_x(Mat d_x, CMat d_out, CMat x, CMat w, const float* rstd) {
    const int64_t r = blockIdx.x, C = x.cols;
    const float rs = rstd[r];
    float dot = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        dot += load(d_out.p, d_out.t, r * d_out.ld + c) * load(w.p, w.t, c) *
               load(x.p, x.t, r * x.ld + c) * rs;
    dot = block_sum(dot) / float(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = load(x.p, x.t, r * x.ld + c) * rs;
        const float dy = load(d_out.p, d_out.t, r * d_out.ld + c);
        const int64_t o = r * d_x.ld + c;
        store(d_x.p, d_x.t, o, load(d_x.p, d_x.t, o) + rs * (dy * load(w.p, w.t, c) - xhat * dot));
    }
}

// work[k · C + c] = Σ_{r ≡ k (mod chunks)} d_out[r, c] · (x[r, c] − mean[r]) · rstd[r] (mean null:
// 0); with db, also the plain sums of d_out into work_b.
__global__ void k_norm_weight_parts(CMat d_out, CMat x, const float* mean, const float* rstd,
                                    float* work, float* work_b, int chunks) {
    ETE_GRID_STRIDE(i, int64_t(chunks) * x.cols) {
        const int64_t c = i % x.cols, k = i / x.cols;
        float acc = 0, acc_b = 0;
        for (int64_t r = k; r < x.rows; r += chunks) {
            const float dy = load(d_out.p, d_out.t, r * d_out.ld + c);
            const float xc = load(x.p, x.t, r * x.ld + c) - (mean ? mean[r] : 0.0f);
            acc += dy * (xc * rstd[r]);
            acc_b += dy;
        }
        if (work) work[i] = acc;
        if (work_b) work_b[i] = acc_b;
    }
}

__global__ void k_layernorm_forward(Mat out, float* mean, float* rstd, CMat x, CMat w, CMat b,
                                    float eps) {
    const int64_t r = blockIdx.x, C = x.cols;
    float sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += load(x.p, x.t, r * x.ld + c);
    const float mu = block_sum(sum) / float(C);
    float var = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = load(x.p, x.t, r * x.ld + c) - mu;
        var += d * d;
    }
    const float rs = 1.0f / sqrtf(block_sum(var) / float(C) + eps);
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        store(out.p, out.t, r * out.ld + c,
              (load(x.p, x.t, r * x.ld + c) - mu) * rs * load(w.p, w.t, c) + load(b.p, b.t, c));
}

__global__ void k_layernorm_backward_x(Mat d_x, CMat d_out, CMat x, CMat w, const float* mean,
                                       const float* rstd) {
    const int64_t r = blockIdx.x, C = x.cols;
    const float mu = mean[r], rs = rstd[r];
    float sg = 0, sgx = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = load(d_out.p, d_out.t, r * d_out.ld + c) * load(w.p, w.t, c);
        sg += g;
        sgx += g * (load(x.p, x.t, r * x.ld + c) - mu) * rs;
    }
    sg = block_sum(sg) / float(C);
    sgx = block_sum(sgx) / float(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const float xhat = (load(x.p, x.t, r * x.ld + c) - mu) * rs;
        const float dy = load(d_out.p, d_out.t, r * d_out.ld + c);
        const int64_t o = r * d_x.ld + c;
        store(d_x.p, d_x.t, o,
              load(d_x.p, d_x.t, o) + rs * (dy * load(w.p, w.t, c) - sg - xhat * sgx));
    }
}

}  // namespace

void rmsnorm_forward(cudaStream_t s, Mat out, float* rstd, CMat x, CMat w, float eps) {
    if (x.rows == 0) return;
    k_rmsnorm_forward<<<unsigned(x.rows), kThreads, 0, s>>>(out, rstd, x, w, eps);
}

void rmsnorm_backward(cudaStream_t s, Mat d_x, Mat d_w, CMat d_out, CMat x, CMat w,
                      const float* rstd, float* work) {
    if (x.rows == 0) return;
    k_rmsnorm_backward_x<<<unsigned(x.rows), kThreads, 0, s>>>(d_x, d_out, x, w, rstd);
    if (!d_w.p) return;
    const int chunks = column_chunks(x.rows);
    k_norm_weight_parts<<<grid_for(int64_t(chunks) * x.cols), kThreads, 0, s>>>(
        d_out, x, nullptr, rstd, work, nullptr, chunks);
    finish_column_sums(s, static_cast<float*>(d_w.p), work, chunks, x.cols);
}

void layernorm_forward(cudaStream_t s, Mat out, float* mean, float* rstd, CMat x, CMat w, CMat b,
                       float eps) {
    if (x.rows == 0) return;
    k_layernorm_forward<<<unsigned(x.rows), kThreads, 0, s>>>(out, mean, rstd, x, w, b, eps);
}

void layernorm_backward(cudaStream_t s, Mat d_x, Mat d_w, Mat d_b, CMat d_out, CMat x, CMat w,
                        const float* mean, const float* rstd, float* work) {
    if (x.rows == 0) return;
    k_layernorm_backward_x<<<unsigned(x.rows), kThreads, 0, s>>>(d_x, d_out, x, w, mean, rstd);
    if (!d_w.p && !d_b.p) return;
    const int chunks = column_chunks(x.rows);
    float* work_b = work + column_sum_work(x.rows, x.cols);
    k_norm_weight_parts<<<grid_for(int64_t(chunks) * x.cols), kThreads, 0, s>>>(
        d_out, x, mean, rstd, d_w.p ? work : nullptr, d_b.p ? work_b : nullptr, chunks);
    if (d_w.p) finish_column_sums(s, static_cast<float*>(d_w.p), work, chunks, x.cols);
    if (d_b.p) finish_column_sums(s, static_cast<float*>(d_b.p), work_b, chunks, x.cols);
}

}  // namespace ete::cuda
