// ete/model/config_rope.h — config.json's rope_scaling (or rope_parameters) dict <-> RopeScaling
// (nn/rope.h), with Hugging Face's keys and defaults per rope type.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "ete/nn/rope.h"

namespace ete {

// `r`: the dict (type from rope_type or type). max_positions: config.json's
// max_position_embeddings; original: its top-level original_max_position_embeddings (Phi-3), 0
// when absent — yarn's and longrope's original context defaults to the dict's own key, then that,
// then max_positions, and their factor to max_positions / original. Types ETE does not implement
// (dynamic, ...) are refused by name.
RopeScaling parse_rope_scaling(const nlohmann::json& r, int max_positions, int original,
                               const std::string& where);

// The keys of a rope dict that neither ETE nor Hugging Face's rope functions read for its type
// (HF's _check_received_keys warns of them and goes on), each as prefix + key, sorted. A
// rope_parameters dict (parameters = true) also holds rope_theta and partial_rotary_factor, and
// for Gemma 3 one dict per layer type.
std::vector<std::string> unread_rope_keys(const nlohmann::json& r, const std::string& prefix,
                                          bool parameters);

// The dict Hugging Face reads back as the same scaling (null for none). longrope is written as
// Phi-3's config class requires it (type, short_factor, long_factor; factor and attention_factor
// only when they differ from what max_positions and the original context give).
nlohmann::json rope_scaling_to_json(const RopeScaling& s, int max_positions);

}  // namespace ete
