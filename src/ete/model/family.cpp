// ete/model/family.cpp — the family table.
#include "ete/model/family.h"

#include <array>

#include "ete/core/error.h"

namespace ete {

namespace {

using L = Layout;
using N = NormKind;
using M = MlpKind;
using B = BiasRule;
using W = WindowRule;
using K = std::string_view;

// Per family, the keys of its Hugging Face config class (and of its published config.json files)
// beyond the Llama layout's common ones. Unread but harmless: Llama's pretraining_tp (the same
// product, sliced), GPT-2's summary_* (a classification head) and reorder_and_upcast_attn (fp32
// scores, as ETE computes them), Gemma 2's sliding_window_size and hidden_act (the class reads
// sliding_window and hidden_activation). GPT-2's dropouts are not read (docs/models.md).
constexpr std::array kLlamaKeys = {K{"pretraining_tp"}, K{"attention_bias"}, K{"mlp_bias"}};
constexpr std::array kGpt2Keys = {K{"vocab_size"},
                                  K{"n_positions"},
                                  K{"n_ctx"},
                                  K{"n_embd"},
                                  K{"n_layer"},
                                  K{"n_head"},
                                  K{"n_inner"},
                                  K{"activation_function"},
                                  K{"resid_pdrop"},
                                  K{"embd_pdrop"},
                                  K{"attn_pdrop"},
                                  K{"layer_norm_epsilon"},
                                  K{"initializer_range"},
                                  K{"summary_type"},
                                  K{"summary_use_proj"},
                                  K{"summary_activation"},
                                  K{"summary_proj_to_labels"},
                                  K{"summary_first_dropout"},
                                  K{"scale_attn_weights"},
                                  K{"scale_attn_by_inverse_layer_idx"},
                                  K{"reorder_and_upcast_attn"},
                                  K{"tie_word_embeddings"}};
constexpr std::array kQwen2Keys = {K{"use_sliding_window"}, K{"sliding_window"},
                                   K{"max_window_layers"}, K{"layer_types"}};
constexpr std::array kMistralKeys = {K{"sliding_window"}, K{"layer_types"}};
constexpr std::array kQwen3Keys = {K{"attention_bias"}, K{"use_sliding_window"},
                                   K{"sliding_window"}, K{"max_window_layers"}, K{"layer_types"}};
constexpr std::array kGemma2Keys = {K{"hidden_activation"},      K{"query_pre_attn_scalar"},
                                    K{"attn_logit_softcapping"}, K{"final_logit_softcapping"},
                                    K{"sliding_window"},         K{"layer_types"},
                                    K{"attention_bias"},         K{"sliding_window_size"}};
constexpr std::array kGemma3Keys = {K{"hidden_activation"},      K{"query_pre_attn_scalar"},
                                    K{"attn_logit_softcapping"}, K{"final_logit_softcapping"},
                                    K{"sliding_window"},         K{"layer_types"},
                                    K{"attention_bias"},         K{"rope_local_base_freq"},
                                    K{"sliding_window_pattern"}, K{"use_bidirectional_attention"}};
constexpr std::array kPhi3Keys = {K{"resid_pdrop"}, K{"embd_pdrop"},
                                  K{"original_max_position_embeddings"}, K{"sliding_window"}};

// In Arch order. Mistral is Llama's decoder without biases and with an optional attention
// window; Qwen2 Llama's with q/k/v biases and a window on the layers from max_window_layers;
// Qwen3 Qwen2's window with per-head q/k norms and attention_bias in place of the q/k/v biases.
// Gemma 2 is Llama's layout with (1 + w) norms around both sub-blocks, GeGLU, a scaled
// embedding, soft-capped attention and final logits, and alternating local/global layers; Gemma
// 3 drops the caps for per-head q/k norms, five local layers per global one and a RoPE base of
// their own for the local layers. Phi-3 (and Phi-4, the same model_type) is Mistral's decoder
// stored with fused q|k|v and gate|up tensors, and rotates part of each head
// (partial_rotary_factor) with LongRoPE's per-frequency factors.
constexpr std::array kFamilies = {
    Family{.arch = Arch::Llama,
           .name = "llama",
           .model_type = "llama",
           .hf_class = "LlamaForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNorm,
           .mlp = M::SwiGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::FromConfig,
           .window = W::None,
           .qk_norm = false,
           .config_keys = kLlamaKeys},
    Family{.arch = Arch::GPT2,
           .name = "gpt2",
           .model_type = "gpt2",
           .hf_class = "GPT2LMHeadModel",
           .layout = L::GPT2,
           .norm = N::LayerNorm,
           .mlp = M::Gelu,
           .rope = false,
           .always_tied = true,
           .bias = B::All,
           .window = W::None,
           .qk_norm = false,
           .config_keys = kGpt2Keys},
    Family{.arch = Arch::Qwen2,
           .name = "qwen2",
           .model_type = "qwen2",
           .hf_class = "Qwen2ForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNorm,
           .mlp = M::SwiGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::Qkv,
           .window = W::FromMaxWindowLayers,
           .qk_norm = false,
           .config_keys = kQwen2Keys},
    Family{.arch = Arch::Mistral,
           .name = "mistral",
           .model_type = "mistral",
           .hf_class = "MistralForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNorm,
           .mlp = M::SwiGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::None,
           .window = W::AllLayers,
           .qk_norm = false,
           .config_keys = kMistralKeys},
    Family{.arch = Arch::Qwen3,
           .name = "qwen3",
           .model_type = "qwen3",
           .hf_class = "Qwen3ForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNorm,
           .mlp = M::SwiGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::FromConfig,
           .window = W::FromMaxWindowLayers,
           .qk_norm = true,
           .config_keys = kQwen3Keys},
    Family{.arch = Arch::Gemma2,
           .name = "gemma2",
           .model_type = "gemma2",
           .hf_class = "Gemma2ForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNormPlusOne,
           .mlp = M::GeGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::FromConfig,
           .window = W::Pattern,
           .qk_norm = false,
           .sandwich_norms = true,
           .embed_scale = true,
           .softcap_keys = true,
           .local_rope = false,
           .window_pattern = 2,
           .attn_softcap = 50.0f,
           .final_softcap = 30.0f,
           .config_keys = kGemma2Keys},
    Family{.arch = Arch::Gemma3,
           .name = "gemma3",
           .model_type = "gemma3_text",
           .hf_class = "Gemma3ForCausalLM",
           .layout = L::Llama,
           .norm = N::RMSNormPlusOne,
           .mlp = M::GeGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::FromConfig,
           .window = W::Pattern,
           .qk_norm = true,
           .sandwich_norms = true,
           .embed_scale = true,
           .softcap_keys = true,
           .local_rope = true,
           .window_pattern = 6,
           .config_keys = kGemma3Keys},
    Family{.arch = Arch::Phi3,
           .name = "phi3",
           .model_type = "phi3",
           .hf_class = "Phi3ForCausalLM",
           .layout = L::Phi3,
           .norm = N::RMSNorm,
           .mlp = M::SwiGLU,
           .rope = true,
           .always_tied = false,
           .bias = B::None,
           .window = W::AllLayers,
           .qk_norm = false,
           .config_keys = kPhi3Keys},
};

}  // namespace

const Family& family(Arch a) {
    const Family& f = kFamilies[size_t(a)];
    ETE_ASSERT(f.arch == a);
    return f;
}

std::span<const Family> families() {
    return kFamilies;
}

const Family* family_named(std::string_view name) {
    for (const Family& f : kFamilies)
        if (name == f.name) return &f;
    return nullptr;
}

const Family* family_of_model_type(std::string_view model_type) {
    for (const Family& f : kFamilies)
        if (model_type == f.model_type) return &f;
    return nullptr;
}

std::string family_names() {
    std::string s;
    for (size_t i = 0; i < kFamilies.size(); ++i)
        s += std::string(i == 0                      ? ""
                         : i + 1 == kFamilies.size() ? " or "
                                                     : ", ") +
             kFamilies[i].name;
    return s;
}

}  // namespace ete
