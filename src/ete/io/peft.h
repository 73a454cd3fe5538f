// ete/io/peft.h — PEFT LoRA adapter directories in and out (REFERENCE.md "PEFT LoRA adapters").
//
// A directory holds adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// lora_dropout, target_modules, use_rslora, fan_in_fan_out — true for GPT-2's Conv1D —,
// base_model_name_or_path, rank_pattern for adapters whose rank differs from r) and
// adapter_model.safetensors: `base_model.model.<module path>.lora_A.weight` [r, in] and
// `.lora_B.weight` [out, r] per adapted linear (GPT-2 module paths start with `transformer.`).
// Its metadata is {"format": "pt"} plus ETE's own keys, which PEFT ignores: the base format the
// adapter was trained over ("ete.base_format", "ete.nf4_blocksize", "ete.double_quant").
//
// ETE keeps every adapter at r_max; only the first `rank` rows of A and columns of B are active,
// and only those are written. Reading puts a file's [r, in] / [out, r] into the first r rows /
// columns and zeroes the rest.
#pragma once

#include <functional>
#include <map>
#include <regex>
#include <string>

#include "ete/model/config.h"
#include "ete/model/lora_spec.h"
#include "ete/model/param_store.h"

namespace ete {

class Transformer;

// adapter_config.json's key (ETE's own; PEFT ignores it) for the content hash of the base model
// dir the adapter was trained over (io/hf_model.h model_dir_hash).
inline constexpr const char* kPeftBaseHashKey = "ete_base_model_hash";

struct PeftAdapterInfo {
    LoraSpec spec;           // enabled, r, alpha, rslora, targets, base format
    std::string base_model;  // base_model_name_or_path
    std::string base_hash;   // kPeftBaseHashKey, or "" (a dir PEFT wrote, or an unnamed base)
    // rank_pattern and alpha_pattern as PEFT reads them: key -> value, a key applying to a module
    // whose path matches the regex (.*\.)?(key) whole.
    std::map<std::string, int> rank_pattern;
    std::map<std::string, float> alpha_pattern;
    Arch arch = Arch::Llama;
    // The keys' regexes in map order, compiled once by load_peft_config (when empty — an info
    // built by hand — each lookup compiles them).
    std::vector<std::regex> rank_regex, alpha_regex;

    // The rank and alpha PEFT gives the adapter of `module` (ETE's module name, e.g.
    // "model.layers.0.self_attn.q_proj"): the pattern entry matching it, else r / lora_alpha.
    // Two matching keys with different values are an ete::Error naming both (PEFT would take
    // the first in the file's order).
    int rank_of(const std::string& module) const;
    float alpha_of(const std::string& module) const;
    float scale_of(const std::string& module) const;  // lora_scale(alpha_of, rank_of, rslora)
};

// The PEFT tensor name of an ETE adapter parameter ("model.layers.0.self_attn.q_proj.lora_A.weight"
// -> "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_tensor_name(const std::string& ete_name, Arch arch);

// Writes DIR atomically from the adapter parameters of `adapters` (a host table holding the
// whole model's trainable parameters: LoRA A and B). rank(module) gives each adapter's active
// rank (module = the base weight's name without ".weight"). dtype: F32, BF16 or F16.
// extra: more files for the dir, (name, contents) (a QAT run's qat.json). base_hash: the base
// dir's model_dir_hash, recorded under kPeftBaseHashKey ("" when the base was not a model dir).
void save_peft_adapter(const std::string& dir, const ModelConfig& c, const LoraSpec& spec,
                       const HostParams& adapters, const std::string& base_model,
                       const std::string& base_hash,
                       const std::function<int(const std::string& module)>& rank,
                       DType dtype = DType::F32,
                       const std::vector<std::pair<std::string, std::string>>& extra = {});

// DIR/adapter_config.json's base_model_name_or_path ("" when absent or not a string).
std::string peft_base_model(const std::string& dir);

// Reads and validates DIR/adapter_config.json (and the safetensors metadata) for a model of
// config c; every error names the file and the field.
PeftAdapterInfo load_peft_config(const std::string& dir, const ModelConfig& c);

// Reads DIR/adapter_model.safetensors into the adapter parameters of `table` (built with
// load_peft_config(dir).spec, r_max >= every rank): take(i, values) gets parameter i in ETE layout
// at its allocated shape, inactive rows/columns 0. Every adapter of the table must be in the file
// and every tensor of the file must be an adapter of the table, with the shapes the config says.
void load_peft_weights(const std::string& dir, const ModelConfig& c, const ParamTable& table,
                       const std::function<void(int, const float*)>& take);

// Refuses (ete::Error naming both dirs and hashes) an adapter whose recorded base hash differs
// from base_dir's content, unless allow_mismatch (then a warning): merging or running an adapter
// over another base of the same shape gives a wrong model that looks right. An adapter with no
// recorded hash (PEFT's own) loads with a notice that its base cannot be verified.
void check_adapter_base(const std::string& base_dir, const std::string& adapter_dir,
                        const PeftAdapterInfo& info, bool allow_mismatch);

// Uploads the adapter weights of dir into m (a one-process model built with info.spec, info as
// load_peft_config(dir) gave it) and sets each adapted linear to its rank.
void load_peft_into(Transformer& m, const std::string& dir, const PeftAdapterInfo& info);

}  // namespace ete
