// ete/model/param_spec.cpp
#include "ete/model/param_spec.h"

#include <algorithm>
#include <cmath>

#include "ete/model/lora_spec.h"
#include "ete/model/qat_spec.h"
#include "ete/model/shard.h"

namespace ete {
namespace {

// Megatron sharding rules (ShardRule comments).
constexpr ShardRule kReplicated{};
constexpr ShardRule kRows{0, 1, false};       // column-parallel: q/k/v heads
constexpr ShardRule kRowsPadded{0, 1, true};  // column-parallel MLP, vocab-parallel tables
constexpr ShardRule kCols{1, 1, false};       // row-parallel over heads
constexpr ShardRule kColsPadded{1, 1, true};  // row-parallel over the MLP width
constexpr ShardRule kRowsQkv{0, 3, false};    // GPT-2 c_attn: q | k | v each split

std::string layer_prefix(const ModelConfig& c, int i) {
    return c.family().llama_names() ? fmt::format("model.layers.{}.", i) : fmt::format("h.{}.", i);
}

ParamSpec spec(std::string name, Shape shape, ParamKind kind, ParamInit init, float std,
               ShardRule rule, bool hf_transposed = false) {
    ParamSpec s{std::move(name), shape, kind, init, std, hf_transposed};
    s.shard = rule;
    return s;
}

ParamSpec& role(std::vector<ParamSpec>& t, ParamRole r, int layer = -1) {
    t.back().role = r;
    t.back().layer = layer;
    return t.back();
}

// Appends one Llama-layout layer's rows (weights named under its prefix) with their roles.
struct LayerRows {
    std::vector<ParamSpec>& t;
    const ModelConfig& c;
    int layer;
    std::string prefix;

    void mat(const std::string& n, int64_t out, int64_t in, ShardRule r, ParamRole w) {
        t.push_back(spec(prefix + n + ".weight", {out, in}, ParamKind::Matrix, ParamInit::Normal,
                         float(c.initializer_range), r));
        role(t, w, layer);
    }
    void bias(const std::string& n, int64_t out, ShardRule r, ParamRole b) {
        t.push_back(spec(prefix + n + ".bias", {out}, ParamKind::Bias, ParamInit::Zeros, 0, r));
        role(t, b, layer);
    }
    // A (1 + w) norm starts at 0 (the identity scale, as HF initialises Gemma's).
    void norm(const std::string& n, int64_t width, ParamRole w) {
        const ParamInit init = c.family().norm_offset() != 0 ? ParamInit::Zeros : ParamInit::Ones;
        t.push_back(spec(prefix + n + ".weight", {width}, ParamKind::Norm, init, 0, kReplicated));
        role(t, w, layer);
    }
};

// q|k|v (a tensor each, or Phi-3's one qkv_proj), their biases, o_proj, Qwen3's and Gemma 3's
// q/k norms.
void llama_attention(LayerRows& r) {
    using R = ParamRole;
    const ModelConfig& c = r.c;
    const int64_t C = c.hidden_size, HD = int64_t(c.num_heads) * c.D(),
                  KVD = int64_t(c.num_kv_heads) * c.D();
    // tp > KV replicates each kv head on tp / KV ranks (ShardRule::max_parts).
    const ShardRule kv{0, 1, false, c.num_kv_heads};
    if (c.family().fused_tensors()) {  // Phi-3: q | k | v, q H / KV times as wide (lead)
        r.mat("self_attn.qkv_proj", HD + 2 * KVD, C,
              ShardRule{0, 3, false, c.num_kv_heads, c.num_heads / c.num_kv_heads}, R::Qkv);
    } else {
        r.mat("self_attn.q_proj", HD, C, kRows, R::Q);
        r.mat("self_attn.k_proj", KVD, C, kv, R::K);
        r.mat("self_attn.v_proj", KVD, C, kv, R::V);
    }
    if (c.has_qkv_bias()) {
        r.bias("self_attn.q_proj", HD, kRows, R::QBias);
        r.bias("self_attn.k_proj", KVD, kv, R::KBias);
        r.bias("self_attn.v_proj", KVD, kv, R::VBias);
    }
    r.mat("self_attn.o_proj", C, HD, kCols, R::AttnOut);
    if (c.has_o_bias())
        r.bias("self_attn.o_proj", C, kReplicated, R::AttnOutBias);  // added after the all-reduce
    if (c.family().qk_norm) {  // replicated: every rank's heads use them (nn/head_norm.h)
        r.norm("self_attn.q_norm", c.D(), R::QNorm);
        r.norm("self_attn.k_norm", c.D(), R::KNorm);
    }
}

// gate and up (or Phi-3's one gate_up_proj), their biases, down_proj.
void llama_mlp(LayerRows& r) {
    using R = ParamRole;
    const ModelConfig& c = r.c;
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    if (c.family().fused_tensors()) {  // Phi-3: gate | up, each half split (padded) across tp
        r.mat("mlp.gate_up_proj", 2 * F, C, ShardRule{0, 2, true}, R::Fc);
    } else {
        r.mat("mlp.gate_proj", F, C, kRowsPadded, R::Gate);
        r.mat("mlp.up_proj", F, C, kRowsPadded, R::Up);
    }
    if (c.has_mlp_bias()) {
        r.bias("mlp.gate_proj", F, kRowsPadded, R::GateBias);
        r.bias("mlp.up_proj", F, kRowsPadded, R::UpBias);
    }
    r.mat("mlp.down_proj", C, F, kColsPadded, R::Down);
    if (c.has_mlp_bias()) r.bias("mlp.down_proj", C, kReplicated, R::DownBias);
}

void llama_layer(std::vector<ParamSpec>& t, const ModelConfig& c, int i) {
    using R = ParamRole;
    LayerRows r{t, c, i, layer_prefix(c, i)};
    const int64_t C = c.hidden_size;
    const bool sandwich = c.family().sandwich_norms;
    r.norm("input_layernorm", C, R::AttnNorm);
    llama_attention(r);
    // Gemma: the attention output's norm, then the MLP's input norm.
    r.norm("post_attention_layernorm", C, sandwich ? R::PostAttnNorm : R::MlpNorm);
    if (sandwich) r.norm("pre_feedforward_layernorm", C, R::MlpNorm);
    llama_mlp(r);
    if (sandwich) r.norm("post_feedforward_layernorm", C, R::PostFfnNorm);
}

void gpt2_layer(std::vector<ParamSpec>& t, const ModelConfig& c, int i) {
    std::string p = layer_prefix(c, i);
    int64_t C = c.hidden_size, F = c.intermediate_size;
    float s = float(c.initializer_range);
    // GPT-2 scales the init of residual projections by 1/sqrt(2L) (HF _init_weights).
    float s_proj = float(c.initializer_range / std::sqrt(2.0 * c.num_layers));
    using R = ParamRole;
    auto norm = [&](const std::string& n, R w, R b) {
        t.push_back(spec(p + n + ".weight", {C}, ParamKind::Norm, ParamInit::Ones, 0, kReplicated));
        role(t, w, i);
        t.push_back(spec(p + n + ".bias", {C}, ParamKind::Bias, ParamInit::Zeros, 0, kReplicated));
        role(t, b, i);
    };
    // Conv1D: weight (out, in) in ETE layout; the bias follows the output features, except for
    // row-parallel layers whose bias is added once after the all-reduce (replicated).
    auto conv = [&](const std::string& n, int64_t out, int64_t in, float std, ShardRule w,
                    ShardRule b, R rw, R rb) {
        t.push_back(
            spec(p + n + ".weight", {out, in}, ParamKind::Matrix, ParamInit::Normal, std, w, true));
        role(t, rw, i);
        t.push_back(spec(p + n + ".bias", {out}, ParamKind::Bias, ParamInit::Zeros, 0, b));
        role(t, rb, i);
    };
    norm("ln_1", R::AttnNorm, R::AttnNormBias);
    conv("attn.c_attn", 3 * C, C, s, kRowsQkv, kRowsQkv, R::Qkv, R::QkvBias);
    conv("attn.c_proj", C, C, s_proj, kCols, kReplicated, R::AttnOut, R::AttnOutBias);
    norm("ln_2", R::MlpNorm, R::MlpNormBias);
    conv("mlp.c_fc", F, C, s, kRowsPadded, kRowsPadded, R::Fc, R::FcBias);
    conv("mlp.c_proj", C, F, s_proj, kColsPadded, kReplicated, R::Down, R::DownBias);
}

ParamSpec embedding_spec(const ModelConfig& c) {
    const char* name = c.family().llama_names() ? "model.embed_tokens.weight" : "wte.weight";
    return spec(name, {int64_t(c.vocab_size), int64_t(c.hidden_size)}, ParamKind::Embedding,
                ParamInit::Normal, float(c.initializer_range), kRowsPadded);
}

bool is_decoder_linear(ParamRole r) {
    using R = ParamRole;
    switch (r) {
        case R::Q:
        case R::K:
        case R::V:
        case R::Qkv:
        case R::AttnOut:
        case R::Gate:
        case R::Up:
        case R::Fc:
        case R::Down:
            return true;
        default:
            return false;
    }
}

// The adapter of base weight spec w (global shapes): A (R, in), B (out, R), sharded with the
// base (Column base: A replicated, B like the base's rows; Row base: A like its columns, B
// replicated).
void add_adapter(std::vector<ParamSpec>& t, const ParamSpec& w, int R) {
    const std::string module = w.name.substr(0, w.name.size() - std::string(".weight").size());
    const int64_t out = w.shape[0], in = w.shape[1];
    ETE_CHECK(R <= std::min(out, in),
              "lora: rank {} exceeds the smaller side ({}) of '{}' ({}, {}); lower lora.r / "
              "lora.r_max",
              R, std::min(out, in), w.name, out, in);
    const bool column = w.shard.dim == 0;
    ParamSpec a = spec(module + ".lora_A.weight", {R, in}, ParamKind::Matrix, ParamInit::Uniform,
                       float(1.0 / std::sqrt(double(in))),
                       column ? kReplicated : ShardRule{1, 1, w.shard.pad});
    ParamSpec b = spec(module + ".lora_B.weight", {out, R}, ParamKind::Matrix, ParamInit::Zeros, 0,
                       column ? w.shard : kReplicated);
    for (ParamSpec* x : {&a, &b}) {
        x->layer = w.layer;
        x->lora_base = w.role;
    }
    a.role = ParamRole::LoraA;
    b.role = ParamRole::LoraB;
    t.push_back(std::move(a));
    t.push_back(std::move(b));
}

// Freezes the base, marks NF4 linears, and puts each target's adapter after its weight.
std::vector<ParamSpec> with_lora(std::vector<ParamSpec> base, const ModelConfig& c,
                                 const LoraSpec& lora) {
    const std::vector<ParamRole> targets = lora_target_roles(lora, c);
    std::vector<ParamSpec> t;
    for (ParamSpec& s : base) {
        s.trainable = false;
        const bool linear = param_is_decoder_linear(s);
        if (linear && lora.nf4()) {
            s.nf4_block = lora.nf4_block;
            s.nf4_double_quant = lora.nf4_double_quant;
        }
        t.push_back(s);
        if (linear && std::find(targets.begin(), targets.end(), s.role) != targets.end())
            add_adapter(t, s, lora.allocated_rank());
    }
    return t;
}

// The QatScale parameter of weight w (global shapes; qat_spec.h's learnable_scale).
ParamSpec scale_spec(const ParamSpec& w, const QatSpec& q) {
    const int64_t out = w.shape[0], in = w.shape[1];
    ParamSpec s;
    switch (q.weight_granularity) {
        case QatGranularity::Tensor:
            s = spec(qat_scale_name(w.name), {1}, ParamKind::QuantScale, ParamInit::Ones, 0,
                     kReplicated);
            break;
        case QatGranularity::Group:  // blocks of columns: split like the weight
            s = spec(qat_scale_name(w.name), {out, in / q.group_size}, ParamKind::QuantScale,
                     ParamInit::Ones, 0, w.shard);
            break;
        default:  // per output channel: split with the rows
            s = spec(qat_scale_name(w.name), {out}, ParamKind::QuantScale, ParamInit::Ones, 0,
                     w.shard.dim == 0 ? w.shard : kReplicated);
            break;
    }
    s.role = ParamRole::QatScale;
    s.layer = w.layer;
    s.lora_base = w.role;
    return s;
}

// Appends the scales of the weights QAT quantizes after each layer's last parameter (and after
// the LM head), so a layer's gradients stay one contiguous range.
std::vector<ParamSpec> with_qat_scales(std::vector<ParamSpec> base, const ModelConfig& c,
                                       const QatSpec& q) {
    const std::vector<ParamRole> chosen = linear_roles(q.linears, c.arch);
    auto learns = [&](const ParamSpec& s) {
        if (s.role == ParamRole::LmHead) return q.quantizes_head();
        return param_is_decoder_linear(s) && q.quantizes_layer(s.layer, c.num_layers) &&
               std::find(chosen.begin(), chosen.end(), s.role) != chosen.end();
    };
    std::vector<ParamSpec> t, pending;
    for (size_t i = 0; i < base.size(); ++i) {
        t.push_back(base[i]);
        if (learns(base[i])) pending.push_back(scale_spec(base[i], q));
        const bool block_ends = i + 1 == base.size() || base[i + 1].layer != base[i].layer ||
                                base[i].role == ParamRole::LmHead;
        if (block_ends) {
            for (ParamSpec& s : pending) t.push_back(std::move(s));
            pending.clear();
        }
    }
    return t;
}

}  // namespace

std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp) {
    return param_specs(c, mp, LoraSpec{});
}

std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp,
                                   const LoraSpec& lora) {
    return param_specs(c, mp, lora, QatSpec{});
}

std::string qat_scale_name(const std::string& weight) {
    return weight + "_scale_factor";
}

bool param_in_hf_model(const ParamSpec& s) {
    return s.role != ParamRole::LoraA && s.role != ParamRole::LoraB &&
           s.role != ParamRole::QatScale;
}

std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp,
                                   const LoraSpec& lora, const QatSpec& qat) {
    check_lora_spec(lora, c);
    ETE_CHECK(!(qat.enabled && qat.learnable_scale && lora.enabled),
              "qat.learnable_scale: a LoRA run's weights are frozen (expected lora.enabled = "
              "false)");
    const ModelParallel m = mp.resolved(c);
    std::vector<ParamSpec> t;
    const int64_t V = c.vocab_size, C = c.hidden_size;
    const bool llama = c.family().llama_names();
    if (m.first_stage()) {
        t.push_back(embedding_spec(c));
        if (!c.family().rope) {
            t.push_back(spec("wpe.weight", {int64_t(c.max_position_embeddings), C},
                             ParamKind::Embedding, ParamInit::Normal, float(c.initializer_range),
                             kReplicated));
            role(t, ParamRole::PosEmbed);
        }
    }
    for (int i = m.layer_begin; i < m.layer_end; ++i)
        llama ? llama_layer(t, c, i) : gpt2_layer(t, c, i);
    if (m.last_stage()) {
        const char* norm = llama ? "model.norm" : "ln_f";
        t.push_back(spec(fmt::format("{}.weight", norm), {C}, ParamKind::Norm,
                         c.family().norm_offset() != 0 ? ParamInit::Zeros : ParamInit::Ones, 0,
                         kReplicated));
        role(t, ParamRole::FinalNorm);
        if (c.family().norm == NormKind::LayerNorm) {
            t.push_back(spec("ln_f.bias", {C}, ParamKind::Bias, ParamInit::Zeros, 0, kReplicated));
            role(t, ParamRole::FinalNormBias);
        }
        if (!c.family().always_tied && !c.tie_word_embeddings) {
            t.push_back(spec(kLmHeadName, {V, C}, ParamKind::Matrix, ParamInit::Normal,
                             float(c.initializer_range), kRowsPadded));
            role(t, ParamRole::LmHead);
        } else if (!m.first_stage()) {
            t.push_back(embedding_spec(c));  // GPT-2 always ties
            t.back().tied_copy = true;
        }
    }
    if (lora.enabled) t = with_lora(std::move(t), c, lora);
    if (qat.enabled && qat.learnable_scale && qat.has(QatPoint::Weight))
        t = with_qat_scales(std::move(t), c, qat);
    for (ParamSpec& s : t) {
        s.global_shape = s.shape;
        s.shape = shard_shape(s.shard, s.global_shape, m.tp_size);
    }
    return t;
}

bool param_is_decoder_linear(const ParamSpec& s) {
    return is_decoder_linear(s.role) && s.kind == ParamKind::Matrix;
}

bool param_decays(const ParamSpec& p) {
    return p.kind == ParamKind::Matrix;
}

}  // namespace ete
