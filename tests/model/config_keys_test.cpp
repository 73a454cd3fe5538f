// tests/model/config_keys_test.cpp — every key of a config.json is read, harmless or refused by
// name: published files of every family load with nothing left over, ETE's own files name only
// keys it reads, and settings outside a family's class are refused unless neutral.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ete/model/config.h"
#include "ete/model/config_keys.h"
#include "test_util.h"

namespace ete {
namespace {

using json = nlohmann::json;

// The keys of published config.json files (sizes as published; values that only fill a key
// abridged), the families' representative checkpoints.
json published(const std::string& name) {
    const json common = {{"bos_token_id", 1},
                         {"eos_token_id", 2},
                         {"torch_dtype", "bfloat16"},
                         {"transformers_version", "4.51.0"},
                         {"use_cache", true}};
    json j;
    if (name == "Llama-3.2-1B") {
        j = {{"architectures", {"LlamaForCausalLM"}},
             {"model_type", "llama"},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"head_dim", 64},
             {"hidden_act", "silu"},
             {"hidden_size", 2048},
             {"initializer_range", 0.02},
             {"intermediate_size", 8192},
             {"max_position_embeddings", 131072},
             {"mlp_bias", false},
             {"num_attention_heads", 32},
             {"num_hidden_layers", 16},
             {"num_key_value_heads", 8},
             {"pretraining_tp", 1},
             {"rms_norm_eps", 1e-5},
             {"rope_scaling",
              {{"factor", 32.0},
               {"high_freq_factor", 4.0},
               {"low_freq_factor", 1.0},
               {"original_max_position_embeddings", 8192},
               {"rope_type", "llama3"}}},
             {"rope_theta", 500000.0},
             {"tie_word_embeddings", true},
             {"vocab_size", 128256}};
    } else if (name == "Qwen2.5-0.5B") {
        j = {{"architectures", {"Qwen2ForCausalLM"}},
             {"model_type", "qwen2"},
             {"attention_dropout", 0.0},
             {"hidden_act", "silu"},
             {"hidden_size", 896},
             {"initializer_range", 0.02},
             {"intermediate_size", 4864},
             {"max_position_embeddings", 32768},
             {"max_window_layers", 24},
             {"num_attention_heads", 14},
             {"num_hidden_layers", 24},
             {"num_key_value_heads", 2},
             {"rms_norm_eps", 1e-6},
             {"rope_theta", 1000000.0},
             {"sliding_window", 32768},
             {"tie_word_embeddings", true},
             {"use_sliding_window", false},
             {"vocab_size", 151936}};
    } else if (name == "Qwen3-0.6B") {
        j = {{"architectures", {"Qwen3ForCausalLM"}},
             {"model_type", "qwen3"},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"head_dim", 128},
             {"hidden_act", "silu"},
             {"hidden_size", 1024},
             {"initializer_range", 0.02},
             {"intermediate_size", 3072},
             {"max_position_embeddings", 40960},
             {"max_window_layers", 28},
             {"num_attention_heads", 16},
             {"num_hidden_layers", 28},
             {"num_key_value_heads", 8},
             {"rms_norm_eps", 1e-6},
             {"rope_scaling", nullptr},
             {"rope_theta", 1000000},
             {"sliding_window", nullptr},
             {"tie_word_embeddings", true},
             {"use_sliding_window", false},
             {"vocab_size", 151936}};
    } else if (name == "Mistral-7B-v0.3") {
        j = {{"architectures", {"MistralForCausalLM"}},
             {"model_type", "mistral"},
             {"attention_dropout", 0.0},
             {"head_dim", 128},
             {"hidden_act", "silu"},
             {"hidden_size", 4096},
             {"initializer_range", 0.02},
             {"intermediate_size", 14336},
             {"max_position_embeddings", 32768},
             {"num_attention_heads", 32},
             {"num_hidden_layers", 32},
             {"num_key_value_heads", 8},
             {"rms_norm_eps", 1e-5},
             {"rope_theta", 1000000.0},
             {"sliding_window", nullptr},
             {"tie_word_embeddings", false},
             {"vocab_size", 32768}};
    } else if (name == "gemma-2-2b") {
        j = {{"architectures", {"Gemma2ForCausalLM"}},
             {"model_type", "gemma2"},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"attn_logit_softcapping", 50.0},
             {"cache_implementation", "hybrid"},
             {"final_logit_softcapping", 30.0},
             {"head_dim", 256},
             {"hidden_act", "gelu_pytorch_tanh"},
             {"hidden_activation", "gelu_pytorch_tanh"},
             {"hidden_size", 2304},
             {"initializer_range", 0.02},
             {"intermediate_size", 9216},
             {"max_position_embeddings", 8192},
             {"num_attention_heads", 8},
             {"num_hidden_layers", 26},
             {"num_key_value_heads", 4},
             {"pad_token_id", 0},
             {"query_pre_attn_scalar", 256},
             {"rms_norm_eps", 1e-6},
             {"rope_theta", 10000.0},
             {"sliding_window", 4096},
             {"sliding_window_size", 4096},
             {"vocab_size", 256000}};
    } else if (name == "gemma-3-1b") {
        j = {{"architectures", {"Gemma3ForCausalLM"}},
             {"model_type", "gemma3_text"},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"attn_logit_softcapping", nullptr},
             {"cache_implementation", "hybrid"},
             {"final_logit_softcapping", nullptr},
             {"head_dim", 256},
             {"hidden_activation", "gelu_pytorch_tanh"},
             {"hidden_size", 1152},
             {"initializer_range", 0.02},
             {"intermediate_size", 6912},
             {"max_position_embeddings", 32768},
             {"num_attention_heads", 4},
             {"num_hidden_layers", 26},
             {"num_key_value_heads", 1},
             {"pad_token_id", 0},
             {"query_pre_attn_scalar", 256},
             {"rms_norm_eps", 1e-6},
             {"rope_local_base_freq", 10000},
             {"rope_scaling", nullptr},
             {"rope_theta", 1000000},
             {"sliding_window", 512},
             {"sliding_window_pattern", 6},
             {"vocab_size", 262144}};
    } else if (name == "Phi-3-mini-4k") {
        j = {{"_name_or_path", "Phi-3-mini-4k-instruct"},
             {"architectures", {"Phi3ForCausalLM"}},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"auto_map", {{"AutoConfig", "configuration_phi3.Phi3Config"}}},
             {"embd_pdrop", 0.0},
             {"hidden_act", "silu"},
             {"hidden_size", 3072},
             {"initializer_range", 0.02},
             {"intermediate_size", 8192},
             {"max_position_embeddings", 4096},
             {"model_type", "phi3"},
             {"num_attention_heads", 32},
             {"num_hidden_layers", 32},
             {"num_key_value_heads", 32},
             {"original_max_position_embeddings", 4096},
             {"pad_token_id", 32000},
             {"resid_pdrop", 0.0},
             {"rms_norm_eps", 1e-5},
             {"rope_scaling", nullptr},
             {"rope_theta", 10000.0},
             {"sliding_window", 2047},
             {"tie_word_embeddings", false},
             {"vocab_size", 32064}};
    } else if (name == "Phi-4-mini") {  // 128 x 0.75 = 96 rotary dims: 48 factors
        const json factors = std::vector<double>(48, 1.0);
        j = {{"architectures", {"Phi3ForCausalLM"}},
             {"attention_bias", false},
             {"attention_dropout", 0.0},
             {"auto_map", {{"AutoConfig", "configuration_phi3.Phi3Config"}}},
             {"embd_pdrop", 0.0},
             {"full_attn_mod", 1},
             {"hidden_act", "silu"},
             {"hidden_size", 3072},
             {"initializer_range", 0.02},
             {"intermediate_size", 8192},
             {"interpolate_factor", 1},
             {"lm_head_bias", false},
             {"max_position_embeddings", 131072},
             {"mlp_bias", false},
             {"model_type", "phi3"},
             {"num_attention_heads", 24},
             {"num_hidden_layers", 32},
             {"num_key_value_heads", 8},
             {"original_max_position_embeddings", 4096},
             {"pad_token_id", 199999},
             {"partial_rotary_factor", 0.75},
             {"resid_pdrop", 0.0},
             {"rms_norm_eps", 1e-5},
             {"rope_scaling",
              {{"long_factor", factors}, {"short_factor", factors}, {"type", "longrope"}}},
             {"rope_theta", 10000.0},
             {"sliding_window", 262144},
             {"tie_word_embeddings", true},
             {"vocab_size", 200064}};
    } else if (name == "gpt2") {
        j = {{"activation_function", "gelu_new"},
             {"architectures", {"GPT2LMHeadModel"}},
             {"attn_pdrop", 0.1},
             {"embd_pdrop", 0.1},
             {"initializer_range", 0.02},
             {"layer_norm_epsilon", 1e-5},
             {"model_type", "gpt2"},
             {"n_ctx", 1024},
             {"n_embd", 768},
             {"n_head", 12},
             {"n_layer", 12},
             {"n_positions", 1024},
             {"resid_pdrop", 0.1},
             {"summary_activation", nullptr},
             {"summary_first_dropout", 0.1},
             {"summary_proj_to_labels", true},
             {"summary_type", "cls_index"},
             {"summary_use_proj", true},
             {"task_specific_params", {{"text-generation", {{"do_sample", true}}}}},
             {"vocab_size", 50257}};
    }
    for (const auto& [k, v] : common.items())
        if (!j.contains(k)) j[k] = v;
    return j;
}

const char* const kPublished[] = {"Llama-3.2-1B",    "Qwen2.5-0.5B", "Qwen3-0.6B",
                                  "Mistral-7B-v0.3", "gemma-2-2b",   "gemma-3-1b",
                                  "Phi-3-mini-4k",   "Phi-4-mini",   "gpt2"};

TEST(ConfigKeys, PublishedFilesLoadWithNoKeyLeftOver) {
    for (const char* name : kPublished) {
        const json j = published(name);
        ASSERT_FALSE(j.empty()) << name;
        const ModelConfig c = config_from_hf_json(j, name);
        EXPECT_EQ(c.family().model_type, j["model_type"]) << name;
        EXPECT_EQ(unread_config_keys(c.family(), j), std::vector<std::string>{}) << name;
    }
}

// What ETE writes is what it reads: no key of its own files is left over, per family.
TEST(ConfigKeys, EteWritesOnlyKeysItReads) {
    for (const char* name : kPublished) {
        const ModelConfig c = config_from_hf_json(published(name), name);
        const json out = config_to_hf_json(c);
        EXPECT_EQ(unread_config_keys(c.family(), out), std::vector<std::string>{}) << name;
    }
}

// Keys that neither ETE nor the family's class reads are listed (the loader's notice), sorted;
// a key of another family's class is one of them (Gemma's soft-cap on a Llama: Hugging Face's
// LlamaForCausalLM ignores it too).
TEST(ConfigKeys, KeysNoOneReadsAreListed) {
    json j = published("Llama-3.2-1B");
    j["zeta_scale"] = 2.0;
    j["attn_logit_softcapping"] = 50.0;
    j["layer_types"] = json::array();
    const ModelConfig c = config_from_hf_json(j, "c.json");
    EXPECT_EQ(unread_config_keys(c.family(), j),
              (std::vector<std::string>{"attn_logit_softcapping", "layer_types", "zeta_scale"}));
    // The same keys are the family's own on Gemma 3 (read there).
    const json g = published("gemma-3-1b");
    EXPECT_EQ(unread_config_keys(family(Arch::Gemma3), g), std::vector<std::string>{});
}

// Inside the rope dict the keys its type does not read are listed too (HF's rope functions
// warn of them and go on): a linear scaling's original context, a Qwen2-VL mrope_section on a
// text model, a factor on Gemma 3's unscaled local rope. yarn and longrope read all of theirs.
TEST(ConfigKeys, RopeKeysItsTypeDoesNotReadAreListed) {
    json j = published("Llama-3.2-1B");
    j["rope_scaling"] = {{"type", "linear"},
                         {"factor", 2.0},
                         {"original_max_position_embeddings", 4096},
                         {"mrope_section", {16, 24, 24}}};
    const ModelConfig c = config_from_hf_json(j, "c.json");
    EXPECT_EQ(c.rope_scaling.type, "linear");
    EXPECT_EQ(unread_config_keys(c.family(), j),
              (std::vector<std::string>{"rope_scaling.mrope_section",
                                        "rope_scaling.original_max_position_embeddings"}));
    j["rope_scaling"] = {
        {"rope_type", "yarn"},   {"factor", 4.0},     {"beta_fast", 32},
        {"beta_slow", 1},        {"mscale", 1.0},     {"mscale_all_dim", 0},
        {"attention_factor", 1}, {"truncate", false}, {"original_max_position_embeddings", 8192}};
    EXPECT_EQ(unread_config_keys(c.family(), j), std::vector<std::string>{});
    // The newer rope_parameters dict, one per layer type (Gemma 3).
    json g = published("gemma-3-1b");
    g.erase("rope_scaling");
    g["rope_parameters"] = {
        {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
        {"sliding_attention", {{"rope_type", "default"}, {"factor", 8.0}, {"rope_theta", 1e4}}}};
    EXPECT_EQ(config_from_hf_json(g, "g.json").rope_scaling.factor, 8.0);
    EXPECT_EQ(unread_config_keys(family(Arch::Gemma3), g),
              std::vector<std::string>{"rope_parameters.sliding_attention.factor"});
    // GPT-2's class has no rope: the whole dict is one unread key.
    json h = published("gpt2");
    h["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    EXPECT_EQ(unread_config_keys(family(Arch::GPT2), h), std::vector<std::string>{"rope_scaling"});
}

// A setting outside the family's class at a value other than its neutral one asks for a
// model that class does not build: refused by name, never ignored.
TEST(ConfigKeys, NonNeutralSettingsOutsideTheClassAreRefused) {
    struct Case {
        const char* file;
        const char* key;
        json value;
        const char* expected;
    };
    const Case cases[] = {
        {"Phi-4-mini", "lm_head_bias", true, "false"},
        {"Phi-4-mini", "full_attn_mod", 2, "1"},
        {"Phi-4-mini", "interpolate_factor", 0.5, "1"},
        {"Phi-4-mini", "mlp_bias", true, "false"},
        {"Mistral-7B-v0.3", "attention_bias", true, "false"},
        {"Qwen2.5-0.5B", "mlp_bias", true, "false"},
        {"Qwen2.5-0.5B", "use_mrope", true, "false"},
    };
    for (const Case& t : cases) {
        json j = published(t.file);
        const ModelConfig ok = config_from_hf_json(j, "c.json");  // neutral or absent: loads
        j[t.key] = t.value;
        const Family& f = ok.family();
        EXPECT_EQ(error_of([&] { config_from_hf_json(j, "c.json"); }),
                  fmt::format("c.json: {} = {} is not supported for {} (expected {}: Hugging "
                              "Face's {} has no such setting)",
                              t.key, t.value.dump(), f.model_type, t.expected, f.hf_class))
            << t.file << " " << t.key;
    }
    // Where the family's class has the key, it is read: a Llama with biases loads.
    json llama = published("Llama-3.2-1B");
    llama["mlp_bias"] = true;
    EXPECT_TRUE(config_from_hf_json(llama, "c.json").has_mlp_bias());
}

TEST(ConfigKeys, OnlyQuantizationEteLoadsIsAccepted) {
    json j = published("Qwen3-0.6B");
    j["quantization_config"] = {
        {"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}};
    EXPECT_NO_THROW(config_from_hf_json(j, "c.json"));
    j["quantization_config"] = {{"quant_method", kInt8QuantMethod}};
    EXPECT_NO_THROW(config_from_hf_json(j, "c.json"));
    j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "c.json"); }),
              "c.json: quantization_config.quant_method \"gptq\" is not supported (expected "
              "bitsandbytes NF4 or ete_int8)");
    j["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "c.json"); }),
              "c.json: quantization_config: bitsandbytes 8-bit (load_in_8bit) is not supported "
              "(expected 4-bit nf4)");
    j["quantization_config"] = {
        {"quant_method", "bitsandbytes"}, {"load_in_4bit", true}, {"bnb_4bit_quant_type", "fp4"}};
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "c.json"); }),
              "c.json: quantization_config: bitsandbytes bnb_4bit_quant_type \"fp4\" is not "
              "supported (expected 4-bit nf4)");
    j["quantization_config"] = "nf4";
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "c.json"); }),
              "c.json: quantization_config: expected an object");
}

}  // namespace
}  // namespace ete
