// ete/io/bnb_nf4.h — NF4 tensors in bitsandbytes' safetensors layout (REFERENCE.md
// "bitsandbytes 4-bit serialisation"), and quantized model dirs (`ete quantize`).
//
// A quantized linear weight P.weight is stored as
//   P.weight                                   U8 [ceil(n/2), 1] packed codes
//   P.weight.absmax                            F32 [blocks], or U8 [blocks] with double quant
//   P.weight.quant_map                         F32 [16] the NF4 table
//   P.weight.nested_absmax                     F32 [ceil(blocks / 256)]   (double quant)
//   P.weight.nested_quant_map                  F32 [256]                  (double quant)
//   P.weight.quant_state.bitsandbytes__nf4     U8 JSON {quant_type, blocksize, dtype, shape,
//                                              nested_blocksize, nested_dtype, nested_offset}
// with shape [out, in] (a GPT-2 Conv1D weight quantized as the Linear it is: [out, in] too), and
// config.json carries "quantization_config" {quant_method bitsandbytes, load_in_4bit,
// bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype}.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ete/core/tensor.h"
#include "ete/io/safetensors.h"
#include "ete/quant/nf4.h"

namespace ete {

// The suffix of the quant-state entry; a U8 weight with such a sibling is quantized.
inline constexpr const char* kBnbNf4State = ".quant_state.bitsandbytes__nf4";

// Whether `name` is one of the auxiliary entries of a quantized weight (absmax, maps, state).
bool is_bnb_aux_name(const std::string& name);
// Whether tensor `name` of f is a bitsandbytes-quantized weight.
bool is_bnb_quantized(const SafetensorsFile& f, const std::string& name);

// Reads and validates the quantized weight `name` (e.g. "model.layers.0.mlp.up_proj.weight");
// `shape` is the [out, in] the model expects. Every violation (fp4, a shape, a size, a map that
// is not NF4's, a non-finite statistic) is a one-line ete::Error naming the file and tensor.
Nf4Tensor read_bnb_nf4(const SafetensorsFile& f, const std::string& name, const Shape& shape);

// The entries of one quantized weight, to write with write_safetensors. dtype_name: the
// compute dtype the quant state records ("bfloat16", "float32").
void append_bnb_nf4(std::vector<std::pair<std::string, Tensor>>& out, const std::string& name,
                    const Nf4Tensor& t, const std::string& dtype_name = "bfloat16");

struct QuantizeOptions {
    int blocksize = kNf4DefaultBlock;
    bool double_quant = true;
};

// `ete quantize`: model dir `in` -> a bitsandbytes-layout NF4 dir `out` (atomically): every
// decoder linear weight quantized tensor by tensor, embeddings, norms, biases and the LM head kept
// (in the dir's torch_dtype), config.json with quantization_config, tokenizer and generation
// config copied. Returns the bits per quantized parameter, measured from the written tensors.
double quantize_model_dir(const std::string& in, const std::string& out,
                          const QuantizeOptions& opt);

}  // namespace ete
