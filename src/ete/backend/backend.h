// ete/backend/backend.h — the one narrow interface every compute backend implements.
//
// Layers call kernels only through a Backend&. Pointers are device pointers of that backend (host
// memory for CPU). All tensors are row-major f32; shape comments use B (batch), T (time),
// C (channels), H (query heads), KV (key/value heads), D (head dim), F (MLP width), V (vocab),
// N (rows = B*T).
//
// Gradient rule (as in llm.c): parameter gradients ACCUMULATE (+=); activation gradients are
// WRITTEN (=), except where a comment says "+=" — the residual stream, whose gradient several
// consumers add into.
//
// The fused QKV layout: a row of qkv holds H query heads, then KV key heads, then KV value heads,
// each D wide: (N, (H + 2*KV) * D). RoPE and attention read it in place.
//
// Packed sequences: several documents may share one row of a batch. AttnDims::doc_start, when
// non-null, is (B*T) int32: doc_start[b*T + t] = s, the first position of the document that
// position t of row b belongs to, so 0 <= s <= t, a row starts a document (s = 0 at t = 0), and for
// t > 0 either s == doc_start[b*T + t-1] (same document) or s == t (a new one). Documents never
// see each other: causal attention for query t sees keys j in [s, t] only, and RoPE and the
// position embedding use position t - s. null = one document per row (positions are t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ete {

struct AttnDims {
    int B, T, H, KV, D;
    const int32_t* doc_start = nullptr;  // (B*T) or null; see the file header
    int qkv_stride() const { return (H + 2 * KV) * D; }
    // First position of the document that holds position t of row b (0 without packing).
    int doc_begin(int b, int t) const { return doc_start ? doc_start[size_t(b) * T + t] : 0; }
};

// Throws ete::Error unless doc_start (B*T; null is always valid) follows the rule of the file
// header; the message names the row and position and what was expected there.
void check_doc_start(const int32_t* doc_start, int B, int T);

constexpr int kIgnoreIndex = -100;

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;

    // C(M,N) = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions.
    virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                      int lda, const float* B, int ldb, float beta, float* C, int ldc) = 0;

    // y(N, C) with row stride ldy: y += b.   d_b(C) += column sums of d_y.
    virtual void bias_forward(float* y, const float* b, int N, int C, int ldy) = 0;
    virtual void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy) = 0;

    // out(N, C) = table[ids] (table (V, C)).  d_table += scatter of d_out by ids.
    virtual void embedding_forward(float* out, const int32_t* ids, const float* table, int N,
                                   int C) = 0;
    virtual void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N,
                                    int C) = 0;
    // out(B, T, C) += wpe(T, C) at position p = t - doc_start[b*T + t] (p = t when doc_start is
    // null).  d_wpe(T, C) += d_out summed over all (b, t) at each position p.
    virtual void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start,
                                       int B, int T, int C) = 0;
    virtual void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start,
                                        int B, int T, int C) = 0;

    // RMSNorm over rows: out = x * rstd * w, rstd(N) saved.  d_x += (residual stream), d_w +=.
    virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N,
                                 int C, float eps) = 0;
    virtual void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x,
                                  const float* w, const float* rstd, int N, int C) = 0;
    // LayerNorm over rows with weight and bias; mean(N), rstd(N) saved.  d_x, d_w, d_b +=.
    virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* x,
                                   const float* w, const float* b, int N, int C, float eps) = 0;
    virtual void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out,
                                    const float* x, const float* w, const float* mean,
                                    const float* rstd, int N, int C) = 0;

    // RoPE (HF rotate-half: dim j pairs with j + D/2) on the q and k heads of qkv, in place.
    // cos/sin are (T, D/2) tables read at position t - d.doc_begin(b, t). Backward applies the
    // inverse rotation to d_qkv in place.
    virtual void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d) = 0;
    virtual void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d) = 0;

    // Causal attention with GQA (query head h uses kv head h / (H/KV)), never materialising a
    // (T, T) score matrix per head for the whole batch: query t of row b sees keys
    // [d.doc_begin(b, t), t]. out (B, T, H*D); lse (B, H, T) is the log-sum-exp of the scaled
    // scores, saved for backward. Backward writes all of d_qkv.
    virtual void attention_forward(float* out, float* lse, const float* qkv, AttnDims d,
                                   float scale) = 0;
    virtual void attention_backward(float* d_qkv, const float* d_out, const float* out,
                                    const float* lse, const float* qkv, AttnDims d,
                                    float scale) = 0;

    // SwiGLU: gate_up (N, 2F) holds gate | up; out (N, F) = silu(gate) * up.  d_gate_up written.
    virtual void swiglu_forward(float* out, const float* gate_up, int N, int F) = 0;
    virtual void swiglu_backward(float* d_gate_up, const float* d_out, const float* gate_up, int N,
                                 int F) = 0;
    // GELU, tanh approximation (gelu_new), elementwise over n.  d_x written.
    virtual void gelu_forward(float* out, const float* x, int64_t n) = 0;
    virtual void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n) = 0;

    // x += y, elementwise (residual connections).
    virtual void add_inplace(float* x, const float* y, int64_t n) = 0;

    // Softmax cross-entropy over logits (N, V), in place: losses(N) = -log p[target] (0 where
    // target == kIgnoreIndex), and logits are overwritten with d_scale * (p - onehot(target))
    // (zero rows where ignored). d_scale = 1 / (target tokens in the whole optimizer step).
    virtual void cross_entropy_forward_backward(float* logits, float* losses,
                                                const int32_t* targets, int N, int V,
                                                float d_scale) = 0;
    // Forward only, logits untouched.
    virtual void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets,
                                       int N, int V) = 0;

    // AdamW over n elements; decoupled weight decay p -= lr * wd * p. bc1 = 1 - beta1^t, etc.
    virtual void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, float bc1,
                            float bc2) = 0;
    virtual double sum_squares(const float* x, int64_t n) = 0;
    virtual void scale(float* x, float s, int64_t n) = 0;
};

// The scalar reference backend: plain loops, the oracle every other backend is tested against.
std::unique_ptr<Backend> make_ref_backend();
// The optimized CPU backend (OpenMP + SIMD + BLAS).
std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend; a build without it throws "[cuda] backend 'cuda': this build ... has no CUDA
// compute backend".
std::unique_ptr<Backend> make_cuda_backend();
// By name: "cpu", "ref", "cuda".
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace ete
