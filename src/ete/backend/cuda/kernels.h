// ete/backend/cuda/kernels.h — the CUDA kernels' launchers, the one header nvcc and the host code
// share. Plain structs only (no engine headers, so nvcc never parses fmt or the views): the host
// side (cuda_backend.cpp) checks the views, converts them to these and launches on its stream.
// Every launcher only enqueues work; nothing here synchronizes. Conventions are backend.h's: row
// major, parameter gradients accumulate, activation gradients are written, fp32 arithmetic with
// one rounding into a 16-bit output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ete::cuda {

// A float operand's storage type.
enum class Ft : uint8_t { F32, BF16, F16 };

// A (rows, cols) matrix with rows ld elements apart, of float type t; a vector is one row.
struct Mat {
    void* p;
    Ft t;
    int64_t rows, cols, ld;
};
struct CMat {
    const void* p;
    Ft t;
    int64_t rows, cols, ld;
};

// --- elementwise (elementwise.cu) ---
void convert(cudaStream_t s, Mat dst, CMat src);  // dst = src, rounded once
void fill(cudaStream_t s, Mat dst, float v);
void add(cudaStream_t s, Mat x, CMat y);     // x += y
void scale(cudaStream_t s, Mat x, float a);  // x *= a
// *out (device, one double) = Σ x² over the matrix, summed in double in a fixed order.
void sum_squares(cudaStream_t s, CMat x, double* out, double* work, int64_t work_n);
int64_t sum_squares_work(CMat x);                  // doubles of workspace sum_squares needs
void bias_forward(cudaStream_t s, Mat y, CMat b);  // y[r, :] += b
// d_b (F32) += column sums of d_y, in a fixed order (work: F32, column_sum_work floats).
void bias_backward(cudaStream_t s, Mat d_b, CMat d_y, float* work);
int64_t column_sum_work(int64_t rows, int64_t cols);
void swiglu_forward(cudaStream_t s, Mat out, CMat gate_up);
void swiglu_backward(cudaStream_t s, Mat d_gate_up, CMat d_out, CMat gate_up);
void geglu_forward(cudaStream_t s, Mat out, CMat gate_up);
void geglu_backward(cudaStream_t s, Mat d_gate_up, CMat d_out, CMat gate_up);
void gelu_forward(cudaStream_t s, Mat out, CMat x);
void softcap_forward(cudaStream_t s, Mat x, Mat d_cap, float cap);
void softcap_backward(cudaStream_t s, Mat d_x, CMat d_cap);
void gelu_backward(cudaStream_t s, Mat d_x, CMat d_out, CMat x);

// --- embeddings (elementwise.cu) ---
void embedding_forward(cudaStream_t s, Mat out, const int32_t* ids, CMat table, int64_t first_id);
// d_table (F32) += rows of d_out by id; deterministic: each table row sums its tokens in order.
void embedding_backward(cudaStream_t s, Mat d_table, CMat d_out, const int32_t* ids,
                        int64_t first_id);
void pos_embedding_forward(cudaStream_t s, Mat out, CMat wpe, const int32_t* doc_start, int B,
                           int T);
void pos_embedding_backward(cudaStream_t s, Mat d_wpe, CMat d_out, const int32_t* doc_start, int B,
                            int T);

// --- norms (norm.cu); rstd, mean: F32 (rows) ---
void rmsnorm_forward(cudaStream_t s, Mat out, float* rstd, CMat x, CMat w, float eps);
// d_x += (d_x F32 or 16-bit); d_w (F32) += through work (column_sum_work(rows, cols) floats);
// d_w.p null: no weight gradient.
void rmsnorm_backward(cudaStream_t s, Mat d_x, Mat d_w, CMat d_out, CMat x, CMat w,
                      const float* rstd, float* work);
void layernorm_forward(cudaStream_t s, Mat out, float* mean, float* rstd, CMat x, CMat w, CMat b,
                       float eps);
// work: 2 · column_sum_work(rows, cols) floats.
void layernorm_backward(cudaStream_t s, Mat d_x, Mat d_w, Mat d_b, CMat d_out, CMat x, CMat w,
                        const float* mean, const float* rstd, float* work);

// --- attention dims (rope.cu, attention.cu): qkv (B·T, (H + 2·KV)·D) ---
struct Attn {
    int B, T, H, KV, D;
    const int32_t* doc_start;  // (B·T) or null: one document per row
    int window;                // > 0: sliding-window attention (ete/backend/backend.h)
    float softcap;             // > 0: scores capped to softcap·tanh(s / softcap) (backend.h)
};
// RoPE on the q and k heads in place; cos/sin F32 (T, D/2); inverse: the backward rotation.
void rope(cudaStream_t s, Mat qkv, const float* cos, const float* sin, int half, Attn d,
          bool inverse);
// Causal attention (attention.cu): out (B·T, H·D), lse F32 (B·H·T). D <= attention_max_head_dim().
int attention_max_head_dim();
void attention_forward(cudaStream_t s, Mat out, float* lse, CMat qkv, Attn d, float scale);
// d_qkv written whole (its q, k and v columns); work: attention_backward_work(d) floats.
int64_t attention_backward_work(Attn d);
void attention_backward(cudaStream_t s, Mat d_qkv, CMat d_out, CMat out, const float* lse, CMat qkv,
                        Attn d, float scale, float* work);

// --- loss (loss.cu): logits F32 (N, V), targets I32 (N) ---
// losses (N) F32; d_logits (N, V) F32 or 16-bit, may alias logits.
void cross_entropy_forward_backward(cudaStream_t s, Mat logits, float* losses,
                                    const int32_t* targets, float d_scale, Mat d_logits);
void cross_entropy_forward(cudaStream_t s, float* losses, CMat logits, const int32_t* targets);
void cross_entropy_stats(cudaStream_t s, float* lse, float* target_logit, CMat logits,
                         const int32_t* targets);
void cross_entropy_backward(cudaStream_t s, Mat d_logits, CMat logits, const float* lse,
                            const int32_t* targets, float d_scale);

// --- quantization (quant.cu; core/fake_quant.h, core/nf4.h, core/rng.h) ---
// A grid: qmin, qmax and the zero-point rule (0 symmetric, 1 affine, 2 per token).
struct Grid {
    int qmin, qmax, rule;
};
// Integer matrices: I8, or U8 (is_unsigned).
struct Mat8 {
    void* p;
    bool is_unsigned;
    int64_t rows, cols, ld;
};
struct Mat8C {
    const void* p;
    bool is_unsigned;
    int64_t rows, cols, ld;
};
void min_max(cudaStream_t s, float* lo, float* hi, CMat x, int64_t group);
void quant_params(cudaStream_t s, float* scale, float* zero, const float* lo, const float* hi,
                  int64_t n, Grid g);
// mask: U8 (rows · ceil(cols / 8)) or null; y may alias x.
void fake_quant(cudaStream_t s, Mat y, CMat x, const float* scale, const float* zero,
                int64_t n_scale, uint8_t* mask, int64_t group, Grid g);
void fake_quant_backward(cudaStream_t s, Mat d_x, CMat d_y, const uint8_t* mask);
void fake_quant_scale_grad(cudaStream_t s, float* d_scale, CMat x, CMat d_y, const float* scale,
                           const float* zero, int64_t n_scale, int64_t group, Grid g);
void quantize_s8(cudaStream_t s, Mat8 q, CMat x, const float* scale, const float* zero,
                 int64_t n_scale, Grid g);
void dequantize_s32(cudaStream_t s, Mat y, const int32_t* acc, int64_t acc_ld, const float* a_scale,
                    const float* a_zero, int64_t n_a, int a_offset, const float* w_scale,
                    const int32_t* w_sum, float beta);
// Exact Σ_k (a − zero) · w over int32: into c (I32) when c is not null, else y (F32) = scale[n] ·
// that (+ beta · y).
void gemm_s8(cudaStream_t s, Mat8C a, Mat8C w, int32_t zero, int32_t* c, int64_t c_ld, float* y,
             int64_t y_ld, const float* scale, float beta);
// An NF4 weight in device memory (core/nf4.h); code: the 16 NF4 values in device memory.
struct Nf4 {
    const uint8_t* packed;
    const void* absmax;  // F32, or U8 with double quantization
    const float* nested_absmax;
    const float* nested_map;
    const float* code;
    float offset;
    int64_t rows, cols;
    int32_t blocksize, nested_blocksize;
};
void dequantize_nf4(cudaStream_t s, Mat out, Nf4 w, int64_t row0);
// Counter-based dropout (backend.h DropoutMask).
struct Dropout {
    uint64_t seed, stream, row0, row_stride, col0;
    uint32_t threshold;
    float keep_scale;
};
void dropout(cudaStream_t s, Mat y, CMat x, Dropout d, bool accumulate);

// --- optimizer (optim.cu) ---
struct Adam {
    float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale;
};
// p, g, m, v F32 (n); p_compute (n, 16-bit) rewritten from the new p when not null.
void adamw(cudaStream_t s, float* p, const float* g, float* m, float* v, int64_t n, Adam a,
           void* p_compute, Ft compute_t);

}  // namespace ete::cuda
