// ete/backend/cpu/norm.cpp — RMSNorm and LayerNorm forward/backward on the CPU.
//
// Rows are independent: OpenMP static parallel-for over rows, `#pragma omp simd` over C. Row
// statistics accumulate in double (as ete::ref; free here, these kernels are memory-bound).
//
// The weight/bias gradients are column sums over all rows. To keep them deterministic AND
// independent of the thread count, rows are cut into fixed blocks of kRowBlock: each block writes
// its own partial sums (nblk, C), then the partials are added in block order, in double. The
// backward ACCUMULATES into d_x, d_w and d_b (backend.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ete/backend/cpu/cpu_kernels.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster
constexpr int kRowBlock = 32;              // rows per partial-sum block (fixed: determinism)
constexpr int kColBlock = 64;

int row_blocks(int N) {
    return (N + kRowBlock - 1) / kRowBlock;
}

// dst(C) += sum over blocks of part(nblk, C), added in block order in double. Cache-resident and
// small next to the row pass: only worth a parallel region when very large.
void add_partials(float* dst, const std::vector<float>& part, int nblk, int C) {
    int ncol = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (int64_t(nblk) * C >= 16 * kParallelMin)
    for (int cb = 0; cb < ncol; ++cb) {
        int c0 = cb * kColBlock, len = std::min(kColBlock, C - c0);
        double acc[kColBlock] = {};
        for (int blk = 0; blk < nblk; ++blk) {
            const float* p = part.data() + int64_t(blk) * C + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) acc[j] += p[j];
        }
        for (int j = 0; j < len; ++j) dst[c0 + j] += float(acc[j]);
    }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                     float eps) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        const float* xr = x + int64_t(n) * C;  // (C)
        float* o = out + int64_t(n) * C;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; ++c) ss += double(xr[c]) * xr[c];
        float r = float(1.0 / std::sqrt(ss / C + eps));
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = xr[c] * r * w[c];
    }
}

void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x, const float* w,
                      const float* rstd, int N, int C) {
    // d_x += r * (dy * w - xhat * mean(dy * w * xhat)),  d_w += sum over rows of dy * xhat.
    int nblk = row_blocks(N);
    std::vector<float> part_w(size_t(nblk) * C, 0.0f);  // (nblk, C)
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int blk = 0; blk < nblk; ++blk) {
        float* pw = part_w.data() + int64_t(blk) * C;
        for (int n = blk * kRowBlock; n < std::min(N, (blk + 1) * kRowBlock); ++n) {
            const float* xr = x + int64_t(n) * C;
            const float* dy = d_out + int64_t(n) * C;
            float* dx = d_x + int64_t(n) * C;
            float r = rstd[n];
            double dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; ++c) dot += double(dy[c]) * w[c] * xr[c];
            float k = float(dot * r / C);
#pragma omp simd
            for (int c = 0; c < C; ++c) {
                float xhat = xr[c] * r;
                pw[c] += dy[c] * xhat;
                dx[c] += r * (dy[c] * w[c] - xhat * k);
            }
        }
    }
    add_partials(d_w, part_w, nblk, C);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        const float* xr = x + int64_t(n) * C;  // (C)
        float* o = out + int64_t(n) * C;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; ++c) sum += xr[c];
        double mu_d = sum / C, var = 0;  // two-pass variance: no E[x^2] - E[x]^2 cancellation
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; ++c) var += (xr[c] - mu_d) * (xr[c] - mu_d);
        float mu = float(mu_d), r = float(1.0 / std::sqrt(var / C + eps));
        mean[n] = mu;
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = (xr[c] - mu) * r * w[c] + b[c];
    }
}

void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
    // g = dy * w:  d_x += r * (g - mean(g) - xhat * mean(g * xhat)),  d_w += dy * xhat,  d_b += dy.
    int nblk = row_blocks(N);
    std::vector<float> part_w(size_t(nblk) * C, 0.0f), part_b(size_t(nblk) * C, 0.0f);
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int blk = 0; blk < nblk; ++blk) {
        float* pw = part_w.data() + int64_t(blk) * C;
        float* pb = part_b.data() + int64_t(blk) * C;
        for (int n = blk * kRowBlock; n < std::min(N, (blk + 1) * kRowBlock); ++n) {
            const float* xr = x + int64_t(n) * C;
            const float* dy = d_out + int64_t(n) * C;
            float* dx = d_x + int64_t(n) * C;
            float mu = mean[n], r = rstd[n];
            double sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
            for (int c = 0; c < C; ++c) {
                float g = dy[c] * w[c];
                sum_g += g;
                sum_gx += double(g) * ((xr[c] - mu) * r);
            }
            float mg = float(sum_g / C), mgx = float(sum_gx / C);
#pragma omp simd
            for (int c = 0; c < C; ++c) {
                float xhat = (xr[c] - mu) * r;
                pw[c] += dy[c] * xhat;
                pb[c] += dy[c];
                dx[c] += r * (dy[c] * w[c] - mg - xhat * mgx);
            }
        }
    }
    add_partials(d_w, part_w, nblk, C);
    add_partials(d_b, part_b, nblk, C);
}

}  // namespace ete::cpu
