// ete/model/config_keys.cpp — the keys of config.json that are not the family's own
// (Family::config_keys): PretrainedConfig's, the Llama layout's, and the few that published
// files carry with a neutral value.
#include "ete/model/config_keys.h"

#include "ete/model/config_rope.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/json_file.h"

namespace ete {

using json = nlohmann::json;

namespace {

using K = std::string_view;

// PretrainedConfig's and GenerationConfig's attributes: names, token ids, output and generation
// switches, the attention implementation. None changes what the decoder computes in training.
constexpr std::array kCommonKeys = {
    K{"architectures"},
    K{"model_type"},
    K{"transformers_version"},
    K{"torch_dtype"},
    K{"dtype"},
    K{"_name_or_path"},
    K{"_commit_hash"},
    K{"auto_map"},
    K{"use_cache"},
    K{"cache_implementation"},
    K{"bos_token_id"},
    K{"eos_token_id"},
    K{"pad_token_id"},
    K{"sep_token_id"},
    K{"decoder_start_token_id"},
    K{"return_dict"},
    K{"output_hidden_states"},
    K{"output_attentions"},
    K{"torchscript"},
    K{"use_bfloat16"},
    K{"tf_legacy_loss"},
    K{"pruned_heads"},
    K{"chunk_size_feed_forward"},
    K{"is_encoder_decoder"},
    K{"is_decoder"},
    K{"add_cross_attention"},
    K{"cross_attention_hidden_size"},
    K{"tie_encoder_decoder"},
    K{"finetuning_task"},
    K{"id2label"},
    K{"label2id"},
    K{"num_labels"},
    K{"problem_type"},
    K{"tokenizer_class"},
    K{"prefix"},
    K{"task_specific_params"},
    K{"max_length"},
    K{"min_length"},
    K{"do_sample"},
    K{"early_stopping"},
    K{"num_beams"},
    K{"num_beam_groups"},
    K{"diversity_penalty"},
    K{"temperature"},
    K{"top_k"},
    K{"top_p"},
    K{"typical_p"},
    K{"repetition_penalty"},
    K{"length_penalty"},
    K{"no_repeat_ngram_size"},
    K{"encoder_no_repeat_ngram_size"},
    K{"bad_words_ids"},
    K{"num_return_sequences"},
    K{"output_scores"},
    K{"return_dict_in_generate"},
    K{"forced_bos_token_id"},
    K{"forced_eos_token_id"},
    K{"remove_invalid_values"},
    K{"exponential_decay_length_penalty"},
    K{"suppress_tokens"},
    K{"begin_suppress_tokens"},
    K{"attn_implementation"},
    K{"_attn_implementation"},
    K{"_attn_implementation_autoset"},
    K{"quantization_config"},  // checked below
};

// The keys every Llama-layout family's class has (model/config.cpp reads them all).
constexpr std::array kLlamaLayoutKeys = {
    K{"vocab_size"},
    K{"hidden_size"},
    K{"intermediate_size"},
    K{"num_hidden_layers"},
    K{"num_attention_heads"},
    K{"num_key_value_heads"},
    K{"head_dim"},
    K{"hidden_act"},
    K{"max_position_embeddings"},
    K{"initializer_range"},
    K{"rms_norm_eps"},
    K{"tie_word_embeddings"},
    K{"rope_theta"},
    K{"rope_scaling"},
    K{"rope_parameters"},
    K{"partial_rotary_factor"},
    K{"attention_dropout"},
};

// Keys outside a family's class that published files carry (Phi-4-mini's from its custom
// code; mlp_bias and attention_bias from Llama's class), harmless only at these values: any other
// asks for a bias, a head bias or an attention variant the family's class does not build.
struct NeutralKey {
    K key;
    const char* value;  // JSON
};
constexpr std::array kNeutralKeys = {
    NeutralKey{"attention_bias", "false"}, NeutralKey{"mlp_bias", "false"},
    NeutralKey{"lm_head_bias", "false"},   NeutralKey{"full_attn_mod", "1"},
    NeutralKey{"interpolate_factor", "1"}, NeutralKey{"use_mrope", "false"},
};

template <size_t N>
bool in(const std::array<K, N>& keys, std::string_view k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
}

bool family_reads(const Family& f, std::string_view k) {
    if (f.llama_names() && in(kLlamaLayoutKeys, k)) return true;
    return std::find(f.config_keys.begin(), f.config_keys.end(), k) != f.config_keys.end();
}

// What ETE loads: bitsandbytes NF4 4-bit weights (io/bnb_nf4.h) and its own integer models.
void check_quantization_config(const json& q, const std::string& where) {
    ETE_CHECK(q.is_object(), "{}: quantization_config: expected an object", where);
    const json method = q.value("quant_method", json(nullptr));
    ETE_CHECK(method == "bitsandbytes" || method == kInt8QuantMethod,
              "{}: quantization_config.quant_method {} is not supported (expected bitsandbytes "
              "NF4 or {})",
              where, json_excerpt(method), kInt8QuantMethod);
    if (method != "bitsandbytes") return;
    const bool eight = q.value("load_in_8bit", false) == true;
    const json type = q.value("bnb_4bit_quant_type", json("nf4"));
    ETE_CHECK(!eight && type == "nf4",
              "{}: quantization_config: bitsandbytes {} is not supported (expected 4-bit nf4)",
              where, eight ? "8-bit (load_in_8bit)" : "bnb_4bit_quant_type " + json_excerpt(type));
}

}  // namespace

void check_config_keys(const Family& f, const json& j, const std::string& where) {
    for (const auto& [key, value] : j.items()) {
        if (key == "quantization_config") check_quantization_config(value, where);
        if (family_reads(f, key)) continue;
        for (const NeutralKey& n : kNeutralKeys) {
            if (key != n.key) continue;
            ETE_CHECK(value == json::parse(n.value),
                      "{}: {} = {} is not supported for {} (expected {}: Hugging Face's {} has no "
                      "such setting)",
                      where, key, json_excerpt(value), f.model_type, n.value, f.hf_class);
        }
    }
}

std::vector<std::string> unread_config_keys(const Family& f, const json& j) {
    std::vector<std::string> keys;
    for (const auto& item : j.items()) {
        const std::string& key = item.key();
        const bool neutral = std::any_of(kNeutralKeys.begin(), kNeutralKeys.end(),
                                         [&](const NeutralKey& n) { return key == n.key; });
        if (!in(kCommonKeys, key) && !family_reads(f, key) && !neutral) keys.push_back(key);
    }
    // Inside the rope dict: the keys its type does not read.
    for (const char* dict : {"rope_scaling", "rope_parameters"}) {
        if (!j.contains(dict) || !family_reads(f, dict)) continue;
        const std::string d = dict;
        for (std::string& k : unread_rope_keys(j[dict], d + ".", d == "rope_parameters"))
            keys.push_back(std::move(k));
    }
    std::sort(keys.begin(), keys.end());
    return keys;
}

}  // namespace ete
