// ete/model/transformer.h — a decoder-only transformer (Llama or GPT-2) with explicit backward.
//
// Dimension letters: B batch, T time, C hidden, H query heads, KV key/value heads, D head dim,
// S = (H + 2KV)·D fused qkv width, F MLP width, V vocab, L layers, N = B·T rows.
//
// Activations live in one Arena sized by setup(B, T): the training loop never allocates. With
// recompute "full", each layer keeps only its input (the residual stream) and re-runs its
// forward into a shared scratch before its backward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/arena.h"
#include "ete/model/config.h"
#include "ete/model/param_store.h"

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
    Transformer(const ModelConfig& config, Backend& backend);

    const ModelConfig& config() const { return cfg_; }
    ParamStore& params() { return params_; }
    const ParamStore& params() const { return params_; }
    Backend& backend() { return be_; }

    // Allocates activations for batches up to (B, T). Call again to resize.
    void setup(int B, int T, Recompute recompute = Recompute::None);
    // Same, recomputing exactly the layers flagged in `plan` (size L).
    void setup(int B, int T, const std::vector<bool>& plan);
    int max_batch() const { return B_; }
    int max_seq() const { return T_; }
    size_t activation_bytes() const { return arena_.capacity(); }

    // One micro-batch forward + backward. inputs/targets are (B, T); gradients accumulate into
    // params().grads(); d_scale scales the loss gradient (1 / target tokens in the step).
    // Returns the sum of per-token losses over non-ignored targets.
    // doc_start (B, T) or null packs several documents per row (AttnDims in backend.h): no
    // attention across a document boundary, positions restart at each document. It is checked
    // (ete::Error naming the row and position) and read again by a recomputing backward.
    double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                            float d_scale, const int32_t* doc_start = nullptr);
    // Forward only: sum of per-token losses (ignored targets contribute 0).
    double forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                        const int32_t* doc_start = nullptr);
    // Forward only: logits (B·T, V) for every position.
    void forward_logits(const int32_t* inputs, int B, int T, float* logits,
                        const int32_t* doc_start = nullptr);

  private:
    void allocate(Arena& a);
    AttnDims attn_dims(int B, int T, const int32_t* doc_start) const;
    void forward_body(const int32_t* inputs, AttnDims d);
    void layer_forward(int l, const LayerActs& s, AttnDims d);
    void layer_backward(int l, const LayerActs& s, AttnDims d);
    void attention_backward(int l, const LayerActs& s, AttnDims d);
    void mlp_backward(int l, const LayerActs& s, AttnDims d);
    void final_norm_forward(int N);
    void final_norm_backward(int N);
    double head_forward_backward(const int32_t* targets, int N, float d_scale, bool backward);
    const float* head_weight() const;
    float* head_grad();
    LayerWeights weights(int l, bool grads);
    const LayerActs& acts(int l) const { return layer_acts_[act_slot_[size_t(l)]]; }

    ModelConfig cfg_;
    Backend& be_;
    ParamStore params_;
    std::vector<LayerWeights> w_, g_;

    int B_ = 0, T_ = 0, head_rows_ = 0;
    std::vector<bool> recompute_;   // per layer
    std::vector<size_t> act_slot_;  // layer -> its LayerActs; recomputed layers share one scratch
    Arena arena_;
    std::vector<float*> resid_;          // L+1 buffers (N, C): input of layer l, resid_[L] output
    std::vector<LayerActs> layer_acts_;  // one per kept layer, plus one scratch if any recompute
    float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // (N, C), (N), (N)
    float* logits_ = nullptr;                                           // (head_rows, V)
    float* losses_ = nullptr;                                           // (N)
    float *rope_cos_ = nullptr, *rope_sin_ = nullptr;                   // (T, D/2)
    float *d_resid_ = nullptr, *d_ln_ = nullptr;                        // (N, C)
    float *d_qkv_ = nullptr, *d_att_ = nullptr;                         // (N, S), (N, H·D)
    float *d_fc_ = nullptr, *d_act_ = nullptr;                          // (N, 2F | F), (N, F)
    int32_t* ids_ = nullptr;  // (N) copy of the current inputs
};

}  // namespace ete
