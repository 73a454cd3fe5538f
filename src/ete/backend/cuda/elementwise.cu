// ete/backend/cuda/elementwise.cu — copies, fills, sums, bias, activations and embeddings.
#include "ete/backend/cuda/common.cuh"

namespace ete::cuda {
namespace {

__global__ void k_convert(Mat d, CMat s) {
    ETE_GRID_STRIDE(i, d.rows * d.cols) {
        store(d.p, d.t, at(i, d.cols, d.ld), load(s.p, s.t, at(i, s.cols, s.ld)));
    }
}

__global__ void k_fill(Mat d, float v) {
    ETE_GRID_STRIDE(i, d.rows * d.cols) {
        store(d.p, d.t, at(i, d.cols, d.ld), v);
    }
}

__global__ void k_add(Mat x, CMat y) {
    ETE_GRID_STRIDE(i, x.rows * x.cols) {
        const int64_t ix = at(i, x.cols, x.ld);
        store(x.p, x.t, ix, load(x.p, x.t, ix) + load(y.p, y.t, at(i, y.cols, y.ld)));
    }
}

__global__ void k_scale(Mat x, float a) {
    ETE_GRID_STRIDE(i, x.rows * x.cols) {
        const int64_t ix = at(i, x.cols, x.ld);
        store(x.p, x.t, ix, load(x.p, x.t, ix) * a);
    }
}

constexpr int kSumBlocks = 256;  // fixed: the partial sums, and so the result, never depend on n

__global__ void k_sum_squares_part(CMat x, double* work) {
    double acc = 0;
    const int64_t n = x.rows * x.cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const double v = load(x.p, x.t, at(i, x.cols, x.ld));
        acc += v * v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) work[blockIdx.x] = acc;
}

__global__ void k_sum_parts(const double* work, int n, double* out) {
    double acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += work[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) *out = acc;
}

__global__ void k_bias_forward(Mat y, CMat b) {
    ETE_GRID_STRIDE(i, y.rows * y.cols) {
        const int64_t iy = at(i, y.cols, y.ld);
        store(y.p, y.t, iy, load(y.p, y.t, iy) + load(b.p, b.t, i % y.cols));
    }
}

__global__ void k_column_parts(CMat d_y, float* work, int chunks) {
    ETE_GRID_STRIDE(i, int64_t(chunks) * d_y.cols) {
        const int64_t c = i % d_y.cols, k = i / d_y.cols;
        float acc = 0;
        for (int64_t r = k; r < d_y.rows; r += chunks) acc += load(d_y.p, d_y.t, r * d_y.ld + c);
        work[i] = acc;
    }
}

__global__ void k_finish_columns(float* out, const float* work, int chunks, int64_t cols) {
    ETE_GRID_STRIDE(c, cols) {
        float acc = 0;
        for (int k = 0; k < chunks; ++k) acc += work[k * cols + c];
        out[c] += acc;
    }
}

__device__ __forceinline__ float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__global__ void k_swiglu_forward(Mat out, CMat gu) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const int64_t r = i / out.cols, f = i % out.cols;
        const float g = load(gu.p, gu.t, r * gu.ld + f),
                    u = load(gu.p, gu.t, r * gu.ld + out.cols + f);
        store(out.p, out.t, r * out.ld + f, g * sigmoid(g) * u);
    }
}

__global__ void k_swiglu_backward(Mat d_gu, CMat d_out, CMat gu) {
    ETE_GRID_STRIDE(i, d_out.rows * d_out.cols) {
        const int64_t r = i / d_out.cols, f = i % d_out.cols, F = d_out.cols;
        const float g = load(gu.p, gu.t, r * gu.ld + f), u = load(gu.p, gu.t, r * gu.ld + F + f);
        const float dy = load(d_out.p, d_out.t, r * d_out.ld + f), sg = sigmoid(g);
        store(d_gu.p, d_gu.t, r * d_gu.ld + f, dy * u * sg * (1.0f + g * (1.0f - sg)));
        store(d_gu.p, d_gu.t, r * d_gu.ld + F + f, dy * g * sg);
    }
}

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void k_gelu_forward(Mat out, CMat x) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const float v = load(x.p, x.t, at(i, x.cols, x.ld));
        store(out.p, out.t, at(i, out.cols, out.ld),
              0.5f * v * (1.0f + tanhf(kGeluK * (v + 0.044715f * v * v * v))));
    }
}

__global__ void k_gelu_backward(Mat d_x, CMat d_out, CMat x) {
    ETE_GRID_STRIDE(i, d_x.rows * d_x.cols) {
        const float v = load(x.p, x.t, at(i, x.cols, x.ld));
        const float t = tanhf(kGeluK * (v + 0.044715f * v * v * v));
        const float dt = (1.0f - t * t) * kGeluK * (1.0f + 3.0f * 0.044715f * v * v);
        const float dy = load(d_out.p, d_out.t, at(i, d_out.cols, d_out.ld));
        store(d_x.p, d_x.t, at(i, d_x.cols, d_x.ld), dy * (0.5f * (1.0f + t) + 0.5f * v * dt));
    }
}

__device__ __forceinline__ float gelu_tanh(float v) {
    return 0.5f * v * (1.0f + tanhf(kGeluK * (v + 0.044715f * v * v * v)));
}

__global__ void k_geglu_forward(Mat out, CMat gu) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const int64_t r = i / out.cols, f = i % out.cols;
        const float g = load(gu.p, gu.t, r * gu.ld + f),
                    u = load(gu.p, gu.t, r * gu.ld + out.cols + f);
        store(out.p, out.t, r * out.ld + f, gelu_tanh(g) * u);
    }
}

__global__ void k_geglu_backward(Mat d_gu, CMat d_out, CMat gu) {
    ETE_GRID_STRIDE(i, d_out.rows * d_out.cols) {
        const int64_t r = i / d_out.cols, f = i % d_out.cols, F = d_out.cols;
        const float g = load(gu.p, gu.t, r * gu.ld + f), u = load(gu.p, gu.t, r * gu.ld + F + f);
        const float dy = load(d_out.p, d_out.t, r * d_out.ld + f);
        const float t = tanhf(kGeluK * (g + 0.044715f * g * g * g));
        const float dt = (1.0f - t * t) * kGeluK * (1.0f + 3.0f * 0.044715f * g * g);
        store(d_gu.p, d_gu.t, r * d_gu.ld + f, dy * u * (0.5f * (1.0f + t) + 0.5f * g * dt));
        store(d_gu.p, d_gu.t, r * d_gu.ld + F + f, dy * 0.5f * g * (1.0f + t));
    }
}

__global__ void k_softcap_forward(Mat x, Mat d_cap, float cap) {
    ETE_GRID_STRIDE(i, x.rows * x.cols) {
        const float t = tanhf(load(x.p, x.t, at(i, x.cols, x.ld)) / cap);
        store(x.p, x.t, at(i, x.cols, x.ld), cap * t);
        if (d_cap.p) store(d_cap.p, d_cap.t, at(i, d_cap.cols, d_cap.ld), 1.0f - t * t);
    }
}

__global__ void k_softcap_backward(Mat d_x, CMat d_cap) {
    ETE_GRID_STRIDE(i, d_x.rows * d_x.cols) {
        const int64_t k = at(i, d_x.cols, d_x.ld);
        store(d_x.p, d_x.t, k,
              load(d_x.p, d_x.t, k) * load(d_cap.p, d_cap.t, at(i, d_cap.cols, d_cap.ld)));
    }
}

__global__ void k_embedding_forward(Mat out, const int32_t* ids, CMat table, int64_t first_id) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const int64_t r = i / out.cols, c = i % out.cols, id = int64_t(ids[r]) - first_id;
        const float v =
            id >= 0 && id < table.rows ? load(table.p, table.t, id * table.ld + c) : 0.0f;
        store(out.p, out.t, r * out.ld + c, v);
    }
}

// One thread per column walks the tokens in order: deterministic, no atomics.
__global__ void k_embedding_backward(Mat d_table, CMat d_out, const int32_t* ids,
                                     int64_t first_id) {
    ETE_GRID_STRIDE(c, d_out.cols) {
        for (int64_t r = 0; r < d_out.rows; ++r) {
            const int64_t id = int64_t(ids[r]) - first_id;
            if (id < 0 || id >= d_table.rows) continue;
            const int64_t o = id * d_table.ld + c;
            store(d_table.p, d_table.t, o,
                  load(d_table.p, d_table.t, o) + load(d_out.p, d_out.t, r * d_out.ld + c));
        }
    }
}

__device__ __forceinline__ int64_t position(const int32_t* doc_start, int64_t row, int T) {
    const int64_t t = row % T;
    return doc_start ? t - doc_start[row] : t;
}

__global__ void k_pos_forward(Mat out, CMat wpe, const int32_t* doc_start, int T) {
    ETE_GRID_STRIDE(i, out.rows * out.cols) {
        const int64_t r = i / out.cols, c = i % out.cols, p = position(doc_start, r, T);
        const int64_t o = r * out.ld + c;
        store(out.p, out.t, o, load(out.p, out.t, o) + load(wpe.p, wpe.t, p * wpe.ld + c));
    }
}

__global__ void k_pos_backward(Mat d_wpe, CMat d_out, const int32_t* doc_start, int T) {
    ETE_GRID_STRIDE(c, d_out.cols) {
        for (int64_t r = 0; r < d_out.rows; ++r) {
            const int64_t o = position(doc_start, r, T) * d_wpe.ld + c;
            store(d_wpe.p, d_wpe.t, o,
                  load(d_wpe.p, d_wpe.t, o) + load(d_out.p, d_out.t, r * d_out.ld + c));
        }
    }
}

}  // namespace

void convert(cudaStream_t s, Mat dst, CMat src) {
    k_convert<<<grid_for(dst.rows * dst.cols), kThreads, 0, s>>>(dst, src);
}
void fill(cudaStream_t s, Mat dst, float v) {
    k_fill<<<grid_for(dst.rows * dst.cols), kThreads, 0, s>>>(dst, v);
}
void add(cudaStream_t s, Mat x, CMat y) {
    k_add<<<grid_for(x.rows * x.cols), kThreads, 0, s>>>(x, y);
}
void scale(cudaStream_t s, Mat x, float a) {
    k_scale<<<grid_for(x.rows * x.cols), kThreads, 0, s>>>(x, a);
}
int64_t sum_squares_work(CMat) {
    return kSumBlocks;
}
void sum_squares(cudaStream_t s, CMat x, double* out, double* work, int64_t) {
    k_sum_squares_part<<<kSumBlocks, kThreads, 0, s>>>(x, work);
    k_sum_parts<<<1, kThreads, 0, s>>>(work, kSumBlocks, out);
}
void bias_forward(cudaStream_t s, Mat y, CMat b) {
    k_bias_forward<<<grid_for(y.rows * y.cols), kThreads, 0, s>>>(y, b);
}
int64_t column_sum_work(int64_t rows, int64_t cols) {
    return int64_t(column_chunks(rows)) * cols;
}
void finish_column_sums(cudaStream_t s, float* out, const float* work, int chunks, int64_t cols) {
    k_finish_columns<<<grid_for(cols), kThreads, 0, s>>>(out, work, chunks, cols);
}
void bias_backward(cudaStream_t s, Mat d_b, CMat d_y, float* work) {
    const int chunks = column_chunks(d_y.rows);
    k_column_parts<<<grid_for(int64_t(chunks) * d_y.cols), kThreads, 0, s>>>(d_y, work, chunks);
    finish_column_sums(s, static_cast<float*>(d_b.p), work, chunks, d_y.cols);
}
void swiglu_forward(cudaStream_t s, Mat out, CMat gate_up) {
    k_swiglu_forward<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, gate_up);
}
void swiglu_backward(cudaStream_t s, Mat d_gate_up, CMat d_out, CMat gate_up) {
    k_swiglu_backward<<<grid_for(d_out.rows * d_out.cols), kThreads, 0, s>>>(d_gate_up, d_out,
                                                                             gate_up);
}
void geglu_forward(cudaStream_t s, Mat out, CMat gate_up) {
    k_geglu_forward<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, gate_up);
}
void geglu_backward(cudaStream_t s, Mat d_gate_up, CMat d_out, CMat gate_up) {
    k_geglu_backward<<<grid_for(d_out.rows * d_out.cols), kThreads, 0, s>>>(d_gate_up, d_out,
                                                                            gate_up);
}
void softcap_forward(cudaStream_t s, Mat x, Mat d_cap, float cap) {
    k_softcap_forward<<<grid_for(x.rows * x.cols), kThreads, 0, s>>>(x, d_cap, cap);
}
void softcap_backward(cudaStream_t s, Mat d_x, CMat d_cap) {
    k_softcap_backward<<<grid_for(d_x.rows * d_x.cols), kThreads, 0, s>>>(d_x, d_cap);
}
void gelu_forward(cudaStream_t s, Mat out, CMat x) {
    k_gelu_forward<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, x);
}
void gelu_backward(cudaStream_t s, Mat d_x, CMat d_out, CMat x) {
    k_gelu_backward<<<grid_for(d_x.rows * d_x.cols), kThreads, 0, s>>>(d_x, d_out, x);
}
void embedding_forward(cudaStream_t s, Mat out, const int32_t* ids, CMat table, int64_t first_id) {
    k_embedding_forward<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, ids, table,
                                                                           first_id);
}
void embedding_backward(cudaStream_t s, Mat d_table, CMat d_out, const int32_t* ids,
                        int64_t first_id) {
    k_embedding_backward<<<grid_for(d_out.cols, 128), 128, 0, s>>>(d_table, d_out, ids, first_id);
}
void pos_embedding_forward(cudaStream_t s, Mat out, CMat wpe, const int32_t* doc_start, int,
                           int T) {
    k_pos_forward<<<grid_for(out.rows * out.cols), kThreads, 0, s>>>(out, wpe, doc_start, T);
}
void pos_embedding_backward(cudaStream_t s, Mat d_wpe, CMat d_out, const int32_t* doc_start, int,
                            int T) {
    k_pos_backward<<<grid_for(d_out.cols, 128), 128, 0, s>>>(d_wpe, d_out, doc_start, T);
}

}  // namespace ete::cuda
