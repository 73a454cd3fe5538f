// ete/model/family.cpp — the family table.
#include "ete/model/family.h"

#include <array>

#include "ete/core/error.h"

namespace ete {

namespace {

using L = Layout;
using N = NormKind;
using M = MlpKind;
using B = BiasRule;
using W = WindowRule;

// In Arch order. Mistral is Llama's decoder without biases and with an optional attention
// window; Qwen2 Llama's with q/k/v biases and a window on the layers from max_window_layers;
// Qwen3 Qwen2's window with per-head q/k norms and attention_bias in place of the q/k/v biases.
constexpr std::array kFamilies = {
    Family{Arch::Llama, "llama", "llama", "LlamaForCausalLM", L::Llama, N::RMSNorm, M::SwiGLU, true,
           false, B::FromConfig, W::None, false},
    Family{Arch::GPT2, "gpt2", "gpt2", "GPT2LMHeadModel", L::GPT2, N::LayerNorm, M::Gelu, false,
           true, B::All, W::None, false},
    Family{Arch::Qwen2, "qwen2", "qwen2", "Qwen2ForCausalLM", L::Llama, N::RMSNorm, M::SwiGLU, true,
           false, B::Qkv, W::FromMaxWindowLayers, false},
    Family{Arch::Mistral, "mistral", "mistral", "MistralForCausalLM", L::Llama, N::RMSNorm,
           M::SwiGLU, true, false, B::None, W::AllLayers, false},
    Family{Arch::Qwen3, "qwen3", "qwen3", "Qwen3ForCausalLM", L::Llama, N::RMSNorm, M::SwiGLU, true,
           false, B::FromConfig, W::FromMaxWindowLayers, true},
};

}  // namespace

const Family& family(Arch a) {
    const Family& f = kFamilies[size_t(a)];
    ETE_ASSERT(f.arch == a);
    return f;
}

std::span<const Family> families() {
    return kFamilies;
}

const Family* family_named(std::string_view name) {
    for (const Family& f : kFamilies)
        if (name == f.name) return &f;
    return nullptr;
}

const Family* family_of_model_type(std::string_view model_type) {
    for (const Family& f : kFamilies)
        if (model_type == f.model_type) return &f;
    return nullptr;
}

std::string family_names() {
    std::string s;
    for (size_t i = 0; i < kFamilies.size(); ++i)
        s += std::string(i == 0                      ? ""
                         : i + 1 == kFamilies.size() ? " or "
                                                     : ", ") +
             kFamilies[i].name;
    return s;
}

}  // namespace ete
