// ete/model/config_rope.h — config.json's rope_scaling (or rope_parameters) dict <-> RopeScaling
// (nn/rope.h), with Hugging Face's keys and defaults per rope type.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "ete/nn/rope.h"

namespace ete {

// `r`: the dict (type from rope_type or type). max_positions: config.json's
// max_position_embeddings; original: its top-level original_max_position_embeddings (Phi-3), 0
// when absent — yarn's and longrope's original context defaults to the dict's own key, then that,
// then max_positions, and their factor to max_positions / original. Types ETE does not implement
// (dynamic, ...) are refused by name.
RopeScaling parse_rope_scaling(const nlohmann::json& r, int max_positions, int original,
                               const std::string& where);

// The dict Hugging Face reads back as the same scaling (null for none). longrope is written as
// Phi-3's config class requires it (type, short_factor, long_factor; factor and attention_factor
// only when they differ from what max_positions and the original context give).
nlohmann::json rope_scaling_to_json(const RopeScaling& s, int max_positions);

}  // namespace ete
