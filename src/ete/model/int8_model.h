// ete/model/int8_model.h — the integer model (docs/qat.md, docs/formats.md): the integers and
// scales of every quantized linear's weight and the frozen scales of every static activation
// point, as a QAT run (its weights and observers) or a PTQ calibration leaves them. It is what
// `ete export int8` and `ete quantize --scheme w8a8|w4a8` write and what Transformer::enable_int8
// runs (nn/int8_linear.h).
//
// Which linears: those qat.linears chooses in the layers qat.skip_layers keeps; the points must
// include `weight` and `linear_in` (an integer GEMM needs both operands quantized), and a fused
// group (q, k, v; gate, up) is chosen whole, since its members read one quantized input.
// Weights are quantized exactly as QAT's fake quantization of the same fp32 values: symmetric on
// the weight_bits grid, one scale per output row, per tensor or per group of input columns.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ete/model/param_store.h"
#include "ete/model/qat_runtime.h"
#include "ete/model/qat_spec.h"

namespace ete {

struct Int8Tensor {
    int64_t rows = 0, cols = 0, group = 0;  // (out, in) in ETE layout; group divides cols
    std::vector<int8_t> q;                  // rows · cols integers on the weight grid
    std::vector<float> scale;               // rows · (cols / group), row n's groups together
};

struct Int8Model {
    QatSpec spec;
    std::map<std::string, Int8Tensor> weights;                  // by parameter name
    std::map<std::string, std::pair<float, float>> act_scales;  // point key -> (scale, zero)
};

// The key of a static activation point: "layers.L.NAME" (NAME: qkv_in, o_in, mlp_in, down_in,
// attn_out, ffn_out, residual_mid, residual_out) or "final_norm"; and back (false when unknown).
std::string qat_point_key(int site, int layer, int layers);
bool parse_qat_point_key(const std::string& key, int layers, int* site, int* layer);

// Throws ete::Error naming what is wrong unless spec can become an integer model of config c.
void check_int8_spec(const QatSpec& spec, const ModelConfig& c);
// Whether parameter s is a weight the integer model holds as integers.
bool int8_quantizes(const QatSpec& spec, const ModelConfig& c, const ParamSpec& s);
// Whether the integer model holds a tied LM head (the token embedding's values) as integers, named
// kLmHeadName; the embedding lookup keeps the fp32 table.
bool int8_tied_head(const QatSpec& spec, const ModelConfig& c);

// The integer model of fp32 weights `params` (a whole model, one process) and the activation
// points of `qat` (observed: every static point that is on must have seen a step), with the
// weight scales of `qat` where it was given learned factors (QatRuntime::weight_scales).
Int8Model make_int8_model(const QatSpec& spec, const ModelConfig& c, const HostParams& params,
                          const QatRuntime& qat);

// One weight (rows, cols) on the spec's weight grid and granularity, with the scales of its
// range, or the given ones (learned: one per block, or one for a per-tensor weight).
Int8Tensor quantize_weight_int8(const QatSpec& spec, const float* w, int64_t rows, int64_t cols,
                                const std::vector<float>* scales = nullptr);

}  // namespace ete
