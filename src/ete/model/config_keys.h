// ete/model/config_keys.h — every key of an HF config.json sorted for its family: read by ETE,
// harmless (bookkeeping, generation, keys the family's Hugging Face class does not read either),
// or a setting ETE does not implement, which is refused by name rather than ignored.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "ete/model/family.h"

namespace ete {

// quantization_config.quant_method of ETE's integer models (io/int8_dir.h).
inline constexpr const char* kInt8QuantMethod = "ete_int8";

// Throws ete::Error naming a key that would change the math ETE computes: a key outside the
// family's class at a value other than its neutral one (Phi-4's lm_head_bias = true, a
// Mistral's mlp_bias = true, ...), or a quantization_config ETE cannot load (GPTQ, AWQ,
// bitsandbytes int8 or fp4, ...).
void check_config_keys(const Family& f, const nlohmann::json& j, const std::string& where);

// The keys neither ETE nor the family's Hugging Face class reads (ignored by both), sorted.
std::vector<std::string> unread_config_keys(const Family& f, const nlohmann::json& j);

}  // namespace ete
