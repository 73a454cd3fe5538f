// ete/backend/backend.h — the one narrow interface every compute backend implements.
//
// Layers call kernels only through a Backend&, on typed views (core/view.h) of the backend's own
// memory (core/device_memory.h): one method per op, whatever the dtypes; each backend switches on
// the views' dtypes once inside the op. Shape comments use B (batch), T (time), C (channels),
// H (query heads), KV (key/value heads), D (head dim), F (MLP width), V (vocab), N (rows = B*T).
//
// Dtypes. Float views are F32, BF16 or F16 (the reference backend also takes F64, for finite
// differences). Statistics (norm rstd/mean, log-sum-exp, losses), parameter gradients, optimizer
// state and the residual stream are F32 by the precision policy (DESIGN.md §3b); GEMM operands
// and saved activations may be 16-bit, and every kernel computes in fp32 (at least) whatever it
// reads, rounding once when it stores a 16-bit output. Ids, targets and document starts are I32.
//
// Gradient rule (as in llm.c): parameter gradients ACCUMULATE (+=); activation gradients are
// WRITTEN (=), except where a comment says "+=" — the residual stream, whose gradient several
// consumers add into.
//
// The fused QKV layout: a row of qkv holds H query heads, then KV key heads, then KV value heads,
// each D wide: (N, (H + 2*KV) * D). RoPE and attention read it in place.
//
// Packed sequences: several documents may share one row of a batch. AttnDims::doc_start, when not
// empty, is (B*T): doc_start[b*T + t] = s, the first position of the document that position t of
// row b belongs to, so 0 <= s <= t, a row starts a document (s = 0 at t = 0), and for t > 0
// either s == doc_start[b*T + t-1] (same document) or s == t (a new one). Documents never see
// each other: causal attention for query t sees keys j in [s, t] only, and RoPE and the position
// embedding use position t - s. Empty = one document per row (positions are t).
//
// Sliding-window attention (AttnDims::window = W > 0; Mistral, Qwen2, Gemma's local layers):
// query t also sees only the last W positions, keys j in [max(s, t - W + 1), t], as Hugging
// Face's sliding_window_overlay (kv > q - W). Positions are unchanged.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ete/core/device_memory.h"
#include "ete/core/fake_quant.h"
#include "ete/core/nf4.h"
#include "ete/core/view.h"

namespace ete {

struct AttnDims {
    int B, T, H, KV, D;
    CVec doc_start{};  // (B*T) I32 in backend memory, or empty; see the file header
    int window = 0;    // > 0: sliding-window attention over this many positions (file header)
    // > 0 (Gemma 2): each scaled score s becomes softcap · tanh(s / softcap) before the softmax;
    // lse is that of the capped scores.
    float softcap = 0;
    int qkv_stride() const { return (H + 2 * KV) * D; }
    // The first key query t of a row sees, given its document start s.
    int first_key(int s, int t) const { return window > 0 ? std::max(s, t - window + 1) : s; }
};

// Throws ete::Error unless doc_start (B*T, host memory; null is always valid) follows the rule of
// the file header; the message names the row and position and what was expected there.
void check_doc_start(const int32_t* doc_start, int B, int T);

// Throw ete::Error naming the op unless the views of min_max / fake_quant fit together (every
// backend checks the same way); return the number of blocks per row.
int64_t check_min_max_args(CVec lo, CVec hi, CMat x, int64_t group);
int64_t check_fake_quant_args(CMat y, CMat x, CVec scale, CVec zero, CVec mask, int64_t group,
                              const QuantGrid& g);
// ... and of fake_quant_own_range (returns the blocks per row).
int64_t check_fake_quant_own_range_args(CMat y, CMat x, CVec scale, int64_t group,
                                        const QuantGrid& g);
// ... and of fake_quant_scale_grad (returns the blocks per row).
int64_t check_fake_quant_scale_grad_args(CVec d_scale, CMat x, CMat d_y, CVec scale, CVec zero,
                                         int64_t group, const QuantGrid& g);

// The argument checks of quantize_s8 and dequantize_s32 every backend shares (ete::Error naming
// the op and what was expected).
void check_quantize_s8_args(CMat q, CMat x, CVec scale, CVec zero, const QuantGrid& g);
void check_dequantize_s32_args(CMat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                               CVec w_scale, CVec w_sum);
void check_gemm_s8_scaled_args(CMat a, CMat w, Mat y, CVec scale, int32_t zero, float beta);
// ... and of gemm_s8, quant_params, fake_quant_backward, dequantize_nf4 and gemm_nf4.
void check_gemm_s8_args(CMat a, CMat w, CMat c);
void check_quant_params_args(CVec scale, CVec zero, CVec lo, CVec hi);
void check_fake_quant_backward_args(CMat d_x, CMat d_y, CVec mask);
void check_dequantize_nf4_args(CMat out, const Nf4View& w, int64_t row0);
void check_gemm_nf4_args(CMat a, const Nf4View& w, bool trans_w, CMat c);

// A gemm_s8 weight prepared by a backend (Backend::prepare_s8): the view it was made from, and
// whatever layout the backend keeps beside it.
class S8Weight {
  public:
    explicit S8Weight(CMat w) : w_(w) {}
    virtual ~S8Weight() = default;
    S8Weight(const S8Weight&) = delete;
    S8Weight& operator=(const S8Weight&) = delete;
    CMat plain() const { return w_; }

  private:
    CMat w_;
};

constexpr int kIgnoreIndex = -100;

// AdamW hyper-parameters of one step; bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. The gradient is
// read as g · grad_scale (gradient clipping and the fp16 unscale, folded into the update: the
// same float product a separate scaling pass would store, one pass over memory less).
struct AdamWStep {
    float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
    float grad_scale = 1.0f;
};

// The keep mask of a counter-based dropout (PEFT's lora_dropout; DESIGN.md §3's layout-invariant
// randomness). Element (i, j) of an op's (rows, cols) operand has the global index
// e = (row0 + i) · row_stride + col0 + j — a token's place in the global batch times the global
// width, plus the global column — and is kept iff CounterRng(seed, stream).word(e) >= threshold(),
// i.e. with probability 1 - p whichever rank holds it. Kept elements are scaled by 1 / (1 - p).
struct DropoutMask {
    uint64_t seed = 0, stream = 0;
    uint64_t row0 = 0, row_stride = 0, col0 = 0;
    float p = 0.0f;  // drop probability in [0, 1); 0 = no dropout

    bool active() const { return p > 0.0f; }
    uint32_t threshold() const;  // round(p · 2^32), at most 2^32 - 1
    float keep_scale() const { return 1.0f / (1.0f - p); }
};

// Per-op timing for benchmarks: a backend with a profiler reports every op it runs.
class OpProfiler {
  public:
    virtual ~OpProfiler() = default;
    // op: a static name ("gemm_nt", "rmsnorm_forward", ...); flops: 0 when not meaningful.
    virtual void record(const char* op, double seconds, double flops) = 0;
};

class Backend : public DeviceMemory {
  public:
    virtual std::string name() const = 0;
    // One line: kernels and engines in use ("OpenBLAS SkylakeX, oneDNN 2.6 avx512_core_bf16").
    virtual std::string describe() const { return name(); }
    // Memory the GEMM engines keep for products in the compute dtype whose largest operand has
    // `largest` elements, run on `threads` threads: what a memory estimate adds for them. By
    // default a GEMM library's per-thread buffers: OpenBLAS reserves BUFFER_SIZE (32 MiB of
    // address space on x86-64) per thread but touches only its packed panels, a few MiB on large
    // products (measured on the bench models, docs/benchmarks.md).
    virtual uint64_t gemm_workspace_bytes(DType compute, uint64_t largest, int threads) const {
        (void)compute;
        (void)largest;
        return uint64_t(threads) * (uint64_t(8) << 20);
    }
    void set_profiler(OpProfiler* p) { profiler_ = p; }
    OpProfiler* profiler() const { return profiler_; }

    // --- data movement and elementwise ---
    // dst = src, converting between float dtypes (16-bit outputs rounded to nearest even).
    virtual void copy(Mat dst, CMat src) = 0;
    virtual void fill(Mat dst, float value) = 0;
    // x += y (residual connections; gradient sums).
    virtual void add(Mat x, CMat y) = 0;
    // x *= s.
    virtual void scale(Vec x, float s) = 0;
    // y = x · keep / (1 - p) (dropped elements 0), or y += that with accumulate; keep from
    // `mask` (DropoutMask). x and y may differ in float dtype (fp32 arithmetic, one rounding).
    virtual void dropout(Mat y, CMat x, const DropoutMask& mask, bool accumulate = false) = 0;
    // Sum of x² in double. Non-finite when any element is (the fp16 loss scaler relies on it).
    virtual double sum_squares(CVec x) = 0;

    // --- matrix products ---
    // c(M, N) = alpha * op(a)(M, K) * op(b)(K, N) + beta * c, op(x) = xᵀ when trans; products
    // accumulate in fp32; beta == 0 never reads c. a and b share one dtype.
    virtual void gemm(CMat a, bool trans_a, CMat b, bool trans_b, Mat c, float alpha = 1.0f,
                      float beta = 0.0f) = 0;
    // The same with b an NF4 (out, in) weight W (core/nf4.h), dequantized on the fly: trans_w
    // gives c (M, out) = alpha · a · Wᵀ + beta · c (a linear's forward), otherwise c (M, in) =
    // alpha · a · W + beta · c (its input gradient). The whole W is never materialised: tiles of
    // its rows are dequantized in a's dtype (F32, BF16, F16) into backend workspace and multiplied
    // with fp32 accumulation, so the result is that of dequantize_nf4 followed by gemm.
    virtual void gemm_nf4(CMat a, const Nf4View& w, bool trans_w, Mat c, float alpha = 1.0f,
                          float beta = 0.0f) = 0;
    // The integer product of quantized inference: c (M, N) I32 = a (M, K) · wᵀ, a I8 or U8, w
    // (N, K) I8, exactly (K <= 65536, so no sum overflows).
    virtual void gemm_s8(CMat a, CMat w, Mat c) = 0;
    // w (N, K) I8 prepared for many gemm_s8 products (on CPU: packed once into oneDNN's blocked
    // layout per shape class, instead of a reorder in every call). w's memory must outlive the
    // result and keep its values. The default keeps the view and multiplies it as it is.
    virtual std::unique_ptr<S8Weight> prepare_s8(CMat w);
    // gemm_s8 with a prepared weight: the same exact integers.
    virtual void gemm_s8(CMat a, const S8Weight& w, Mat c);
    // The product and dequantization of a per-tensor quantized input in one pass: y (M, N) F32 =
    // scale[n] · Σ_k (a[m, k] − zero) · w[n, k] + beta · y (beta 0 or 1), a U8 or I8 as gemm_s8
    // takes it, zero its stored zero point (z + 128 for U8 from quantize_s8), scale (F32, N) =
    // s_x · s_w[n]. The bracket is exact; the scaling is one fp32 product, which the CPU backend
    // fuses into oneDNN's int8 matmul (output scales, a source zero point) where it has such a
    // kernel, so y may differ from the reference's by fp32 rounding.
    virtual void gemm_s8_scaled(CMat a, const S8Weight& w, Mat y, CVec scale, int32_t zero,
                                float beta) = 0;
    // q (rows, cols) I8 or U8 = the integers of x (float) on grid g (core/fake_quant.h
    // quantize_value: nearbyint(x · (1/s)) + z, clamped), with one scale and zero point (F32)
    // for the tensor (n = 1) or one per row (n = rows). U8 stores q + 128, the unsigned operand
    // int8 matmuls take fastest.
    virtual void quantize_s8(Mat q, CMat x, CVec scale, CVec zero, const QuantGrid& g) = 0;
    // The dequantization of integer products: y (M, N) = a_scale[m] · w_scale[n] ·
    // (acc[m, n] - (a_zero[m] + a_offset) · w_sum[n]) + beta · y, where acc (I32) = Σ_k a·w of the
    // stored activations (a_offset = 128 for U8 from quantize_s8, else 0) and w_sum (I32, N) =
    // Σ_k w[n, k]. The bracket is exact in int32; one fp32 product scales it. a_scale and a_zero
    // (F32) have 1 or M entries; w_scale (F32) N; y is F32 or BF16; beta == 0 never reads y.
    virtual void dequantize_s32(Mat y, CMat acc, CVec a_scale, CVec a_zero, int a_offset,
                                CVec w_scale, CVec w_sum, float beta) = 0;
    // out (r, cols) = rows [row0, row0 + r) of W dequantized (code · absmax in fp32, rounded once
    // into out's dtype).
    virtual void dequantize_nf4(Mat out, const Nf4View& w, int64_t row0 = 0) = 0;
    // y(N, C) += b(C) on every row.   d_b(C) += column sums of d_y.
    virtual void bias_forward(Mat y, CVec b) = 0;
    virtual void bias_backward(Vec d_b, CMat d_y) = 0;

    // --- embeddings ---
    // out(N, C) = table[ids - first_id]; rows whose id lies outside [first_id, first_id + table
    // rows) are 0 (a vocab-parallel shard).  d_table += scatter of those rows of d_out.
    virtual void embedding_forward(Mat out, CVec ids, CMat table, int64_t first_id) = 0;
    virtual void embedding_backward(Mat d_table, CMat d_out, CVec ids, int64_t first_id) = 0;
    // out(B·T, C) += wpe(T, C) at position p = t - doc_start[b*T + t] (p = t without doc_start).
    // d_wpe(T, C) += d_out summed over all (b, t) at each position p.
    virtual void pos_embedding_forward(Mat out, CMat wpe, CVec doc_start, int B, int T) = 0;
    virtual void pos_embedding_backward(Mat d_wpe, CMat d_out, CVec doc_start, int B, int T) = 0;

    // --- norms (statistics in fp32; rstd and mean (N) are saved for backward) ---
    // RMSNorm over rows: out = x * rstd * w.  d_x += (residual stream), d_w += (an empty d_w or
    // d_b: a frozen norm, no weight gradient).
    virtual void rmsnorm_forward(Mat out, Vec rstd, CMat x, CVec w, float eps) = 0;
    // q (N, C) I8 or U8 = quantize_s8 of rmsnorm_forward's F32 out, in one pass: the integer
    // model's input of the linears after a norm. This default runs the two ops.
    virtual void rmsnorm_quantize(Mat q, CMat x, CVec w, float eps, CVec scale, CVec zero,
                                  const QuantGrid& g);
    virtual void rmsnorm_backward(Mat d_x, Vec d_w, CMat d_out, CMat x, CVec w, CVec rstd) = 0;
    // LayerNorm over rows with weight and bias.  d_x, d_w, d_b +=.
    virtual void layernorm_forward(Mat out, Vec mean, Vec rstd, CMat x, CVec w, CVec b,
                                   float eps) = 0;
    virtual void layernorm_backward(Mat d_x, Vec d_w, Vec d_b, CMat d_out, CMat x, CVec w,
                                    CVec mean, CVec rstd) = 0;

    // --- attention ---
    // RoPE (HF rotate-half) on the first R dims of the q and k heads of qkv, in place: dim j pairs
    // with j + R/2, the dims past R pass through (Phi's partial_rotary_factor; R = D otherwise).
    // cos/sin are (T, R/2) F32 tables read at position t - doc_start; their width gives R. They
    // may carry an attention factor (|cos, sin| != 1), so backward applies the transpose of the
    // rotation (cos, -sin) to d_qkv in place.
    virtual void rope_forward(Mat qkv, CMat cos, CMat sin, AttnDims d) = 0;
    virtual void rope_backward(Mat d_qkv, CMat cos, CMat sin, AttnDims d) = 0;
    // Causal attention with GQA (query head h uses kv head h / (H/KV)), never materialising a
    // (T, T) score matrix per head for the whole batch: query t of row b sees keys
    // [doc start, t]. out (B·T, H·D); lse (B·H·T) F32 is the log-sum-exp of the scaled scores,
    // saved for backward. Backward writes all of d_qkv.
    virtual void attention_forward(Mat out, Vec lse, CMat qkv, AttnDims d, float scale) = 0;
    virtual void attention_backward(Mat d_qkv, CMat d_out, CMat out, CVec lse, CMat qkv, AttnDims d,
                                    float scale) = 0;

    // --- activations ---
    // SwiGLU: gate_up (N, 2F) holds gate | up; out (N, F) = silu(gate) * up.  d_gate_up written.
    virtual void swiglu_forward(Mat out, CMat gate_up) = 0;
    virtual void swiglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) = 0;
    // GeGLU (Gemma): as SwiGLU with out = gelu_tanh(gate) * up (gelu_forward's GELU).
    virtual void geglu_forward(Mat out, CMat gate_up) = 0;
    virtual void geglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) = 0;
    // q (N, F) I8 or U8 = quantize_s8 of swiglu_forward's out (rounded to gate_up's dtype), in
    // one pass: the integer model's input of its down projection. This default runs the two ops.
    virtual void swiglu_quantize(Mat q, CMat gate_up, CVec scale, CVec zero, const QuantGrid& g);
    // GELU, tanh approximation (gelu_new), elementwise.  d_x written.
    virtual void gelu_forward(Mat out, CMat x) = 0;
    virtual void gelu_backward(Mat d_x, CMat d_out, CMat x) = 0;

    // --- soft-capping (Gemma 2's final logits; F32) ---
    // x = cap · tanh(x / cap) in place; d_cap (x's shape) or empty: 1 − tanh², the derivative.
    virtual void softcap_forward(Mat x, Mat d_cap, float cap) = 0;
    // d_x *= d_cap: the gradient of the capped values becomes that of the uncapped ones.
    virtual void softcap_backward(Mat d_x, CMat d_cap) = 0;

    // --- loss (F32 logits) ---
    // Softmax cross-entropy over logits (N, V): losses(N) = -log p[target] (0 where target ==
    // kIgnoreIndex), and d_logits (N, V) = d_scale * (p - onehot(target)) (zero rows where
    // ignored). d_logits may be logits itself (in place), or a 16-bit buffer for the GEMMs of
    // the head's backward; logits are clobbered either way. d_scale = 1 / (target tokens in the
    // whole optimizer step).
    virtual void cross_entropy_forward_backward(Mat logits, Vec losses, CVec targets, float d_scale,
                                                Mat d_logits) = 0;
    // Forward only, logits untouched.
    virtual void cross_entropy_forward(Vec losses, CMat logits, CVec targets) = 0;
    // The pieces of a cross-entropy whose columns are spread over ranks (vocab-parallel):
    // lse(N) = log Σ_j e^logits[r, j] over this block's columns (-inf with none), and
    // target_logit(N) = logits[r, targets[r]] when 0 <= targets[r] < cols, else 0.
    virtual void cross_entropy_stats(Vec lse, Vec target_logit, CMat logits, CVec targets) = 0;
    // d_logits (N, V) = d_scale * (e^(logits - lse[r]) - [j == targets[r]]) with the row's global
    // log-sum-exp lse; rows whose target is kIgnoreIndex are 0. May be in place.
    virtual void cross_entropy_backward(Mat d_logits, CMat logits, CVec lse, CVec targets,
                                        float d_scale) = 0;

    // --- quantization-aware training (core/fake_quant.h) ---
    // A block is `group` consecutive columns of a row (cols % group == 0; group = cols: a row).
    // lo, hi (F32, rows · cols/group) = the min and max of each block over its finite elements; a
    // block without any gets lo = +inf, hi = -inf.
    virtual void min_max(Vec lo, Vec hi, CMat x, int64_t group) = 0;
    // scale, zero (F32, n) = quant_params of each range [lo, hi] (n); an empty range (lo > hi) is
    // taken as [0, 0].
    virtual void quant_params(Vec scale, Vec zero, CVec lo, CVec hi, const QuantGrid& g) = 0;
    // y = fake quantization of x with one scale and zero point (F32) per block: scale.n == 1 (the
    // whole tensor) or rows · cols/group. mask (U8, fake_quant_mask_bytes(rows, cols)), when not
    // empty, receives the straight-through bits (each row's padding bits 0). y may be x.
    virtual void fake_quant(Mat y, CMat x, CVec scale, CVec zero, Vec mask, int64_t group,
                            const QuantGrid& g) = 0;
    // d_x = d_y where mask's bit is set, else 0 (written; d_x may be d_y).
    virtual void fake_quant_backward(Mat d_x, CMat d_y, CVec mask) = 0;
    // y = fake quantization of x on a symmetric grid g, each block's scale from the block's own
    // range: min_max, quant_params and fake_quant in one call, bit for bit (what QAT does to a
    // weight every step). scale (F32, rows · cols/group) receives the scales. No mask: such a
    // scale puts every finite value inside the grid. This default runs the three ops; a backend
    // may fuse them into one pass over x. y may be x.
    virtual void fake_quant_own_range(Mat y, CMat x, Vec scale, int64_t group, const QuantGrid& g);
    // LSQ's scale gradient: d_scale (F32, rows · cols/group, one per block even when scale.n ==
    // 1) = Σ over the block of d_y · lsq_scale_slope(x) with the scale and zero point fake_quant
    // uses for that element; summed in double in column order (every backend the same sums).
    virtual void fake_quant_scale_grad(Vec d_scale, CMat x, CMat d_y, CVec scale, CVec zero,
                                       int64_t group, const QuantGrid& g) = 0;

    // --- optimizer ---
    // AdamW over n F32 elements; decoupled weight decay p -= lr * wd * p. When p_compute is not
    // empty (a 16-bit compute copy of p), it is rewritten from the new p in the same pass.
    virtual void adamw_step(Vec p, CVec g, Vec m, Vec v, const AdamWStep& s, Vec p_compute) = 0;
    // 8-bit AdamW over n F32 elements (optim/adamw8bit.h), in blocks of `block` elements (the
    // last may be shorter): the moments are U8 codes (n each) of moment_map_signed() (m) and
    // bnb_dynamic_map_unsigned() (v) times their block's absmax (F32, one per block;
    // core/dynamic_map.h). One pass per block dequantizes them, updates p (and p_compute) with
    // adamw_step's arithmetic on the fp32 moments, and requantizes those with the block's new
    // absmax. Bit-exact to the reference script (tools/gen_adamw8bit_goldens.py).
    virtual void adamw8bit_step(Vec p, CVec g, Vec m_codes, Vec v_codes, Vec m_absmax, Vec v_absmax,
                                int64_t block, const AdamWStep& s, Vec p_compute) = 0;

  protected:
    OpProfiler* profiler_ = nullptr;
};

// The scalar reference backend: plain loops, the oracle every other backend is tested against.
std::unique_ptr<Backend> make_ref_backend();
// The optimized CPU backend (OpenMP + SIMD + OpenBLAS, oneDNN for 16-bit GEMMs).
std::unique_ptr<Backend> make_cpu_backend();
// The CPU backend on memory the host cannot touch (tests: proves that nothing outside the backend
// dereferences backend memory).
std::unique_ptr<Backend> make_guarded_backend();
// The CPU backend as a counter (train/memory_estimate.h's plan_memory): its allocations are
// address space that is never backed (a model of any size builds in no memory), uploads and fills
// do nothing, and any op or download throws. Its GEMM workspace figures are the CPU backend's.
std::unique_ptr<Backend> make_planning_backend();
// The CUDA backend; a build without it throws "[cuda] backend 'cuda': this build ... has no CUDA
// compute backend".
std::unique_ptr<Backend> make_cuda_backend();
// The same on device `device` (0-based among the visible ones).
std::unique_ptr<Backend> make_cuda_backend(int device);
// The GPUs this process sees (0 without a CUDA build or a usable device).
int cuda_device_count();
// The device a rank uses: env_device (ETE_CUDA_DEVICE's value) when set, which must name one of
// the `visible` devices; else local_rank % visible, so the ranks of a node spread over its GPUs
// (more ranks than GPUs share them: the staged MPI communicator allows it, NCCL does not).
// The trainer passes ETE_CUDA_DEVICE_MAP's entry for its rank (mapped_cuda_device) as env_device
// when that is set, so errors name ETE_CUDA_DEVICE.
// Throws ete::Error naming ETE_CUDA_DEVICE and what was expected; needs visible >= 1.
int pick_cuda_device(const char* env_device, int local_rank, int visible);
// ETE_CUDA_DEVICE_MAP ("3,1,0,2": world rank -> GPU, written by `ete launch --placement auto`):
// the entry of world_rank, "" when map is unset or empty. Throws ete::Error naming the variable
// when the list is not comma-separated device numbers or has no entry for the rank.
std::string mapped_cuda_device(const char* map, int world_rank);
// A rank's backend `name`; "cuda" on that rank's GPU: ETE_CUDA_DEVICE_MAP's entry, else
// ETE_CUDA_DEVICE, else local_rank modulo the visible GPUs (pick_cuda_device).
std::unique_ptr<Backend> make_rank_backend(const std::string& name, int world_rank, int local_rank);
// Empty when make_cuda_backend() can run here (a CUDA build and at least one visible device);
// else why not, in one line (tests skip their CUDA cases with it).
std::string cuda_unavailable_reason();
// One clause for `ete --version` and the start of a run: "CUDA: <GPU> (sm_90, 139.8 GiB), driver
// 13.0, runtime 13.0, cuBLASLt 13.0.0" for each visible device's first, or why there is none.
std::string cuda_summary();
// By name: "cpu", "ref", "guarded", "cuda".
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace ete
