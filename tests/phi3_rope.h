// tests/phi3_rope.h — Phi-3's RoPE for test models: part of each head rotated (int(D · rotary),
// which must be even) with LongRoPE against an original context of `original` positions, factors
// that differ per frequency (the long ones much larger), and the factor HF derives from
// max_position_embeddings.
#pragma once

#include "ete/model/config.h"

namespace ete::testing {

inline void phi3_rope(ModelConfig& c, double rotary, int original) {
    c.partial_rotary_factor = rotary;
    RopeScaling& rs = c.rope_scaling;
    rs = RopeScaling{};
    rs.type = "longrope";
    rs.original_max_position_embeddings = original;
    rs.factor = double(c.max_position_embeddings) / original;
    for (int j = 0; j < c.rotary_dim() / 2; ++j) {
        rs.short_factor.push_back(1.0 + 0.3 * j);
        rs.long_factor.push_back(1.0 + 2.0 * j);
    }
}

}  // namespace ete::testing
