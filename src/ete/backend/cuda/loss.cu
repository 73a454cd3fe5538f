// ete/backend/cuda/loss.cu — softmax cross-entropy, one block per row: the row's max and
// Σ e^(z − max) by fixed-order block reductions, then the loss and (fused) the gradient.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

constexpr int32_t kIgnore = -100;  // backend.h kIgnoreIndex

struct RowStats {
    float mx, sum;
};

__device__ RowStats row_stats(const float* z, int64_t V) {
    float mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
    mx = block_max(mx);
    float sum = 0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
    return {mx, block_sum(sum)};
}

__global__ void k_ce_forward(float* losses, CMat logits, const int32_t* targets) {
    const int64_t r = blockIdx.x;
    const float* z = static_cast<const float*>(logits.p) + r * logits.ld;
    const int32_t t = targets[r];
    if (t == kIgnore) {
        if (threadIdx.x == 0) losses[r] = 0.0f;
        return;
    }
    const RowStats st = row_stats(z, logits.cols);
    if (threadIdx.x == 0) losses[r] = st.mx + logf(st.sum) - z[t];
}

__global__ void k_ce_forward_backward(Mat logits, float* losses, const int32_t* targets,
                                      float d_scale, Mat d) {
    const int64_t r = blockIdx.x, V = logits.cols;
    const float* z = static_cast<const float*>(logits.p) + r * logits.ld;
    const int32_t t = targets[r];
    if (t == kIgnore) {
        if (threadIdx.x == 0) losses[r] = 0.0f;
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) store(d.p, d.t, r * d.ld + v, 0.0f);
        return;
    }
    const RowStats st = row_stats(z, V);
    const float zt = z[t];
    __syncthreads();  // z[t] is read before any thread overwrites it (d may alias logits)
    if (threadIdx.x == 0) losses[r] = st.mx + logf(st.sum) - zt;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float p = expf(z[v] - st.mx) / st.sum;
        store(d.p, d.t, r * d.ld + v, d_scale * (p - (v == t ? 1.0f : 0.0f)));
    }
}

__global__ void k_ce_stats(float* lse, float* target_logit, CMat logits, const int32_t* targets) {
    const int64_t r = blockIdx.x, V = logits.cols;
    const float* z = static_cast<const float*>(logits.p) + r * logits.ld;
    const RowStats st = row_stats(z, V);
    if (threadIdx.x != 0) return;
    lse[r] = V > 0 ? st.mx + logf(st.sum) : -INFINITY;
    const int32_t t = targets[r];
    target_logit[r] = t >= 0 && t < V ? z[t] : 0.0f;
}

__global__ void k_ce_backward(Mat d, CMat logits, const float* lse, const int32_t* targets,
                              float d_scale) {
    ETE_GRID_STRIDE(i, d.rows * d.cols) {
        const int64_t r = i / d.cols, v = i % d.cols;
        const int32_t t = targets[r];
        const float z = static_cast<const float*>(logits.p)[r * logits.ld + v];
        const float g = t == kIgnore ? 0.0f : d_scale * (expf(z - lse[r]) - (v == t ? 1.0f : 0.0f));
        store(d.p, d.t, r * d.ld + v, g);
    }
}

}  // namespace

void cross_entropy_forward_backward(cudaStream_t s, Mat logits, float* losses,
                                    const int32_t* targets, float d_scale, Mat d_logits) {
    if (logits.rows == 0) return;
    k_ce_forward_backward<<<unsigned(logits.rows), kThreads, 0, s>>>(logits, losses, targets,
                                                                     d_scale, d_logits);
}
void cross_entropy_forward(cudaStream_t s, float* losses, CMat logits, const int32_t* targets) {
    if (logits.rows == 0) return;
    k_ce_forward<<<unsigned(logits.rows), kThreads, 0, s>>>(losses, logits, targets);
}
void cross_entropy_stats(cudaStream_t s, float* lse, float* target_logit, CMat logits,
                         const int32_t* targets) {
    if (logits.rows == 0) return;
    k_ce_stats<<<unsigned(logits.rows), kThreads, 0, s>>>(lse, target_logit, logits, targets);
}
void cross_entropy_backward(cudaStream_t s, Mat d_logits, CMat logits, const float* lse,
                            const int32_t* targets, float d_scale) {
    if (d_logits.rows * d_logits.cols == 0) return;
    k_ce_backward<<<grid_for(d_logits.rows * d_logits.cols), kThreads, 0, s>>>(
        d_logits, logits, lse, targets, d_scale);
}

}  // namespace ete::cuda
