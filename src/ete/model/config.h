// ete/model/config.h — model hyper-parameters of every family ETE trains (model/family.h), and
// their HF `config.json` form.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "ete/model/family.h"
#include "ete/nn/rope.h"

namespace ete {

struct ModelConfig {
    Arch arch = Arch::Llama;
    int vocab_size = 32000;
    int hidden_size = 4096;         // C
    int intermediate_size = 11008;  // F (GPT-2: n_inner, default 4C)
    int num_layers = 32;            // L
    int num_heads = 32;             // H
    int num_kv_heads = 32;          // KV (GPT-2: = H)
    int head_dim = 0;               // D; 0 = hidden_size / num_heads
    int max_position_embeddings = 2048;
    double norm_eps = 1e-6;  // rms_norm_eps / layer_norm_epsilon
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    // Phi-3/Phi-4: RoPE rotates the first int(D · factor) dims of each head, the rest pass.
    double partial_rotary_factor = 1.0;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // Llama attention_bias: q/k/v/o biases (family().bias)
    bool mlp_bias = false;        // Llama mlp_bias: gate/up/down biases
    // Attention over the last `sliding_window` positions only (0: the whole causal prefix), in
    // the layers from window_from_layer on (Qwen2's max_window_layers; Mistral: all).
    int sliding_window = 0;
    int window_from_layer = 0;
    // WindowRule::Pattern (Gemma): every window_pattern-th layer (l + 1 divisible by it) is
    // global, the others slide.
    int window_pattern = 0;
    // Gemma: scores and final logits x become cap·tanh(x / cap) (0: no cap); the attention scale
    // is query_pre_attn_scalar^-1/2 (0: head_dim's); Gemma 3's sliding layers rotate with their
    // own unscaled RoPE base (rope_local_base_freq; 0: rope_theta and rope_scaling).
    float attn_softcap = 0, final_softcap = 0;
    double query_pre_attn_scalar = 0;
    double rope_local_theta = 0;
    double initializer_range = 0.02;
    int bos_token_id = -1;
    int eos_token_id = -1;

    int D() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
    // The dims RoPE rotates per head (HF: int(head_dim * partial_rotary_factor)).
    int rotary_dim() const { return int(D() * partial_rotary_factor); }
    const Family& family() const { return ete::family(arch); }
    bool has_qkv_bias() const;  // q/k/v (GPT-2: c_attn)
    bool has_o_bias() const;    // o_proj (GPT-2: attn.c_proj)
    bool has_mlp_bias() const;  // gate/up/down (GPT-2: c_fc, mlp.c_proj)
    // Whether global layer l attends through the sliding window.
    bool layer_slides(int l) const {
        return sliding_window > 0 && l >= window_from_layer &&
               (window_pattern == 0 || (l + 1) % window_pattern != 0);
    }
    // Global layer l's attention window (AttnDims::window): 0 = none.
    int window_of(int l) const { return layer_slides(l) ? sliding_window : 0; }
    // Global layer l rotates with the local RoPE base (rope_local_theta).
    bool local_rope(int l) const { return rope_local_theta > 0 && layer_slides(l); }
    // The softmax scale of the attention scores.
    float attn_scale() const;
    // The family's settings that [model] has no keys for (model/family.h: window_pattern, the
    // soft-caps, Gemma 3's local RoPE base), as Hugging Face's config classes default them.
    void use_family_defaults();
    // Checks every invariant; throws ete::Error naming the field.
    void validate() const;
};

// HF config.json <-> ModelConfig, for every family's model_type (model/family.h); unknown rope
// types, activations and settings ETE does not implement are rejected by name.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& where);
nlohmann::json config_to_hf_json(const ModelConfig& c);

}  // namespace ete
