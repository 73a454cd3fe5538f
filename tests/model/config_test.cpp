// tests/model/config_test.cpp — HF config.json parsing: defaults, the three spellings of rope
// settings, and errors that name the field.
#include <gtest/gtest.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/model/config.h"
#include "ete/model/param_spec.h"
#include "test_util.h"

namespace ete {
namespace {

using json = nlohmann::json;

json llama(json extra) {
    json j = {{"model_type", "llama"},  {"hidden_size", 64},        {"intermediate_size", 96},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 100}};
    j.update(extra);
    return j;
}

TEST(HfConfig, LlamaDefaultsFollowLlamaConfig) {
    ModelConfig c = config_from_hf_json(llama({{"bos_token_id", {5, 6}}}), "c.json");
    EXPECT_EQ(c.num_kv_heads, 4);  // = num_attention_heads when absent
    EXPECT_EQ(c.D(), 16);          // hidden / heads when head_dim is absent
    EXPECT_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.norm_eps, 1e-6);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.rope_scaling.type, "default");
    EXPECT_EQ(c.bos_token_id, 5);  // a list takes its first id
}

TEST(HfConfig, RopeSettingsInAllThreeSpellings) {
    json scaling = {{"factor", 32.0},
                    {"low_freq_factor", 2.0},
                    {"high_freq_factor", 8.0},
                    {"original_max_position_embeddings", 4096}};
    json old_style = scaling, new_style = scaling, params = scaling;
    old_style["type"] = "llama3";
    new_style["rope_type"] = "llama3";
    params["rope_type"] = "llama3";
    params["rope_theta"] = 500000.0;
    for (const json& cfg : {llama({{"rope_scaling", old_style}, {"rope_theta", 500000.0}}),
                            llama({{"rope_scaling", new_style}, {"rope_theta", 500000.0}}),
                            llama({{"rope_parameters", params}})}) {
        ModelConfig c = config_from_hf_json(cfg, "c.json");
        EXPECT_EQ(c.rope_scaling.type, "llama3") << cfg.dump();
        EXPECT_EQ(c.rope_scaling.factor, 32.0);
        EXPECT_EQ(c.rope_scaling.low_freq_factor, 2.0);
        EXPECT_EQ(c.rope_scaling.high_freq_factor, 8.0);
        EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
        EXPECT_EQ(c.rope_theta, 500000.0);
    }
    // A "default" rope_parameters dict only carries theta.
    ModelConfig d = config_from_hf_json(
        llama({{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}), "c.json");
    EXPECT_EQ(d.rope_scaling.type, "default");
    EXPECT_EQ(d.rope_theta, 1e6);
}

TEST(HfConfig, ErrorsNameTheField) {
    auto message = [](const json& j) {
        try {
            config_from_hf_json(j, "c.json");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(message(llama({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}}}}))
                  .find("rope type 'dynamic' is not implemented"),
              std::string::npos);
    EXPECT_NE(message(llama({{"num_key_value_heads", 3}})).find("not a multiple of"),
              std::string::npos);
    EXPECT_NE(message(llama({{"hidden_size", "big"}}))
                  .find("field 'hidden_size' = \"big\": expected an integer"),
              std::string::npos);
    // Narrowed silently before: out of int range, a float or a boolean where an integer
    // belongs, null for a size, a non-finite or absurd rope setting.
    for (const auto& [field, value, want] : std::vector<std::tuple<const char*, json, const char*>>{
             {"hidden_size", json(4294967424LL),
              "field 'hidden_size' = 4294967424: expected an "
              "int in range"},
             {"intermediate_size", json(2.5),
              "field 'intermediate_size' = 2.5: expected an "
              "integer"},
             {"num_hidden_layers", json(true),
              "field 'num_hidden_layers' = true: expected an "
              "integer"},
             {"vocab_size", json(nullptr), "field 'vocab_size' = null: expected a value"},
             {"tie_word_embeddings", json(1),
              "field 'tie_word_embeddings' = 1: expected true or "
              "false"},
             {"rope_theta", json(0.5), "model.rope_theta = 0.5: expected a finite number > 1"}}) {
        const std::string m = message(llama({{field, value}}));
        EXPECT_NE(m.find(want), std::string::npos) << field << ": " << m;
    }
    EXPECT_NE(
        message(
            llama(
                {{"rope_scaling",
                  {{"rope_type", "llama3"}, {"low_freq_factor", 4.0}, {"high_freq_factor", 4.0}}}}))
            .find("expected factor >= 1, 0 < low < high"),
        std::string::npos);
    EXPECT_NE(message(json{{"model_type", "mamba"}}).find("model_type 'mamba' is not supported"),
              std::string::npos);
    EXPECT_NE(message(llama({{"hidden_act", "gelu"}})).find("hidden_act 'gelu'"),
              std::string::npos);
}

TEST(HfConfig, RoundTripThroughConfigJson) {
    ModelConfig c = config_from_hf_json(
        llama({{"num_key_value_heads", 2}, {"head_dim", 32}, {"tie_word_embeddings", true}}),
        "c.json");
    ModelConfig back = config_from_hf_json(config_to_hf_json(c), "back.json");
    EXPECT_EQ(back.num_kv_heads, 2);
    EXPECT_EQ(back.D(), 32);
    EXPECT_TRUE(back.tie_word_embeddings);
    EXPECT_EQ(config_to_hf_json(back), config_to_hf_json(c));
}

// Qwen2.5-0.5B's config.json (the keys that matter; published values): a window that is off
// (use_sliding_window false) is no window; q/k/v have biases, o_proj and the MLP none.
json qwen25_05b() {
    return {{"architectures", {"Qwen2ForCausalLM"}},
            {"model_type", "qwen2"},
            {"attention_dropout", 0.0},
            {"bos_token_id", 151643},
            {"eos_token_id", 151643},
            {"hidden_act", "silu"},
            {"hidden_size", 896},
            {"initializer_range", 0.02},
            {"intermediate_size", 4864},
            {"max_position_embeddings", 32768},
            {"max_window_layers", 24},
            {"num_attention_heads", 14},
            {"num_hidden_layers", 24},
            {"num_key_value_heads", 2},
            {"rms_norm_eps", 1e-06},
            {"rope_theta", 1000000.0},
            {"sliding_window", 32768},
            {"tie_word_embeddings", true},
            {"torch_dtype", "bfloat16"},
            {"use_cache", true},
            {"use_sliding_window", false},
            {"vocab_size", 151936}};
}

TEST(HfConfig, Qwen2ReadsBiasesAndItsWindowSwitch) {
    ModelConfig c = config_from_hf_json(qwen25_05b(), "qwen.json");
    EXPECT_EQ(c.arch, Arch::Qwen2);
    EXPECT_EQ(c.D(), 64);
    EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false
    EXPECT_TRUE(c.has_qkv_bias());
    EXPECT_FALSE(c.has_o_bias());
    EXPECT_FALSE(c.has_mlp_bias());
    EXPECT_TRUE(c.tie_word_embeddings);
    json on = qwen25_05b();
    on["use_sliding_window"] = true;
    on["sliding_window"] = 4096;
    on["max_window_layers"] = 20;
    ModelConfig w = config_from_hf_json(on, "qwen.json");
    EXPECT_EQ(w.sliding_window, 4096);
    EXPECT_FALSE(w.layer_slides(19));
    EXPECT_TRUE(w.layer_slides(20));
    // Saved back: the same model_type, class and keys, no Llama-only ones.
    const json j = config_to_hf_json(w);
    EXPECT_EQ(j["model_type"], "qwen2");
    EXPECT_EQ(j["architectures"], json::array({"Qwen2ForCausalLM"}));
    EXPECT_EQ(j["use_sliding_window"], true);
    EXPECT_EQ(j["sliding_window"], 4096);
    EXPECT_EQ(j["max_window_layers"], 20);
    EXPECT_FALSE(j.contains("attention_bias"));
    ModelConfig back = config_from_hf_json(j, "back.json");
    EXPECT_EQ(back.window_from_layer, 20);
    EXPECT_EQ(back.sliding_window, 4096);
    // A layer_types list (newer files) must say the same; a pattern ETE cannot express is refused.
    on["layer_types"] = json::array();
    for (int l = 0; l < 24; ++l)
        on["layer_types"].push_back(l < 20 ? "full_attention" : "sliding_attention");
    EXPECT_EQ(config_from_hf_json(on, "qwen.json").sliding_window, 4096);
    on["layer_types"][3] = "sliding_attention";
    EXPECT_EQ(
        error_of([&] { config_from_hf_json(on, "qwen.json"); }),
        "qwen.json: layer_types[3] = \"sliding_attention\": expected \"full_attention\" (from "
        "sliding_window and max_window_layers; per-layer patterns are not supported for "
        "qwen2)");
}

TEST(HfConfig, MistralWindowIsNullOrALength) {
    json v01 = {{"architectures", {"MistralForCausalLM"}},
                {"model_type", "mistral"},
                {"hidden_size", 4096},
                {"intermediate_size", 14336},
                {"num_hidden_layers", 32},
                {"num_attention_heads", 32},
                {"num_key_value_heads", 8},
                {"max_position_embeddings", 32768},
                {"rms_norm_eps", 1e-05},
                {"rope_theta", 10000.0},
                {"sliding_window", 4096},
                {"vocab_size", 32000}};
    ModelConfig c = config_from_hf_json(v01, "m.json");
    EXPECT_EQ(c.arch, Arch::Mistral);
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_TRUE(c.layer_slides(0));
    EXPECT_FALSE(c.has_qkv_bias() || c.has_o_bias() || c.has_mlp_bias());
    v01["sliding_window"] = nullptr;  // v0.2 and later
    EXPECT_EQ(config_from_hf_json(v01, "m.json").sliding_window, 0);
    const json j = config_to_hf_json(c);
    EXPECT_EQ(j["model_type"], "mistral");
    EXPECT_EQ(j["architectures"], json::array({"MistralForCausalLM"}));
    EXPECT_EQ(j["sliding_window"], 4096);
    EXPECT_FALSE(j.contains("attention_bias") || j.contains("use_sliding_window"));
    // Settings ETE does not implement are refused, not ignored.
    v01["attention_dropout"] = 0.1;
    EXPECT_EQ(error_of([&] { config_from_hf_json(v01, "m.json"); }),
              "m.json: attention_dropout = 0.1 is not supported (expected 0: ETE has no dropout)");
    v01["attention_dropout"] = 0.0;
    v01["sliding_window"] = 0;
    EXPECT_EQ(error_of([&] { config_from_hf_json(v01, "m.json"); }),
              "m.json: sliding_window = 0: expected > 0 or null");
}

// Qwen3-0.6B's config.json (published values): explicit head_dim (H·D = 2048 != hidden 1024),
// per-head q/k norms of head_dim, attention_bias for q/k/v/o, no MLP bias key.
TEST(HfConfig, Qwen3HasHeadNormsAndAttentionBias) {
    json j = {{"architectures", {"Qwen3ForCausalLM"}},
              {"model_type", "qwen3"},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"head_dim", 128},
              {"hidden_act", "silu"},
              {"hidden_size", 1024},
              {"intermediate_size", 3072},
              {"max_position_embeddings", 40960},
              {"max_window_layers", 28},
              {"num_attention_heads", 16},
              {"num_hidden_layers", 28},
              {"num_key_value_heads", 8},
              {"rms_norm_eps", 1e-06},
              {"rope_scaling", nullptr},
              {"rope_theta", 1000000},
              {"sliding_window", nullptr},
              {"tie_word_embeddings", true},
              {"use_sliding_window", false},
              {"vocab_size", 151936}};
    ModelConfig c = config_from_hf_json(j, "qwen3.json");
    EXPECT_EQ(c.arch, Arch::Qwen3);
    EXPECT_EQ(c.D(), 128);
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_FALSE(c.has_qkv_bias() || c.has_o_bias() || c.has_mlp_bias());
    int norms = 0;
    for (const ParamSpec& s : param_specs(c))
        if (s.role == ParamRole::QNorm || s.role == ParamRole::KNorm) {
            EXPECT_EQ(s.shape, (Shape{128})) << s.name;
            ++norms;
        }
    EXPECT_EQ(norms, 2 * 28);
    j["attention_bias"] = true;
    ModelConfig b = config_from_hf_json(j, "qwen3.json");
    EXPECT_TRUE(b.has_qkv_bias() && b.has_o_bias());
    EXPECT_FALSE(b.has_mlp_bias());
    const json back = config_to_hf_json(b);
    EXPECT_EQ(back["model_type"], "qwen3");
    EXPECT_EQ(back["attention_bias"], true);
    EXPECT_FALSE(back.contains("mlp_bias"));
    EXPECT_EQ(back["use_sliding_window"], false);
}

// gemma-2-2b's config.json (published values): soft-caps 50 and 30, query_pre_attn_scalar and
// head_dim 256 (H·D = 2048 != hidden 2304), alternating local (first) and global layers with no
// key saying so, hidden_act beside hidden_activation.
TEST(HfConfig, Gemma2ReadsSoftCapsAndAlternatesWindows) {
    json j = {{"architectures", {"Gemma2ForCausalLM"}},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"attn_logit_softcapping", 50.0},
              {"bos_token_id", 2},
              {"cache_implementation", "hybrid"},
              {"eos_token_id", 1},
              {"final_logit_softcapping", 30.0},
              {"head_dim", 256},
              {"hidden_act", "gelu_pytorch_tanh"},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"hidden_size", 2304},
              {"initializer_range", 0.02},
              {"intermediate_size", 9216},
              {"max_position_embeddings", 8192},
              {"model_type", "gemma2"},
              {"num_attention_heads", 8},
              {"num_hidden_layers", 26},
              {"num_key_value_heads", 4},
              {"pad_token_id", 0},
              {"query_pre_attn_scalar", 256},
              {"rms_norm_eps", 1e-06},
              {"rope_theta", 10000.0},
              {"sliding_window", 4096},
              {"vocab_size", 256000}};
    const ModelConfig c = config_from_hf_json(j, "gemma2.json");
    EXPECT_EQ(c.arch, Arch::Gemma2);
    EXPECT_EQ(c.D(), 256);
    EXPECT_EQ(c.attn_softcap, 50.0f);
    EXPECT_EQ(c.final_softcap, 30.0f);
    EXPECT_EQ(c.attn_scale(), 1.0f / 16.0f);
    EXPECT_TRUE(c.layer_slides(0) && !c.layer_slides(1) && c.layer_slides(24));
    EXPECT_EQ(c.window_of(2), 4096);
    EXPECT_EQ(c.window_of(25), 0);
    EXPECT_FALSE(c.local_rope(0));
    EXPECT_EQ(c.eos_token_id, 1);
    // Layer 0's norms: four (1 + w) norms starting at 0, the MLP's input named pre_feedforward.
    std::vector<std::string> norms;
    for (const ParamSpec& s : param_specs(c))
        if (s.layer == 0 && s.kind == ParamKind::Norm) {
            norms.push_back(s.name);
            EXPECT_EQ(s.init, ParamInit::Zeros) << s.name;
        }
    EXPECT_EQ(norms,
              (std::vector<std::string>{"model.layers.0.input_layernorm.weight",
                                        "model.layers.0.post_attention_layernorm.weight",
                                        "model.layers.0.pre_feedforward_layernorm.weight",
                                        "model.layers.0.post_feedforward_layernorm.weight"}));
    // Written back with the same keys, read back the same.
    const json back = config_to_hf_json(c);
    EXPECT_EQ(back["hidden_activation"], "gelu_pytorch_tanh");
    EXPECT_EQ(back["layer_types"][0], "sliding_attention");
    EXPECT_EQ(back["layer_types"][1], "full_attention");
    const ModelConfig again = config_from_hf_json(back, "back.json");
    EXPECT_EQ(again.window_pattern, 2);
    EXPECT_EQ(again.final_softcap, 30.0f);
    EXPECT_EQ(again.query_pre_attn_scalar, 256);
    // Errors name the key.
    j["hidden_activation"] = "gelu";
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "gemma2.json"); }),
              "gemma2.json: hidden_activation 'gelu' is not supported (expected "
              "gelu_pytorch_tanh)");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["layer_types"] = json::array();
    for (int l = 0; l < 26; ++l) j["layer_types"].push_back("sliding_attention");
    j["layer_types"][3] = "full_attention";  // a period of 4: layer 7 must be full
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "gemma2.json"); }),
              "gemma2.json: layer_types[7] = \"sliding_attention\": expected \"full_attention\" "
              "(from sliding_window and sliding_window_pattern; per-layer patterns are not "
              "supported for gemma2)");
}

// gemma-3-1b's config.json (published values): five local layers (window 512, RoPE base 1e4)
// per global one (1e6), null soft-caps, eos a list; the vision-language model_type is refused.
TEST(HfConfig, Gemma3ReadsItsLayerPatternAndLocalRope) {
    json j = {{"architectures", {"Gemma3ForCausalLM"}},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"attn_logit_softcapping", nullptr},
              {"bos_token_id", 2},
              {"cache_implementation", "hybrid"},
              {"eos_token_id", {1, 106}},
              {"final_logit_softcapping", nullptr},
              {"head_dim", 256},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"hidden_size", 1152},
              {"initializer_range", 0.02},
              {"intermediate_size", 6912},
              {"max_position_embeddings", 32768},
              {"model_type", "gemma3_text"},
              {"num_attention_heads", 4},
              {"num_hidden_layers", 26},
              {"num_key_value_heads", 1},
              {"pad_token_id", 0},
              {"query_pre_attn_scalar", 256},
              {"rms_norm_eps", 1e-06},
              {"rope_local_base_freq", 10000},
              {"rope_scaling", nullptr},
              {"rope_theta", 1000000},
              {"sliding_window", 512},
              {"sliding_window_pattern", 6},
              {"vocab_size", 262144}};
    const ModelConfig c = config_from_hf_json(j, "gemma3.json");
    EXPECT_EQ(c.arch, Arch::Gemma3);
    EXPECT_EQ(c.attn_softcap, 0.0f);
    EXPECT_EQ(c.final_softcap, 0.0f);
    EXPECT_EQ(c.rope_local_theta, 10000.0);
    for (int l = 0; l < 26; ++l) {
        EXPECT_EQ(c.layer_slides(l), l % 6 != 5) << l;
        EXPECT_EQ(c.local_rope(l), l % 6 != 5) << l;
    }
    EXPECT_EQ(c.eos_token_id, 1);
    int qk = 0;
    for (const ParamSpec& s : param_specs(c))
        qk += s.role == ParamRole::QNorm || s.role == ParamRole::KNorm;
    EXPECT_EQ(qk, 2 * 26);
    const ModelConfig again = config_from_hf_json(config_to_hf_json(c), "back.json");
    EXPECT_EQ(again.window_pattern, 6);
    EXPECT_EQ(again.rope_local_theta, 10000.0);
    EXPECT_EQ(again.sliding_window, 512);
    // Without a window every layer is global, and the saved config reads back so.
    ModelConfig none = c;
    none.sliding_window = 0;
    none.window_pattern = 0;
    const ModelConfig none_back = config_from_hf_json(config_to_hf_json(none), "none.json");
    EXPECT_EQ(none_back.sliding_window, 0);
    EXPECT_FALSE(none_back.layer_slides(0) || none_back.local_rope(0));
    // The 4B+ models' linear scaling of the global layers; newer files' per-type rope_parameters.
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    EXPECT_EQ(config_from_hf_json(j, "gemma3.json").rope_scaling.type, "linear");
    j.erase("rope_scaling");
    j.erase("rope_theta");
    j.erase("rope_local_base_freq");
    j["rope_parameters"] = {
        {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
    const ModelConfig p = config_from_hf_json(j, "gemma3.json");
    EXPECT_EQ(p.rope_theta, 1e6);
    EXPECT_EQ(p.rope_scaling.factor, 8.0);
    EXPECT_EQ(p.rope_local_theta, 1e4);
    j["model_type"] = "gemma3";
    EXPECT_NE(error_of([&] {
                  config_from_hf_json(j, "gemma3.json");
              }).find("model_type 'gemma3' is Gemma 3's vision-language model"),
              std::string::npos);
    j["model_type"] = "gemma3_text";
    j["use_bidirectional_attention"] = true;
    EXPECT_NE(error_of([&] {
                  config_from_hf_json(j, "gemma3.json");
              }).find("use_bidirectional_attention = true is not supported"),
              std::string::npos);
}

// GPT2Config's settings that change the maths: refused by name, never ignored.
TEST(HfConfig, Gpt2SettingsEteDoesNotImplementAreRefused) {
    const json base = {{"model_type", "gpt2"}, {"n_embd", 32}, {"n_layer", 2}, {"n_head", 4}};
    EXPECT_EQ(config_from_hf_json(base, "g.json").arch, Arch::GPT2);
    for (const auto& [key, value] :
         {std::pair{"tie_word_embeddings", false}, std::pair{"scale_attn_weights", false},
          std::pair{"scale_attn_by_inverse_layer_idx", true}}) {
        json j = base;
        j[key] = value;
        EXPECT_EQ(error_of([&] {
                      config_from_hf_json(j, "g.json");
                  }).rfind(fmt::format("g.json: {} = {} is not supported", key, value), 0),
                  0u)
            << key;
    }
}

TEST(HfConfig, AnUnknownModelTypeListsTheFamilies) {
    EXPECT_EQ(error_of([] {
                  config_from_hf_json(json{{"model_type", "phimoe"}}, "c.json");
              }),
              "c.json: model_type 'phimoe' is not supported (expected llama, gpt2, qwen2, "
              "mistral, qwen3, gemma2, gemma3_text, phi3)");
    ModelConfig c = config_from_hf_json(llama(json::object()), "c.json");
    c.sliding_window = 8;  // a Llama has no window
    EXPECT_EQ(error_of([&] { c.validate(); }), "model.sliding_window = 8: expected 0 for llama");
}

}  // namespace
}  // namespace ete
