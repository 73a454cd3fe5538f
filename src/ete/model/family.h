// ete/model/family.h — the model families ETE trains, one row each: what a family's decoder is
// made of (norm, MLP, positions, biases, attention window) and how Hugging Face names it. Code
// asks the row (family(arch).norm, .mlp, ...), never which family it is, so a family that differs
// from another only in these columns is one new row (docs/models.md says how to add one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ete {

enum class Arch : uint8_t { Llama, GPT2, Qwen2, Mistral, Qwen3, Gemma2, Gemma3, Phi3 };

// The HF tensor layout of the decoder: Llama's (model.layers.N.self_attn.q_proj, k_proj, v_proj,
// o_proj, mlp.gate_proj, up_proj, down_proj, input_layernorm, post_attention_layernorm,
// model.norm, lm_head), GPT-2's (h.N.attn.c_attn = q|k|v in one Conv1D stored (in, out),
// attn.c_proj, mlp.c_fc, mlp.c_proj, ln_1, ln_2, ln_f; wte, wpe) or Phi-3's (Llama's names, but
// q|k|v in one self_attn.qkv_proj and gate|up in one mlp.gate_up_proj).
enum class Layout : uint8_t { Llama, GPT2, Phi3 };
// LayerNorm: with a bias. RMSNormPlusOne (Gemma): the weight w is applied as (1 + w), in fp32,
// and starts at 0.
enum class NormKind : uint8_t { RMSNorm, LayerNorm, RMSNormPlusOne };
// Gelu: tanh-approximated (gelu_new). The gated ones read gate | up (2F wide): silu(gate)·up,
// gelu_tanh(gate)·up (Gemma's gelu_pytorch_tanh).
enum class MlpKind : uint8_t { SwiGLU, Gelu, GeGLU };
// Which linears have biases: those config.json's attention_bias / mlp_bias say (Llama;
// Qwen3 has attention_bias only), q/k/v always and nothing else (Qwen2), none (Mistral, Phi-3),
// every one (GPT-2).
enum class BiasRule : uint8_t { FromConfig, Qkv, None, All };
// Which layers attend through a sliding window (ModelConfig::sliding_window): none; every layer
// when config.json's sliding_window is not null (Mistral, Phi-3); the layers from max_window_layers
// when use_sliding_window is true (Qwen2, Qwen3); every layer but each window_pattern-th (Gemma 2:
// alternating, the first local; Gemma 3: five local, one global).
enum class WindowRule : uint8_t { None, AllLayers, FromMaxWindowLayers, Pattern };

struct Family {
    Arch arch;
    const char* name;        // model.arch and what ETE prints
    const char* model_type;  // config.json "model_type"
    const char* hf_class;    // config.json "architectures"[0]
    Layout layout;
    NormKind norm;
    MlpKind mlp;
    bool rope;         // rotary positions; else learned ones (GPT-2's wpe)
    bool always_tied;  // the LM head is the embedding whatever tie_word_embeddings says
    BiasRule bias;
    WindowRule window;
    // RMSNorm over each query and key head (D wide, one weight per kind) after q/k/v and before
    // RoPE: self_attn.q_norm / k_norm (Qwen3, Gemma 3), of the family's norm kind.
    bool qk_norm;
    // Gemma 2/3: a norm after attention and after the MLP, before each residual add
    // (post_attention_layernorm, post_feedforward_layernorm; the MLP's input norm is then
    // pre_feedforward_layernorm), and the token embedding multiplied by √hidden_size rounded to
    // the compute dtype.
    bool sandwich_norms = false;
    bool embed_scale = false;
    // Config keys the family reads (else refused when set): attn_logit_softcapping,
    // final_logit_softcapping, query_pre_attn_scalar (Gemma); rope_local_base_freq (Gemma 3: the
    // RoPE base of the sliding layers).
    bool softcap_keys = false;
    bool local_rope = false;
    // WindowRule::Pattern's period when config.json has neither layer_types nor
    // sliding_window_pattern; and Hugging Face's defaults of the soft-caps (0: none), for a
    // model built from [model] rather than a config.json.
    int window_pattern = 0;
    float attn_softcap = 0, final_softcap = 0;
    // The keys of Hugging Face's config class for the family beyond those every Llama-layout
    // family has (model/config_keys.cpp): each is read (model/config.cpp) or leaves the math
    // unchanged. A key outside them is a notice, or an error where it would change the math.
    std::span<const std::string_view> config_keys;

    bool gated_mlp() const { return mlp != MlpKind::Gelu; }  // fc is gate | up (2F)
    // q|k|v and the MLP's input projection are one tensor each (GPT-2's c_attn and c_fc, Phi-3's
    // qkv_proj and gate_up_proj), not a tensor per member.
    bool fused_tensors() const { return layout != Layout::Llama; }
    // Llama's tensor names (model.layers.N..., model.embed_tokens, model.norm).
    bool llama_names() const { return layout != Layout::GPT2; }
    // What the norm kernels add to the weights (NormKind::RMSNormPlusOne).
    float norm_offset() const { return norm == NormKind::RMSNormPlusOne ? 1.0f : 0.0f; }
};

const Family& family(Arch a);
std::span<const Family> families();
// The family of a model.arch value / an HF model_type, or null.
const Family* family_named(std::string_view name);
const Family* family_of_model_type(std::string_view model_type);
// "llama, gpt2, qwen2 or mistral": for errors.
std::string family_names();

inline std::string arch_name(Arch a) {
    return family(a).name;
}

}  // namespace ete
