// ete/model/transformer.h — a decoder-only transformer (Llama or GPT-2) with explicit backward,
// tensor-parallel (Megatron) and cut into pipeline stages (DESIGN.md §4).
//
// Dimension letters: B batch, T time, C hidden, H query heads, KV key/value heads, D head dim,
// S = (H + 2KV)·D fused qkv width, F MLP width, V vocab, L layers, N = B·T rows. Under tensor
// parallelism over P ranks H, KV, S, F and V are this rank's (H/P, KV/P — or 1 when P > KV —,
// padded F/P and V/P).
//
// Activations live in one Arena sized by setup(B, T, plan, slots): the training loop never
// allocates. A recomputed layer keeps only its input (the residual stream) and re-runs its
// forward into a shared scratch before its backward. Each pipeline slot (a micro-batch in flight)
// has its own saved activations; backward scratch is shared.
//
// Tensor parallelism (tp_size > 1): q|k|v and gate|up are column-parallel (this rank's heads and
// MLP columns), o_proj/down_proj row-parallel with one all-reduce of their output in forward; in
// backward the gradient into each column-parallel block's input (d ln1, d ln2) is all-reduced
// once. Embedding and LM head are vocab-parallel; the cross-entropy is fused across ranks and
// never gathers full logits. Activations on the residual stream, the loss and the gradients of
// replicated parameters are identical on every tp rank. With tp_size 1 nothing is communicated.
//
// GQA with P > KV (P a multiple of KV): rank r holds kv head r / (P/KV), the one all its H/P
// query heads use, so attention stays local. The P/KV ranks holding a kv head (its kv group)
// each compute a partial k|v gradient from their own query heads; the group sums them per
// micro-batch before the layer's gradients are reported, so the copies stay identical. Their
// partial d(ln1) terms need no change: the tp all-reduce of d(ln1) adds them up to the whole.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/arena.h"
#include "ete/model/config.h"
#include "ete/model/model_parallel.h"
#include "ete/model/param_store.h"
#include "ete/parallel/communicator.h"

namespace ete {

enum class Recompute { None, Full };

// Which layers recompute their activations in backward, from "none", "full" or a list of layer
// indices and ranges such as "0-3,6" (memory is then spent only on the layers not listed).
std::vector<bool> recompute_plan(const std::string& spec, int num_layers);

// Pointers into the ParamStore (weights or gradients) for one layer; unused ones are null.
struct LayerWeights {
    float *ln1_w = nullptr, *ln1_b = nullptr;
    float *qkv_w = nullptr, *qkv_b = nullptr;  // (S, C), (S)
    float *o_w = nullptr, *o_b = nullptr;      // (C, H·D), (C)
    float *ln2_w = nullptr, *ln2_b = nullptr;
    float *fc_w = nullptr, *fc_b = nullptr;      // Llama (2F, C) gate|up; GPT-2 (F, C)
    float *proj_w = nullptr, *proj_b = nullptr;  // (C, F)
};

// What one layer's forward saves for its backward.
struct LayerActs {
    float* ln1 = nullptr;        // (N, C)
    float* ln1_mean = nullptr;   // (N) LayerNorm only
    float* ln1_rstd = nullptr;   // (N)
    float* qkv = nullptr;        // (N, S) after RoPE
    float* att = nullptr;        // (N, H·D)
    float* lse = nullptr;        // (B, H, T)
    float* resid_mid = nullptr;  // (N, C) residual after attention
    float* ln2 = nullptr;        // (N, C)
    float* ln2_mean = nullptr;   // (N)
    float* ln2_rstd = nullptr;   // (N)
    float* fc = nullptr;         // (N, 2F) Llama gate|up; (N, F) GPT-2 pre-activation
    float* act = nullptr;        // (N, F)
};

class Transformer {
  public:
    // Called at most once per micro-batch backward for each contiguous range of the flat
    // gradient buffer (ParamStore offsets) whose gradient became final.
    using GradReadyHook = std::function<void(int64_t offset, int64_t count)>;

    // mp = {}: the whole model on one process. Throws ete::Error on an invalid ModelParallel.
    Transformer(const ModelConfig& config, Backend& backend, const ModelParallel& mp = {});

    const ModelConfig& config() const { return cfg_; }
    const ModelParallel& model_parallel() const { return mp_; }  // layer_end resolved
    ParamStore& params() { return params_; }
    const ParamStore& params() const { return params_; }
    Backend& backend() { return be_; }

    // Allocates activations for batches up to (B, T) and `slots` micro-batches in flight (the
    // stage API; 1F1B needs min(num_stages - stage, micro-batches)); `plan` (size L, global layer
    // indices) flags the layers that recompute. Call again to resize.
    void setup(int B, int T, Recompute recompute = Recompute::None);
    void setup(int B, int T, const std::vector<bool>& plan, int slots = 1);
    int max_batch() const { return B_; }
    int max_seq() const { return T_; }
    int slots() const { return int(slots_.size()); }
    size_t activation_bytes() const { return arena_.capacity(); }

    // --- The whole model in one call (a single pipeline stage; any tp). ---
    // One micro-batch forward + backward. inputs/targets are (B, T) with B, T up to the set-up
    // size; gradients accumulate into params().grads(); d_scale scales the loss gradient
    // (1 / target tokens in the step). Returns the sum of per-token losses over non-ignored
    // targets. doc_start (B, T) or null packs several documents per row (AttnDims in backend.h):
    // no attention across a document boundary, positions restart at each document. It is checked
    // (ete::Error naming the row and position). Runs in slot 0.
    double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                            float d_scale, const int32_t* doc_start = nullptr);
    // Forward only: sum of per-token losses (ignored targets contribute 0).
    double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                        const int32_t* doc_start = nullptr);
    // Forward only: logits (B·T, V) for every position; under tp the shards are all-gathered
    // (every tp rank gets the full logits).
    void forward_logits(const int32_t* inputs, int B, int T, float* logits,
                        const int32_t* doc_start = nullptr);

    // --- The pipeline-stage API: one stage of one micro-batch, in slot `slot`. ---
    // Batches are exactly the set-up (B, T). Stage 0 reads token ids `inputs` (B·T); other
    // stages read stage_input(slot). Non-last stages leave their output in stage_output(slot).
    // The last stage computes the loss of `targets` (B·T) and returns the sum of token losses
    // (0 on other stages); it also runs the LM head's backward at once (the head's weight
    // gradient accumulates here, d_lnf is kept for stage_backward). d_scale == 0 (on every
    // stage) is a forward-only evaluation: nothing accumulates and stage_backward(slot) throws.
    // A slot whose backward is due refuses another forward. doc_start is given to every stage's
    // call of a micro-batch and copied, so the caller may reuse its buffers at once.
    double stage_forward(int slot, const int32_t* inputs, const int32_t* targets,
                         const int32_t* doc_start, float d_scale);
    // The last stage starts from its loss; the others read d(output) from
    // stage_output_grad(slot). Non-first stages leave d(input) in stage_input_grad(slot).
    // Parameter gradients accumulate (+=). Calls the grad-ready hook as gradients become final.
    void stage_backward(int slot);
    // (B·T, C) buffers of a slot, for the executor to receive into / send from. Each stays
    // valid and untouched until the slot's next stage_forward (input, output) or stage_backward
    // (the grads). Asking a stage for one it does not have (stage 0's input) throws.
    float* stage_input(int slot);
    float* stage_output(int slot);
    float* stage_output_grad(int slot);
    float* stage_input_grad(int slot);

    // During every backward (stage_backward and forward_backward): after each layer (its
    // parameters), after the head (final norm and LM head or tied copy) and at the end
    // (embeddings; a tied single-stage embedding, which is also the head, only here). Ranges
    // come in decreasing offsets, contiguous, so one backward reports each element of the buffer
    // exactly once, padding already zeroed, the value final for this micro-batch — the LM head's
    // weight gradient accumulates in the last stage's forwards, so it is final for the step at
    // the backward after the step's last forward (1F1B: the last micro-batch's). An empty
    // function removes the hook.
    void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }

  private:
    // One micro-batch in flight: its saved activations and stage-boundary buffers.
    struct Slot {
        std::vector<float*> resid;    // L_s + 1 (N, C): input of local layer i; [L_s] = output
        std::vector<LayerActs> acts;  // one per kept layer of this stage
        float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;  // last stage
        float* d_lnf = nullptr;  // (N, C) from the head; the shared d_ln_ when slots == 1
        float* d_out = nullptr;  // (N, C) non-last stages: stage_output_grad
        float* d_in = nullptr;   // (N, C) non-first stages: stage_input_grad, backward's d_resid
        int32_t* ids = nullptr;  // (N) stage 0: the token ids
        int32_t* doc = nullptr;  // (N) copy of doc_start
        AttnDims dims{};         // of the last forward (doc_start -> doc or null)
        bool pending = false;    // forward done, backward due
    };
    // Contiguous gradient range reported by the hook, and its parameters with padding.
    struct GradGroup {
        int64_t offset = 0, count = 0;
        std::vector<int> padded;
    };

    void allocate(Arena& a);
    void build_grad_groups();
    void finish_group(const GradGroup& g);
    AttnDims attn_dims(int B, int T, const int32_t* doc_start) const;
    Slot& slot_at(int slot, const char* op);
    void require_single_stage(const char* op) const;
    double run_forward(Slot& s, AttnDims d, const int32_t* inputs, const int32_t* targets,
                       float d_scale, bool backward);
    void run_backward(Slot& s);
    const LayerActs& acts(const Slot& s, int i) const;
    // Layers, by local index i (global layer layer_begin + i).
    void layer_forward(int i, const LayerActs& s, const float* x, float* out, AttnDims d);
    void layer_backward(int i, Slot& s, float* d_resid, AttnDims d);
    void attention_backward(int i, const LayerActs& s, const float* x, float* d_resid, AttnDims d);
    void mlp_backward(int i, const LayerActs& s, float* d_resid, AttnDims d);
    void row_parallel_forward(float* y, const float* resid, const float* in, int K, const float* W,
                              const float* b, int N);
    void tp_sum(float* x, size_t n);
    // Replicated kv heads (kv_group_): around a layer's q|k|v weight-gradient accumulation.
    void kv_grads_set_aside(int i);
    Request kv_grads_start_sum(int i);
    void kv_grads_finish(int i, Request& sum);
    LayerWeights weights(int layer, bool grads);
    // Embedding, final norm and head (transformer_head.cpp).
    void embed_forward(float* out, const int32_t* ids, AttnDims d);
    void embed_backward(const float* d_out, const int32_t* ids, AttnDims d);
    bool owns_token(int32_t id) const {
        return id >= vocab_begin_ && id < vocab_begin_ + vocab_valid_;
    }
    void local_ids(const int32_t* ids, int N);
    void final_norm_forward(Slot& s, int N);
    void final_norm_backward(Slot& s, float* d_resid, int N);
    double head_forward(Slot& s, const int32_t* targets, int N, float d_scale, bool backward);
    void head_chunk_vocab_parallel(const float* x, const int32_t* targets, int rows, float d_scale,
                                   bool backward, float* losses, float* d_x);
    void logits_forward(const float* x, int N, float* logits);
    const float* head_weight() const;
    float* head_grad();

    ModelConfig cfg_;
    Backend& be_;
    ModelParallel mp_;
    Communicator* tp_ = nullptr;  // the tp group when tp_size > 1, else null (no communication)
    std::unique_ptr<Communicator> kv_group_;  // tp > KV: the ranks holding this kv head, else null
    ParamStore params_;
    std::vector<LayerWeights> w_, g_;        // by local layer
    int H_ = 0, KV_ = 0, F_ = 0, V_ = 0;     // this rank's heads, kv heads, MLP width, vocab rows
    int vocab_begin_ = 0, vocab_valid_ = 0;  // global ids [begin, begin + valid) are this rank's
    std::vector<GradGroup> layer_groups_;    // by local layer
    GradGroup head_group_, embed_group_;
    GradReadyHook grad_ready_;

    int B_ = 0, T_ = 0, head_rows_ = 0;
    std::vector<bool> recompute_;  // per global layer
    std::vector<int> act_index_;   // local layer -> its LayerActs in a slot, -1 = shared scratch
    Arena arena_;
    std::vector<Slot> slots_;
    LayerActs scratch_acts_;                           // recomputed layers
    float* logits_ = nullptr;                          // (head_rows, V)
    float* losses_ = nullptr;                          // (N)
    float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // (T, D/2)
    float *d_resid_ = nullptr, *d_ln_ = nullptr;       // (N, C)
    float *d_qkv_ = nullptr, *d_att_ = nullptr;        // (N, S), (N, H·D)
    float *d_fc_ = nullptr, *d_act_ = nullptr;         // (N, 2F | F), (N, F)
    float* tp_buf_ = nullptr;       // (N, C) tp > 1: partial row-parallel outputs
    int32_t* ids_local_ = nullptr;  // (N) tp > 1: token ids within this rank's vocabulary rows
    float* ce_buf_ = nullptr;       // (5·head_rows) tp > 1: the vocab-parallel softmax statistics
    int32_t* ce_tgt_ = nullptr;     // (head_rows) tp > 1: targets as local columns

    // kv_group_: the k|v weight (2·D, C) and bias (2·D) gradients accumulated before this
    // micro-batch, and this micro-batch's partials being summed over the group.
    float *kv_old_ = nullptr, *kv_sum_ = nullptr;  // (2·D·C + 2·D) each
};

}  // namespace ete
