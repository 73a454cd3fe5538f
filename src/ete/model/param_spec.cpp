// ete/model/param_spec.cpp
#include "ete/model/param_spec.h"

#include <cmath>

namespace ete {
namespace {

std::string layer_prefix(const ModelConfig& c, int i) {
    return c.arch == Arch::Llama ? fmt::format("model.layers.{}.", i) : fmt::format("h.{}.", i);
}

void llama_layer(std::vector<ParamSpec>& t, const ModelConfig& c, int i) {
    std::string p = layer_prefix(c, i);
    int64_t C = c.hidden_size, F = c.intermediate_size, HD = int64_t(c.num_heads) * c.D(),
            KVD = int64_t(c.num_kv_heads) * c.D();
    float s = float(c.initializer_range);
    auto mat = [&](const std::string& n, int64_t out, int64_t in) {
        t.push_back({p + n + ".weight", {out, in}, ParamKind::Matrix, ParamInit::Normal, s});
    };
    auto bias = [&](const std::string& n, int64_t out) {
        t.push_back({p + n + ".bias", {out}, ParamKind::Bias, ParamInit::Zeros, 0});
    };
    t.push_back({p + "input_layernorm.weight", {C}, ParamKind::Norm, ParamInit::Ones, 0});
    mat("self_attn.q_proj", HD, C);
    mat("self_attn.k_proj", KVD, C);
    mat("self_attn.v_proj", KVD, C);
    if (c.attention_bias) {
        bias("self_attn.q_proj", HD);
        bias("self_attn.k_proj", KVD);
        bias("self_attn.v_proj", KVD);
    }
    mat("self_attn.o_proj", C, HD);
    if (c.attention_bias) bias("self_attn.o_proj", C);
    t.push_back({p + "post_attention_layernorm.weight", {C}, ParamKind::Norm, ParamInit::Ones, 0});
    mat("mlp.gate_proj", F, C);
    mat("mlp.up_proj", F, C);
    if (c.mlp_bias) {
        bias("mlp.gate_proj", F);
        bias("mlp.up_proj", F);
    }
    mat("mlp.down_proj", C, F);
    if (c.mlp_bias) bias("mlp.down_proj", C);
}

void gpt2_layer(std::vector<ParamSpec>& t, const ModelConfig& c, int i) {
    std::string p = layer_prefix(c, i);
    int64_t C = c.hidden_size, F = c.intermediate_size;
    float s = float(c.initializer_range);
    // GPT-2 scales the init of residual projections by 1/sqrt(2L) (HF _init_weights).
    float s_proj = float(c.initializer_range / std::sqrt(2.0 * c.num_layers));
    auto norm = [&](const std::string& n) {
        t.push_back({p + n + ".weight", {C}, ParamKind::Norm, ParamInit::Ones, 0});
        t.push_back({p + n + ".bias", {C}, ParamKind::Bias, ParamInit::Zeros, 0});
    };
    auto conv = [&](const std::string& n, int64_t out, int64_t in, float std) {
        t.push_back(
            {p + n + ".weight", {out, in}, ParamKind::Matrix, ParamInit::Normal, std, true});
        t.push_back({p + n + ".bias", {out}, ParamKind::Bias, ParamInit::Zeros, 0});
    };
    norm("ln_1");
    conv("attn.c_attn", 3 * C, C, s);
    conv("attn.c_proj", C, C, s_proj);
    norm("ln_2");
    conv("mlp.c_fc", F, C, s);
    conv("mlp.c_proj", C, F, s_proj);
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c) {
    std::vector<ParamSpec> t;
    int64_t V = c.vocab_size, C = c.hidden_size;
    float s = float(c.initializer_range);
    if (c.arch == Arch::Llama) {
        t.push_back(
            {"model.embed_tokens.weight", {V, C}, ParamKind::Embedding, ParamInit::Normal, s});
        for (int i = 0; i < c.num_layers; ++i) llama_layer(t, c, i);
        t.push_back({"model.norm.weight", {C}, ParamKind::Norm, ParamInit::Ones, 0});
        if (!c.tie_word_embeddings)
            t.push_back({"lm_head.weight", {V, C}, ParamKind::Matrix, ParamInit::Normal, s});
    } else {
        t.push_back({"wte.weight", {V, C}, ParamKind::Embedding, ParamInit::Normal, s});
        t.push_back({"wpe.weight",
                     {int64_t(c.max_position_embeddings), C},
                     ParamKind::Embedding,
                     ParamInit::Normal,
                     0.01f});
        for (int i = 0; i < c.num_layers; ++i) gpt2_layer(t, c, i);
        t.push_back({"ln_f.weight", {C}, ParamKind::Norm, ParamInit::Ones, 0});
        t.push_back({"ln_f.bias", {C}, ParamKind::Bias, ParamInit::Zeros, 0});
    }
    return t;
}

bool param_decays(const ParamSpec& p) {
    return p.kind == ParamKind::Matrix;
}

}  // namespace ete
