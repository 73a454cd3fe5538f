// ete/model/config.cpp
#include "ete/model/config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/json_file.h"
#include "ete/model/config_keys.h"
#include "ete/model/config_rope.h"

namespace ete {

using json = nlohmann::json;

bool ModelConfig::has_qkv_bias() const {
    const BiasRule r = family().bias;
    return r == BiasRule::All || r == BiasRule::Qkv ||
           (r == BiasRule::FromConfig && attention_bias);
}

bool ModelConfig::has_o_bias() const {
    const BiasRule r = family().bias;
    return r == BiasRule::All || (r == BiasRule::FromConfig && attention_bias);
}

bool ModelConfig::has_mlp_bias() const {
    const BiasRule r = family().bias;
    return r == BiasRule::All || (r == BiasRule::FromConfig && mlp_bias);
}

float ModelConfig::attn_scale() const {
    return float(1.0 / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : double(D())));
}

void ModelConfig::use_family_defaults() {
    const Family& f = family();
    window_pattern = f.window == WindowRule::Pattern ? f.window_pattern : 0;
    attn_softcap = f.attn_softcap;
    final_softcap = f.final_softcap;
    rope_local_theta = f.local_rope ? 10000.0 : 0.0;
}

void ModelConfig::validate() const {
    auto pos = [](int v, const char* k) { ETE_CHECK(v > 0, "model.{} = {}: expected > 0", k, v); };
    pos(vocab_size, "vocab_size");
    pos(hidden_size, "hidden_size");
    pos(intermediate_size, "intermediate_size");
    pos(num_layers, "num_layers");
    pos(num_heads, "num_heads");
    pos(num_kv_heads, "num_kv_heads");
    pos(max_position_embeddings, "max_position_embeddings");
    ETE_CHECK(head_dim > 0 || hidden_size % num_heads == 0,
              "model.hidden_size = {} is not divisible by model.num_heads = {}", hidden_size,
              num_heads);
    ETE_CHECK(D() % 2 == 0 || !family().rope, "model.head_dim = {}: expected an even number", D());
    ETE_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1 &&
                  (!family().rope || (rotary_dim() >= 2 && rotary_dim() % 2 == 0)),
              "partial_rotary_factor = {}: expected (0, 1] leaving an even rotary width of at "
              "least 2 of head_dim {} (got {})",
              partial_rotary_factor, D(), rotary_dim());
    ETE_CHECK(num_heads % num_kv_heads == 0,
              "model.num_heads = {} is not a multiple of model.num_kv_heads = {}", num_heads,
              num_kv_heads);
    ETE_CHECK(family().layout != Layout::GPT2 || num_kv_heads == num_heads,
              "gpt2: model.num_kv_heads = {} with model.num_heads = {}: GPT-2 has no "
              "grouped-query attention (leave num_kv_heads unset, or equal to num_heads)",
              num_kv_heads, num_heads);
    ETE_CHECK(family().layout != Layout::GPT2 || D() * num_heads == hidden_size,
              "gpt2: model.head_dim = {} with model.num_heads = {}: expected head_dim * "
              "num_heads == hidden_size = {}",
              D(), num_heads, hidden_size);
    ETE_CHECK(sliding_window >= 0 && (sliding_window == 0 || family().window != WindowRule::None),
              "model.sliding_window = {}: expected 0{}", sliding_window,
              family().window != WindowRule::None ? " (none) or a window > 0"
                                                  : std::string(" for ") + family().name);
    ETE_CHECK(window_from_layer >= 0 && window_from_layer <= num_layers,
              "max_window_layers = {}: expected 0..{}", window_from_layer, num_layers);
    ETE_CHECK(
        window_pattern >= 0 && (window_pattern == 0 || family().window == WindowRule::Pattern),
        "sliding_window_pattern = {}: expected {}", window_pattern,
        family().window == WindowRule::Pattern ? "a period >= 1" : "none for this family");
    auto cap = [&](float v, const char* k) {
        ETE_CHECK(v >= 0 && std::isfinite(v) && (v == 0 || family().softcap_keys),
                  "{} = {}: expected {}", k, v,
                  family().softcap_keys ? "a finite number >= 0 (0: none)"
                                        : std::string("none for ") + family().name);
    };
    cap(attn_softcap, "attn_logit_softcapping");
    cap(final_softcap, "final_logit_softcapping");
    ETE_CHECK(query_pre_attn_scalar >= 0 && std::isfinite(query_pre_attn_scalar),
              "query_pre_attn_scalar = {}: expected a finite number > 0", query_pre_attn_scalar);
    ETE_CHECK(rope_local_theta == 0 || (rope_local_theta > 1 && std::isfinite(rope_local_theta)),
              "rope_local_base_freq = {}: expected a finite number > 1", rope_local_theta);
    const size_t pairs = size_t(rotary_dim() / 2);
    ETE_CHECK(rope_scaling.type != "longrope" || (rope_scaling.short_factor.size() == pairs &&
                                                  rope_scaling.long_factor.size() == pairs),
              "rope_scaling longrope: short_factor has {} and long_factor {} entries, expected {} "
              "each (rotary dims / 2)",
              rope_scaling.short_factor.size(), rope_scaling.long_factor.size(), pairs);
    ETE_CHECK(norm_eps > 0 && norm_eps < 1, "model.norm_eps = {}: expected in (0, 1)", norm_eps);
    ETE_CHECK(rope_theta > 1 && std::isfinite(rope_theta),
              "model.rope_theta = {}: expected a finite number > 1", rope_theta);
}

namespace {

int first_id(const json& j, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return -1;
    if (j[key].is_array()) return j[key].empty() ? -1 : j[key][0].get<int>();
    return j[key].get<int>();
}

// Every layer's type against what sliding_window, max_window_layers and the pattern make of it
// (the layer_types list newer files carry).
void check_layer_types(const ModelConfig& c, const json& j, const std::string& w) {
    if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
    const json& types = j["layer_types"];
    ETE_CHECK(types.is_array() && types.size() == size_t(c.num_layers),
              "{}: layer_types: expected a list of {} entries", w, c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
        const std::string want = c.layer_slides(l) ? "sliding_attention" : "full_attention";
        ETE_CHECK(types[size_t(l)] == want,
                  "{}: layer_types[{}] = {}: expected \"{}\" (from sliding_window and {}; "
                  "per-layer patterns are not supported for {})",
                  w, l, types[size_t(l)].dump(), want,
                  c.window_pattern > 0 ? "sliding_window_pattern" : "max_window_layers",
                  c.family().model_type);
    }
}

// Gemma: a window on all layers but each pattern-th. The period comes from layer_types (the
// index of its first full_attention layer, plus one) or sliding_window_pattern, else the
// family's; HF's classes default sliding_window to 4096.
void read_window_pattern(ModelConfig& c, const json& j, const std::string& w) {
    if (j.contains("sliding_window") && j["sliding_window"].is_null()) {
        c.window_pattern = 0;  // no window: every layer global
        return;
    }
    c.window_pattern = json_get(j, "sliding_window_pattern", c.family().window_pattern, w);
    ETE_CHECK(c.window_pattern >= 1, "{}: sliding_window_pattern = {}: expected >= 1", w,
              c.window_pattern);
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
        // Its first full layer sets the period; none (all local) keeps a period past the last
        // layer (Gemma 3's 6 on a model of 5 layers or fewer), else none.
        const json& types = j["layer_types"];
        int period = 0;
        for (size_t l = 0; l < types.size() && period == 0; ++l)
            if (types[l] == "full_attention") period = int(l) + 1;
        if (period > 0) {
            c.window_pattern = period;
        } else if (c.window_pattern <= c.num_layers) {
            c.window_pattern = 0;
        }
    }
    c.sliding_window = json_get(j, "sliding_window", 4096, w);
    ETE_CHECK(c.sliding_window > 0, "{}: sliding_window = {}: expected > 0 or null", w,
              c.sliding_window);
    check_layer_types(c, j, w);
}

// The attention window of a Llama-layout family (family().window): Mistral's sliding_window
// (null: none) on every layer; Qwen2's and Qwen3's when use_sliding_window, on the layers from
// max_window_layers (the layer_types list newer files carry must agree).
void read_window(ModelConfig& c, const json& j, const std::string& w) {
    if (c.family().window == WindowRule::Pattern) return read_window_pattern(c, j, w);
    const bool from_layer = c.family().window == WindowRule::FromMaxWindowLayers;
    if (from_layer && !json_get(j, "use_sliding_window", false, w)) return;
    if (!j.contains("sliding_window") || j["sliding_window"].is_null()) return;
    c.sliding_window = json_get<int>(j, "sliding_window", 0, w);
    ETE_CHECK(c.sliding_window > 0, "{}: sliding_window = {}: expected > 0 or null", w,
              c.sliding_window);
    if (from_layer) c.window_from_layer = json_get(j, "max_window_layers", 28, w);
    c.window_from_layer = std::min(c.window_from_layer, c.num_layers);
    check_layer_types(c, j, w);
}

// Newer files' rope_parameters: one dict, or (Gemma 3) one per layer type, the local one
// unscaled.
void read_rope_parameters(ModelConfig& c, const json& rp, int original, const std::string& w) {
    auto parse = [&](const json& r) {
        return parse_rope_scaling(r, c.max_position_embeddings, original, w);
    };
    if (!rp.contains("full_attention") && !rp.contains("sliding_attention")) {
        c.rope_theta = json_get(rp, "rope_theta", c.rope_theta, w);
        c.partial_rotary_factor = json_get(rp, "partial_rotary_factor", c.partial_rotary_factor, w);
        c.rope_scaling = parse(rp);
        return;
    }
    ETE_CHECK(
        c.family().local_rope && rp.contains("full_attention") && rp["full_attention"].is_object(),
        "{}: rope_parameters per layer type: expected a full_attention dict, and per-type "
        "parameters only for gemma3_text",
        w);
    c.rope_theta = json_get(rp["full_attention"], "rope_theta", c.rope_theta, w);
    c.rope_scaling = parse(rp["full_attention"]);
    if (!rp.contains("sliding_attention")) return;
    const json& local = rp["sliding_attention"];
    ETE_CHECK(local.is_object() && parse(local).type == "default",
              "{}: rope_parameters.sliding_attention: expected unscaled (rope_type default)", w);
    c.rope_local_theta = json_get(local, "rope_theta", 10000.0, w);
}

// Rope settings: newer files use one rope_parameters dict, older ones rope_theta + rope_scaling
// (with `type` or `rope_type`) and partial_rotary_factor; Phi-3 keeps the original context
// top-level.
void read_rope(ModelConfig& c, const json& j, const std::string& w) {
    c.rope_theta = json_get(j, "rope_theta", 10000.0, w);
    c.partial_rotary_factor = json_get(j, "partial_rotary_factor", 1.0, w);
    const int original = json_get(j, "original_max_position_embeddings", 0, w);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
        read_rope_parameters(c, j["rope_parameters"], original, w);
    } else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
        c.rope_scaling =
            parse_rope_scaling(j["rope_scaling"], c.max_position_embeddings, original, w);
    }
}

// A soft-cap: null = none.
float read_cap(const json& j, const char* key, float dflt, const std::string& w) {
    if (j.contains(key) && j[key].is_null()) return 0.0f;
    return float(json_get<double>(j, key, dflt, w));
}

// Gemma's soft-caps, attention scale and (Gemma 3) local RoPE base, with HF's class defaults.
void read_gemma_keys(ModelConfig& c, const json& j, const std::string& w) {
    const Family& f = c.family();
    c.attn_softcap = read_cap(j, "attn_logit_softcapping", f.attn_softcap, w);
    c.final_softcap = read_cap(j, "final_logit_softcapping", f.final_softcap, w);
    c.query_pre_attn_scalar = json_get(j, "query_pre_attn_scalar", 256.0, w);
    ETE_CHECK(c.query_pre_attn_scalar > 0, "{}: query_pre_attn_scalar = {}: expected > 0", w,
              c.query_pre_attn_scalar);
    if (f.local_rope && c.rope_local_theta == 0)
        c.rope_local_theta = json_get(j, "rope_local_base_freq", 10000.0, w);
    // Gemma 3 as an encoder (EmbeddingGemma) attends both ways: not a decoder ETE trains.
    ETE_CHECK(!json_get(j, "use_bidirectional_attention", false, w),
              "{}: use_bidirectional_attention = true is not supported (a decoder attends "
              "causally)",
              w);
}

// Llama, Qwen2, Qwen3, Mistral, Gemma 2 and 3: the same keys, but for biases, the window and
// Gemma's own.
ModelConfig llama_layout_from_json(Arch arch, const json& j, const std::string& w) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = json_get(j, "vocab_size", 32000, w, false);
    c.hidden_size = json_get(j, "hidden_size", 4096, w, false);
    c.intermediate_size = json_get(j, "intermediate_size", 11008, w, false);
    c.num_layers = json_get(j, "num_hidden_layers", 32, w, false);
    c.num_heads = json_get(j, "num_attention_heads", 32, w, false);
    c.num_kv_heads = json_get(j, "num_key_value_heads", c.num_heads, w);
    c.head_dim =
        j.contains("head_dim") && j["head_dim"].is_null() ? 0 : json_get(j, "head_dim", 0, w);
    c.max_position_embeddings = json_get(j, "max_position_embeddings", 2048, w, false);
    c.norm_eps = json_get(j, "rms_norm_eps", 1e-6, w);
    c.tie_word_embeddings = json_get(j, "tie_word_embeddings", false, w);
    // The other families' classes have no such keys (HF ignores them); Qwen3 has attention_bias.
    if (c.family().bias == BiasRule::FromConfig)
        c.attention_bias = json_get(j, "attention_bias", false, w);
    if (arch == Arch::Llama) c.mlp_bias = json_get(j, "mlp_bias", false, w);
    c.initializer_range = json_get(j, "initializer_range", 0.02, w);
    // Gemma's classes read hidden_activation (any hidden_act beside it is unused).
    const bool geglu = c.family().mlp == MlpKind::GeGLU;
    const char* act_key = geglu ? "hidden_activation" : "hidden_act";
    const char* want = geglu ? "gelu_pytorch_tanh" : "silu";
    std::string act = json_get<std::string>(j, act_key, want, w);
    ETE_CHECK(act == want, "{}: {} '{}' is not supported (expected {})", w, act_key, act, want);
    // Dropout changes what training computes; ETE has none (Phi-3 also names its residual and
    // embedding dropout).
    for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) {
        const double drop = json_get(j, key, 0.0, w);
        ETE_CHECK(drop == 0.0, "{}: {} = {} is not supported (expected 0: ETE has no dropout)", w,
                  key, drop);
    }
    read_rope(c, j, w);
    if (c.family().window != WindowRule::None) read_window(c, j, w);
    if (c.family().softcap_keys) read_gemma_keys(c, j, w);
    return c;
}

ModelConfig gpt2_from_json(const json& j, const std::string& w) {
    ModelConfig c;
    c.arch = Arch::GPT2;
    c.vocab_size = json_get(j, "vocab_size", 50257, w);
    c.hidden_size = json_get(j, "n_embd", 768, w);
    c.num_layers = json_get(j, "n_layer", 12, w);
    c.num_heads = json_get(j, "n_head", 12, w);
    c.num_kv_heads = c.num_heads;
    c.intermediate_size = json_get(j, "n_inner", 4 * c.hidden_size, w);
    c.max_position_embeddings = json_get(j, "n_positions", 1024, w);
    c.norm_eps = json_get(j, "layer_norm_epsilon", 1e-5, w);
    c.tie_word_embeddings = true;
    c.initializer_range = json_get(j, "initializer_range", 0.02, w);
    // Settings of GPT2Config that change the maths and that ETE does not implement: an untied
    // head (its lm_head.weight would be ignored), unscaled or layer-scaled attention scores.
    ETE_CHECK(json_get(j, "tie_word_embeddings", true, w),
              "{}: tie_word_embeddings = false is not supported for gpt2 (the LM head is the "
              "token embedding)",
              w);
    ETE_CHECK(json_get(j, "scale_attn_weights", true, w),
              "{}: scale_attn_weights = false is not supported (expected true: scores scaled by "
              "1/sqrt(head_dim))",
              w);
    ETE_CHECK(!json_get(j, "scale_attn_by_inverse_layer_idx", false, w),
              "{}: scale_attn_by_inverse_layer_idx = true is not supported (expected false)", w);
    std::string act = json_get<std::string>(j, "activation_function", "gelu_new", w);
    ETE_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
              "{}: activation_function '{}' is not supported (expected gelu_new)", w, act);
    return c;
}

}  // namespace

ModelConfig config_from_hf_json(const json& j, const std::string& where) {
    ETE_CHECK(j.is_object(), "{}: expected a JSON object", where);
    std::string type = json_get<std::string>(j, "model_type", "", where);
    const Family* f = family_of_model_type(type);
    ETE_CHECK(type != "gemma3",
              "{}: model_type 'gemma3' is Gemma 3's vision-language model: ETE trains its text "
              "model (model_type gemma3_text, the 1B checkpoint's; the vision tower is not "
              "supported)",
              where);
    if (!f) {
        std::string types;
        for (const Family& x : families())
            types += fmt::format("{}{}", types.empty() ? "" : ", ", x.model_type);
        throw_error(
            fmt::format("{}: model_type '{}' is not supported (expected {})", where, type, types));
    }
    check_config_keys(*f, j, where);
    ModelConfig c = f->layout == Layout::GPT2 ? gpt2_from_json(j, where)
                                              : llama_layout_from_json(f->arch, j, where);
    c.bos_token_id = first_id(j, "bos_token_id");
    c.eos_token_id = first_id(j, "eos_token_id");
    c.validate();
    return c;
}

namespace {

// Gemma's window (layer_types for current Hugging Face, sliding_window_pattern for Gemma 3's
// first releases), soft-caps, attention scale and local RoPE base.
void gemma_keys_to_json(json& j, const ModelConfig& c) {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    if (c.arch == Arch::Gemma3 && c.window_pattern > 0)
        j["sliding_window_pattern"] = c.window_pattern;
    json types = json::array();
    for (int l = 0; l < c.num_layers; ++l)
        types.push_back(c.layer_slides(l) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    auto cap = [](float v) { return v > 0 ? json(v) : json(nullptr); };
    j["attn_logit_softcapping"] = cap(c.attn_softcap);
    j["final_logit_softcapping"] = cap(c.final_softcap);
    j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : c.D();
    if (c.family().local_rope) j["rope_local_base_freq"] = c.rope_local_theta;
}

json llama_layout_to_json(const ModelConfig& c) {
    const Family& f = c.family();
    json j = {{"architectures", {f.hf_class}},
              {"model_type", f.model_type},
              {"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"head_dim", c.D()},
              {f.mlp == MlpKind::GeGLU ? "hidden_activation" : "hidden_act",
               f.mlp == MlpKind::GeGLU ? "gelu_pytorch_tanh" : "silu"},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rms_norm_eps", c.norm_eps},
              {"rope_theta", c.rope_theta},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"initializer_range", c.initializer_range},
              {"torch_dtype", "float32"}};
    if (f.bias == BiasRule::FromConfig) j["attention_bias"] = c.attention_bias;
    if (c.arch == Arch::Llama) j["mlp_bias"] = c.mlp_bias;
    if (f.window == WindowRule::FromMaxWindowLayers) {
        j["use_sliding_window"] = c.sliding_window > 0;
        j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
        j["max_window_layers"] = c.sliding_window > 0 ? c.window_from_layer : c.num_layers;
    } else if (f.window == WindowRule::AllLayers) {
        j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    } else if (f.window == WindowRule::Pattern) {
        gemma_keys_to_json(j, c);
    }
    j["rope_scaling"] = rope_scaling_to_json(c.rope_scaling, c.max_position_embeddings);
    const RopeScaling& rs = c.rope_scaling;
    if (rs.type == "longrope" || rs.type == "yarn" || c.arch == Arch::Phi3)
        j["original_max_position_embeddings"] = rs.type == "longrope" || rs.type == "yarn"
                                                    ? rs.original_max_position_embeddings
                                                    : c.max_position_embeddings;
    if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
    return j;
}

json gpt2_to_json(const ModelConfig& c) {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.vocab_size},
            {"n_embd", c.hidden_size},
            {"n_layer", c.num_layers},
            {"n_head", c.num_heads},
            {"n_inner", c.intermediate_size},
            {"n_positions", c.max_position_embeddings},
            {"n_ctx", c.max_position_embeddings},
            {"layer_norm_epsilon", c.norm_eps},
            {"activation_function", "gelu_new"},
            {"initializer_range", c.initializer_range},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
}

}  // namespace

json config_to_hf_json(const ModelConfig& c) {
    json j = c.family().layout == Layout::GPT2 ? gpt2_to_json(c) : llama_layout_to_json(c);
    if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
    return j;
}

}  // namespace ete
