// ete/io/int8_dir.h — the integer model's directory (docs/formats.md "Integer model"): an HF-style
// model dir whose config.json carries quantization_config {"quant_method": "ete_int8", the QAT
// spec's keys, "activation_scales": {point key: [scale, zero_point]}} and whose
// model.safetensors holds each quantized linear as `P.weight` I8 (out, in) — ETE's layout for
// every architecture — with `P.weight_scale` F32 (out, in / group), and every other parameter as
// F32 in its HF layout. The integer model of a QAT run over LoRA also holds the run's PEFT adapter
// in DIR/adapter, applied in fp32.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ete/backend/backend.h"
#include "ete/io/hf_model.h"  // is_int8_model_dir, kInt8QuantMethod
#include "ete/model/int8_model.h"
#include "ete/model/transformer.h"

namespace ete {

// Writes the dir atomically (a temporary sibling renamed over `dir`). params: the whole model's
// fp32 weights (those m quantizes are written as its integers); source: what to record of where
// the model came from (quantization_config.source); tokenizer_json / generation_config: files to
// copy, or "". adapter: a PEFT LoRA adapter dir (a QAT run over LoRA) copied into DIR/adapter
// (quantization_config.adapter = "adapter"), or "". Beyond max_shard_bytes the weights are
// sharded as save_hf_model shards them (a weight and its scales in one shard).
void save_int8_model(const std::string& dir, const ModelConfig& c, const HostParams& params,
                     const Int8Model& m, const nlohmann::json& source,
                     const std::string& tokenizer_json, const std::string& generation_config,
                     const std::string& adapter = "",
                     uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// A dir's quantization_config (`where`: its config.json, for errors): the spec, checked against
// the model, and the static activation points' scales and zero points (finite, > 0, integral on
// the grid); the weights are read by load_int8_model.
Int8Model read_int8_config(const nlohmann::json& qc, const ModelConfig& c,
                           const std::string& where);

// The model of an int8 dir, ready for setup: every tensor checked against the config (names,
// shapes, dtypes, scales finite and positive, integers on their grid). With an adapter, its LoRA
// path runs in fp32 beside the integer base, reading the input the integers were quantized from,
// fake-quantized (the numbers the QAT run trained with).
std::unique_ptr<Transformer> load_int8_model(Backend& be, const std::string& dir);

}  // namespace ete
