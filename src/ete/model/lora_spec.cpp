// ete/model/lora_spec.cpp
#include "ete/model/lora_spec.h"

#include <algorithm>
#include <cmath>

#include "ete/core/nf4.h"

namespace ete {

namespace {

struct Module {
    const char* name;
    ParamRole role;
};

// Per decoder layout (model/family.h), in layer order.
const std::vector<Module>& modules(Arch a) {
    using R = ParamRole;
    static const std::vector<Module> llama = {
        {"q_proj", R::Q},       {"k_proj", R::K},   {"v_proj", R::V},      {"o_proj", R::AttnOut},
        {"gate_proj", R::Gate}, {"up_proj", R::Up}, {"down_proj", R::Down}};
    static const std::vector<Module> gpt2 = {
        {"c_attn", R::Qkv}, {"c_proj", R::AttnOut}, {"c_fc", R::Fc}, {"c_proj", R::Down}};
    static const std::vector<Module> phi3 = {{"qkv_proj", R::Qkv},
                                             {"o_proj", R::AttnOut},
                                             {"gate_up_proj", R::Fc},
                                             {"down_proj", R::Down}};
    switch (family(a).layout) {
        case Layout::GPT2:
            return gpt2;
        case Layout::Phi3:
            return phi3;
        default:
            return llama;
    }
}

std::string known_names(Arch a) {
    std::string s;
    for (const Module& m : modules(a)) {
        if (s.find(m.name) != std::string::npos) continue;
        s += std::string(s.empty() ? "" : ", ") + m.name;
    }
    return s + " or all-linear";
}

}  // namespace

std::vector<std::string> peft_default_targets(Arch arch) {
    switch (family(arch).layout) {
        case Layout::GPT2:
            return {"c_attn"};
        case Layout::Phi3:
            return {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"};
        default:
            return {"q_proj", "v_proj"};
    }
}

std::string lora_module_name(ParamRole base, Arch arch) {
    for (const Module& m : modules(arch))
        if (m.role == base) return m.name;
    ETE_ASSERT(false);
    return {};
}

std::vector<std::string> split_comma_list(const std::string& s) {
    std::vector<std::string> out;
    for (size_t start = 0; start <= s.size();) {
        const size_t end = std::min(s.find(',', start), s.size());
        std::string item = s.substr(start, end - start);
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (!item.empty()) out.push_back(item);
        start = end + 1;
    }
    return out;
}

std::vector<ParamRole> linear_roles(const std::vector<std::string>& names, Arch arch) {
    std::vector<ParamRole> roles;
    const bool all = std::find(names.begin(), names.end(), "all-linear") != names.end();
    for (const Module& m : modules(arch)) {
        if (all || std::find(names.begin(), names.end(), m.name) != names.end())
            roles.push_back(m.role);
    }
    return roles;
}

void check_linear_names(const std::vector<std::string>& names, Arch arch, const char* key) {
    ETE_CHECK(!names.empty(), "{} is empty: expected module names ({})", key, known_names(arch));
    for (const std::string& t : names) {
        bool known = t == "all-linear";
        for (const Module& m : modules(arch)) known = known || t == m.name;
        ETE_CHECK(known, "{}: '{}' is not a linear of a {} model (expected {})", key, t,
                  arch_name(arch), known_names(arch));
    }
}

std::vector<ParamRole> lora_target_roles(const LoraSpec& s, const ModelConfig& c) {
    return linear_roles(s.targets, c.arch);
}

void check_lora_spec(const LoraSpec& s, const ModelConfig& c) {
    if (!s.enabled) return;
    ETE_CHECK(s.r > 0, "lora.r = {}: expected a rank >= 1", s.r);
    ETE_CHECK(s.r_max == 0 || s.r_max >= s.r, "lora.r_max = {}: expected >= lora.r = {}", s.r_max,
              s.r);
    ETE_CHECK(std::isfinite(s.alpha) && s.alpha > 0, "lora.alpha = {}: expected a number > 0",
              s.alpha);
    ETE_CHECK(s.base_format == "f32" || s.base_format == "bf16" || s.base_format == "nf4",
              "lora.base_format = '{}': expected f32, bf16 or nf4", s.base_format);
    ETE_CHECK(nf4_valid_blocksize(s.nf4_block),
              "lora.nf4_blocksize = {}: expected a power of two in [{}, {}]", s.nf4_block,
              kNf4MinBlock, kNf4MaxBlock);
    check_linear_names(s.targets, c.arch, "lora.targets");
}

}  // namespace ete
