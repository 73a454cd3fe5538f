// ete/io/hf_model.h — Hugging Face model directories in and out.
//
// A directory holds config.json, the weights (F32, HF tensor names and layouts: GPT-2 Conv1D
// weights transposed back to (in, out)), generation_config.json and, when the model was trained
// with one, tokenizer.json. The weights are either one model.safetensors or, like HF's
// save_pretrained beyond its shard size, shards model-00001-of-0000N.safetensors listed by
// model.safetensors.index.json = {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.
// Names and shapes are checked against the ParamSpec table before any weight is used.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ete/model/config.h"
#include "ete/model/config_keys.h"
#include "ete/model/param_store.h"

namespace ete {

// Reads DIR/config.json.
ModelConfig load_hf_config(const std::string& dir);

// Whether DIR/config.json says quantization_config.quant_method = ete_int8 (kInt8QuantMethod,
// model/config_keys.h): an integer model (io/int8_dir.h), whose weights no full-precision loader
// reads.
bool is_int8_model_dir(const std::string& dir);

// HF's default max_shard_size ("5GB", decimal).
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// Reads DIR/model.safetensors, or when it is absent the shards named by
// DIR/model.safetensors.index.json, tensor by tensor against `table` (built from the same config):
// `take(i, values)` receives parameter i's values in ETE layout (F32, host), one tensor at a time,
// so peak memory is one tensor beyond what `take` keeps. Accepts F32/BF16/F16 weights, GPT-2
// names with or without the `transformer.` prefix, and ignores the GPT-2 attention-mask buffers
// (`attn.bias`, `attn.masked_bias`). A sharded dir must agree exactly with its index: every mapped
// tensor in the shard the map names, no tensor in a shard that the map does not name there, no
// tensor in two shards. Every parameter of the table must be found, except LoRA adapters (a base
// model dir has none).
// A bitsandbytes-quantized weight (io/bnb_nf4.h, a dir written by `ete quantize` or by
// bitsandbytes) goes to `take_nf4` as it is; without one it is dequantized and goes to `take`.
using TensorSink = std::function<void(int index, const float* values)>;
using Nf4Sink = std::function<void(int index, const Nf4Tensor& t)>;
void load_hf_tensors(const std::string& dir, const ParamTable& table, const TensorSink& take,
                     const Nf4Sink& take_nf4 = {});
// Calls `use` with DIR/model.safetensors, or else with each shard DIR/model.safetensors.index.json
// names (in file name order, each checked against the index as above, opened once); returns the
// path errors should name (the file or the index).
class SafetensorsFile;
std::string for_each_model_file(const std::string& dir,
                                const std::function<void(const SafetensorsFile&)>& use);
// Writes items 0..n-1 (bytes[i] bytes each) into the dir being written, `tmp`: as
// model.safetensors, or when they exceed max_bytes as HF's shards (split as save_hf_model says)
// with model.safetensors.index.json. write(path, items) writes one file; names(i) are the tensors
// item i writes (an item's tensors share a shard).
void write_model_files_sharded(
    const std::string& tmp, const std::vector<uint64_t>& bytes, uint64_t max_bytes,
    const std::function<void(const std::string& path, const std::vector<int>& items)>& write,
    const std::function<std::vector<std::string>(int item)>& names);
// The same into a host copy, or straight into a store's backend memory (a quantized weight kept
// as is where the store holds it in NF4, dequantized elsewhere).
void load_hf_weights(const std::string& dir, HostParams& params);
void load_hf_weights(const std::string& dir, ParamStore& store);

// A fingerprint of a model dir's contents (config.json and every *.safetensors file, in name
// order; each file's XXH3-64, then the list's hash): "xxh3:" and 16 hex digits. What a LoRA
// checkpoint and adapter record of their base, so a resume or an eval over different base weights
// is refused.
std::string model_dir_hash(const std::string& dir);
// The fingerprint in the form `recorded` has: a value ETE recorded before XXH3 (16 hex digits,
// FNV-1a 64 of every byte, 0.3 GB/s on Zen 5) is recomputed that way, so older adapters and
// checkpoints still verify; anything else is model_dir_hash.
std::string model_dir_hash_like(const std::string& dir, const std::string& recorded);
bool is_legacy_model_dir_hash(const std::string& recorded);

// Writes `tokenizer_json` into the dir being written, `tmp`, as tokenizer.json, with the
// tokenizer_config.json and special_tokens_map.json beside it where they exist: the chat template,
// the end-of-turn and padding tokens and the special-token flags that Hugging Face (and every
// serving stack) reads from them, so a saved dir chats and stops as its source did.
void write_tokenizer_files(const std::string& tmp, const std::string& tokenizer_json);

// Writes a complete HF model dir atomically: everything goes to a temporary sibling directory,
// is fsynced, then renamed over `dir`, so `dir` is either the old or the new model, never half.
// tokenizer_json may be empty (no tokenizer copied; else write_tokenizer_files). Tensors are
// written in `dtype` (F32, BF16 or F16; 16-bit values rounded to nearest even) and config.json's
// torch_dtype says which. When the tensors exceed max_shard_bytes they are split like HF does:
// tensors in ParamSpec order, a new shard started whenever the next tensor would push the current
// one past the limit (a tensor larger than the limit gets a shard of its own), plus
// model.safetensors.index.json. extra_files: (name, contents) written into the dir as well, inside
// the same atomic save.
using ExtraFiles = std::vector<std::pair<std::string, std::string>>;
void save_hf_model(const std::string& dir, const ModelConfig& config, const HostParams& params,
                   const std::string& tokenizer_json,
                   uint64_t max_shard_bytes = kDefaultMaxShardBytes, DType dtype = DType::F32,
                   const ExtraFiles& extra_files = {});
// The same with each tensor fetched when its bytes are written: fetch(i, out) puts parameter i's
// values (ETE layout, F32, table.numel(i) of them) into out. Each parameter is fetched once, as its
// bytes are written (shard by shard, in each file's data order), so the host holds one tensor of
// the model at a time: a trainer on many ranks fetches through a collective
// (train/state_stream.h). A fetch that throws leaves `dir` as it was.
using TensorFetch = std::function<void(int index, float* values)>;
void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamTable& table,
                   const TensorFetch& fetch, const std::string& tokenizer_json,
                   uint64_t max_shard_bytes = kDefaultMaxShardBytes, DType dtype = DType::F32,
                   const ExtraFiles& extra_files = {});

}  // namespace ete
