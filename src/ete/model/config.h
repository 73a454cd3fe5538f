// ete/model/config.h — model hyper-parameters for the two supported families, and their HF
// `config.json` form (LlamaForCausalLM, GPT2LMHeadModel).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "ete/nn/rope.h"

namespace ete {

enum class Arch { Llama, GPT2 };

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
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // Llama attention_bias (GPT-2: always true)
    bool mlp_bias = false;        // Llama mlp_bias (GPT-2: always true)
    double initializer_range = 0.02;
    int bos_token_id = -1;
    int eos_token_id = -1;

    int D() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
    bool linear_bias() const { return arch == Arch::GPT2; }
    // Checks every invariant; throws ete::Error naming the field.
    void validate() const;
};

std::string arch_name(Arch a);

// HF config.json <-> ModelConfig. from_hf_json accepts LlamaForCausalLM and GPT2LMHeadModel
// configs (model_type "llama"/"gpt2"); unknown rope types are rejected by name.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& where);
nlohmann::json config_to_hf_json(const ModelConfig& c);

}  // namespace ete
