// ete/io/hf_model.h — Hugging Face model directories in and out.
//
// A directory holds config.json, model.safetensors (F32, HF tensor names and layouts: GPT-2
// Conv1D weights transposed back to (in, out)), generation_config.json and, when the model was
// trained with one, tokenizer.json. Names and shapes are checked against the ParamSpec table
// before any weight is used.
#pragma once

#include <string>

#include "ete/model/config.h"
#include "ete/model/param_store.h"

namespace ete {

// Reads DIR/config.json.
ModelConfig load_hf_config(const std::string& dir);

// Loads DIR/model.safetensors into `store` (which must have been built from the same config).
// Accepts F32/BF16/F16 weights, GPT-2 names with or without the `transformer.` prefix, and
// ignores the GPT-2 attention-mask buffers (`attn.bias`, `attn.masked_bias`).
void load_hf_weights(const std::string& dir, ParamStore& store);

// Writes a complete HF model dir atomically: everything goes to a temporary sibling directory,
// is fsynced, then renamed over `dir`, so `dir` is either the old or the new model, never half.
// tokenizer_json may be empty (no tokenizer copied).
void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamStore& store,
                   const std::string& tokenizer_json);

}  // namespace ete
