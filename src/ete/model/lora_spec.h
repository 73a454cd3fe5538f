// ete/model/lora_spec.h — what a LoRA / QLoRA run changes in the parameter table (the [lora]
// config section; DESIGN.md §5, PEFT conventions).
//
// With LoRA enabled the whole base model is frozen. Its decoder linears are stored as
// `base_format` says: "f32" or "bf16" dense (plain LoRA over a full-precision base), or "nf4"
// (QLoRA: bitsandbytes NF4, `nf4_block` elements a block, double quantization by default).
// Embeddings, norms, biases and the LM head stay in full precision. Every linear named by
// `targets` gets an adapter A (r_max, in), B (out, r_max), Kaiming-uniform A and zero B, right
// after its base weight in the table, so a layer's adapters are one contiguous range of the flat
// trainable buffers (gradient buckets, optimizer, checkpoints see adapters only).
//
// Targets are PEFT module names, matched like PEFT matches them (by the last name component):
// Llama q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; GPT-2 c_attn, c_proj
// (attn.c_proj and mlp.c_proj both), c_fc; Phi-3 qkv_proj, o_proj, gate_up_proj, down_proj; or
// "all-linear" (every decoder linear, not the head).
#pragma once

#include <string>
#include <vector>

#include "ete/model/config.h"
#include "ete/model/param_spec.h"

namespace ete {

struct LoraSpec {
    bool enabled = false;
    int r = 8;      // the initial (and, without dynamic rank, the only) rank
    int r_max = 0;  // allocated rank; 0 = r
    float alpha = 16.0f;
    bool rslora = false;  // scale alpha / √r instead of alpha / r
    std::vector<std::string> targets = {"q_proj", "v_proj"};
    std::string base_format = "f32";  // "f32" | "bf16" | "nf4"
    int nf4_block = 64;
    bool nf4_double_quant = true;
    // PEFT's lora_dropout on each adapter's input while training (nn/lora.h), p in [0, 1); the
    // masks are keyed by dropout_seed (train.seed), the step, the layer, the site and each
    // token's global position.
    float dropout = 0.0f;
    uint64_t dropout_seed = 0;

    int allocated_rank() const { return r_max > 0 ? r_max : r; }
    bool nf4() const { return base_format == "nf4"; }
};

// Throws ete::Error naming the `lora.*` key unless the spec is valid for config c.
void check_lora_spec(const LoraSpec& s, const ModelConfig& c);

// The base roles the targets select for config c (Q, K, V, AttnOut, Gate, Up, Down for Llama;
// Qkv, AttnOut, Fc, Down for GPT-2), in the order they appear in a layer.
std::vector<ParamRole> lora_target_roles(const LoraSpec& s, const ModelConfig& c);

// "a, b,,c " -> {"a", "b", "c"}: items trimmed of blanks, empty ones dropped.
std::vector<std::string> split_comma_list(const std::string& s);

// The roles of PEFT module names (or "all-linear") for an architecture, in layer order; the check
// throws naming `key` for an empty list or an unknown name.
std::vector<ParamRole> linear_roles(const std::vector<std::string>& names, Arch arch);
void check_linear_names(const std::vector<std::string>& names, Arch arch, const char* key);

// PEFT's default target modules for a family (its
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING): q_proj, v_proj for the Llama layout, c_attn
// for GPT-2, every linear for Phi-3.
std::vector<std::string> peft_default_targets(Arch arch);

// The PEFT module name of a base role ("q_proj", "c_attn", ...; GPT-2's AttnOut and Down are both
// "c_proj").
std::string lora_module_name(ParamRole base, Arch arch);

}  // namespace ete
