// ete/train/generate.h — sampling text from a model: temperature, top-k, top-p, seeded.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ete/model/transformer.h"

namespace ete {

struct SampleOptions {
    int max_new_tokens = 200;
    double temperature = 0.8;  // 0 = greedy
    int top_k = 0;             // 0 = off
    double top_p = 1.0;        // 1 = off
    uint64_t seed = 0;
    std::vector<int32_t> stop_ids;  // stop after emitting one of these (eos and the like)
};

// Picks the next token from one row of logits (V). `draw` is the index of this draw in the
// seeded stream, so the same (seed, draw) always gives the same choice.
int32_t sample_token(std::vector<float> logits, const SampleOptions& opt, uint64_t draw);

// Extends `prompt` token by token. The model must be set up with B >= 1 and T >= 1; contexts
// longer than its T keep the last T tokens. on_token is called for each new id.
std::vector<int32_t> generate(Transformer& model, std::vector<int32_t> prompt,
                              const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace ete
