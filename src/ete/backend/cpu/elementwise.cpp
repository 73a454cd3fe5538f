// ete/backend/cpu/elementwise.cpp — bias, embeddings, SwiGLU, GELU and residual add on the CPU.
//
// Row ops run an OpenMP static parallel-for over rows with a `#pragma omp simd` inner loop. Column
// reductions (bias and position-embedding backward) and the embedding scatter split the COLUMNS
// between threads instead: each output element is then summed by one thread in row order, so the
// result is the same for any thread count and bit-identical to ete::ref (same double accumulator,
// same order). Small problems stay on the calling thread (the `if` clauses) since a parallel
// region costs a few microseconds.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ete/backend/cpu/cpu_kernels.h"
#include "ete/backend/cpu/simd_math.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a parallel region costs more
constexpr int kColBlock = 64;              // columns per task in column-split reductions

int64_t col_blocks(int C) {
    return (int64_t(C) + kColBlock - 1) / kColBlock;
}

// acc(len) = sum over n < rows of src[n * ld + 0..len), in double, rows in order.
inline void sum_rows(double* acc, const float* src, int rows, int64_t ld, int len) {
    for (int j = 0; j < len; ++j) acc[j] = 0.0;
    for (int n = 0; n < rows; ++n) {
        const float* s = src + n * ld;
#pragma omp simd
        for (int j = 0; j < len; ++j) acc[j] += s[j];
    }
}

}  // namespace

void bias_forward(float* y, const float* b, int N, int C, int ldy) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        float* yr = y + int64_t(n) * ldy;
#pragma omp simd
        for (int c = 0; c < C; ++c) yr[c] += b[c];
    }
}

void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) {
    // Column blocks: d_b[c] += (double sum over n of d_y[n, c]), as ete::ref.
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int64_t blk = 0; blk < col_blocks(C); ++blk) {
        int c0 = int(blk * kColBlock), len = std::min(kColBlock, C - c0);
        double acc[kColBlock];
        sum_rows(acc, d_y + c0, N, ldy, len);
        for (int j = 0; j < len; ++j) d_b[c0 + j] += float(acc[j]);
    }
}

void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C) {
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int n = 0; n < N; ++n)
        std::memcpy(out + int64_t(n) * C, table + int64_t(ids[n]) * C, sizeof(float) * size_t(C));
}

void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N, int C) {
    // Repeated ids make a row-split racy; a column split is race-free and keeps ref's order.
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
    for (int64_t blk = 0; blk < col_blocks(C); ++blk) {
        int c0 = int(blk * kColBlock), len = std::min(kColBlock, C - c0);
        for (int n = 0; n < N; ++n) {
            float* dst = d_table + int64_t(ids[n]) * C + c0;
            const float* src = d_out + int64_t(n) * C + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) dst[j] += src[j];
        }
    }
}

void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start, int B, int T,
                           int C) {
    check_doc_start(doc_start, B, T);
    int64_t rows = int64_t(B) * T;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        float* o = out + r * C;
        const int64_t t = r % T, p = doc_start ? t - doc_start[r] : t;
        const float* w = wpe + p * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] += w[c];
    }
}

namespace {

// Packed rows: position p = t - doc_start is used by any subset of the rows. A counting sort lists
// the rows of each position in increasing row order; each (p, column block) task then sums its
// list in that order in double, as ete::ref does (bit-identical, thread-count independent).
void pos_embedding_backward_packed(float* d_wpe, const float* d_out, const int32_t* doc_start,
                                   int B, int T, int C) {
    const int64_t rows = int64_t(B) * T;
    std::vector<int64_t> first(size_t(T) + 1, 0), order(static_cast<size_t>(rows));  // by position
    for (int64_t r = 0; r < rows; ++r) ++first[size_t(r % T - doc_start[r]) + 1];
    for (int p = 0; p < T; ++p) first[size_t(p) + 1] += first[size_t(p)];
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t r = 0; r < rows; ++r) order[size_t(fill[size_t(r % T - doc_start[r])]++)] = r;

    const int64_t nblk = col_blocks(C), tasks = int64_t(T) * nblk;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t task = 0; task < tasks; ++task) {
        const int64_t p = task / nblk;
        const int c0 = int(task % nblk) * kColBlock, len = std::min(kColBlock, C - c0);
        double acc[kColBlock] = {};
        for (int64_t k = first[size_t(p)]; k < first[size_t(p) + 1]; ++k) {
            const float* s = d_out + order[size_t(k)] * C + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) acc[j] += s[j];
        }
        float* dst = d_wpe + p * C + c0;
        for (int j = 0; j < len; ++j) dst[j] += float(acc[j]);
    }
}

}  // namespace

void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start, int B,
                            int T, int C) {
    if (doc_start) {
        check_doc_start(doc_start, B, T);
        pos_embedding_backward_packed(d_wpe, d_out, doc_start, B, T, C);
        return;
    }
    // Each (t, column block) is owned by one task: d_wpe[t] += double sum over b, b in order.
    int64_t nblk = col_blocks(C), tasks = int64_t(T) * nblk;
#pragma omp parallel for schedule(static) if (int64_t(B) * T * C >= kParallelMin)
    for (int64_t task = 0; task < tasks; ++task) {
        int64_t t = task / nblk;
        int c0 = int(task % nblk) * kColBlock, len = std::min(kColBlock, C - c0);
        double acc[kColBlock];
        sum_rows(acc, d_out + t * C + c0, B, int64_t(T) * C, len);
        float* dst = d_wpe + t * C + c0;
        for (int j = 0; j < len; ++j) dst[j] += float(acc[j]);
    }
}

void swiglu_forward(float* out, const float* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        const float* g = gu + int64_t(n) * 2 * F;  // (F) gate, then (F) up
        const float* u = g + F;
        float* o = out + int64_t(n) * F;
#pragma omp simd
        for (int f = 0; f < F; ++f) o[f] = g[f] * sigmoid_fast(g[f]) * u[f];
    }
}

void swiglu_backward(float* d_gu, const float* d_out, const float* gu, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        const float* g = gu + int64_t(n) * 2 * F;
        const float* u = g + F;
        const float* dy = d_out + int64_t(n) * F;
        float* d_g = d_gu + int64_t(n) * 2 * F;
        float* d_u = d_g + F;
#pragma omp simd
        for (int f = 0; f < F; ++f) {
            // silu'(g) = s * (1 + g * (1 - s)); 1 - s = e * s avoids cancellation for s near 1.
            float e = exp_fast(-g[f]);
            float s = 1.0f / (1.0f + e);
            d_g[f] = dy[f] * u[f] * s * (1.0f + g[f] * (e * s));
            d_u[f] = dy[f] * g[f] * s;
        }
    }
}

// gelu(x) = 0.5 x (1 + tanh(y)), y = k (x + 0.044715 x^3). With 0.5 (1 + tanh y) = sigmoid(2y)
// this is x * sigmoid(2y), which keeps full relative accuracy where 1 + tanh(y) would cancel.
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

void gelu_forward(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(simd : static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i];
        float y2 = 2.0f * kGeluK * (v + kGeluC * v * v * v);
        out[i] = v * sigmoid_fast(y2);
    }
}

void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) {
    // d/dx [x s(2y)] = s + x s (1 - s) d(2y)/dx, with 1 - s = e s (no cancellation).
#pragma omp parallel for simd schedule(simd : static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i];
        float y2 = 2.0f * kGeluK * (v + kGeluC * v * v * v);
        float e = exp_fast(-y2);
        float s = 1.0f / (1.0f + e);
        float dy2 = 2.0f * kGeluK * (1.0f + 3.0f * kGeluC * v * v);  // d(2y)/dx
        d_x[i] = d_out[i] * (s + v * (e * s) * s * dy2);
    }
}

void add_inplace(float* x, const float* y, int64_t n) {
#pragma omp parallel for simd schedule(simd : static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace ete::cpu
