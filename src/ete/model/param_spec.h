// ete/model/param_spec.h — the one parameter table (DESIGN.md §3, STYLE.md habit 7).
//
// Every parameter of a model is one row: its HF name, its shape as ETE stores it, what kind of
// tensor it is (which decides weight decay), how it is initialised, whether HF stores it
// transposed (GPT-2 Conv1D keeps linears as (in, out); ETE keeps every linear as (out, in)) and
// how tensor parallelism shards it. Allocation, initialisation, checkpoint keys, optimizer groups
// and TP sharding all derive from this table; LoRA/NF4 selection will be columns of it too.
//
// Under tensor parallelism a row describes this rank's shard: `shape` is local, `global_shape`
// the logical HF/ETE tensor, `shard` the rule between them (shard.h moves data across).
#pragma once

#include <string>
#include <vector>

#include "ete/core/tensor.h"
#include "ete/model/config.h"
#include "ete/model/model_parallel.h"

namespace ete {

// QuantScale: QAT's learned weight scale factors (qat.learnable_scale), F32, never decayed.
enum class ParamKind { Matrix, Embedding, Norm, Bias, QuantScale };
// Uniform: U(-init_std, init_std) (LoRA's A: PEFT's Kaiming-uniform with a = √5, bound 1/√in).
enum class ParamInit { Normal, Zeros, Ones, Uniform };

// What a parameter is in the network, so code finds it by (role, layer) and only this table
// spells HF names. Fused groups name their first member (q|k|v starts at Q, or Qkv for GPT-2's
// c_attn; gate|up at Gate).
enum class ParamRole : uint8_t {
    TokenEmbed,
    PosEmbed,
    AttnNorm,
    AttnNormBias,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    Qkv,      // GPT-2 c_attn: q | k | v in one tensor
    QkvBias,  // GPT-2
    AttnOut,
    AttnOutBias,
    QNorm,  // Qwen3: RMSNorm weight (D) of every query head
    KNorm,  // ... and of every key head
    MlpNorm,
    MlpNormBias,
    Gate,
    Up,
    GateBias,
    UpBias,
    Fc,  // GPT-2 c_fc
    FcBias,
    Down,  // Llama down_proj, GPT-2 mlp.c_proj
    DownBias,
    FinalNorm,
    FinalNormBias,
    LmHead,
    LoraA,  // a LoRA adapter's A (r_max, in) of the base weight ParamSpec::lora_base names
    LoraB,  // its B (out, r_max)
    // QAT's learned scale factors (qat.learnable_scale; model/qat_runtime.h) of the weight of
    // role lora_base: (out) per channel, (out, in / group) per group, (1) per tensor; 1 at
    // first. Checkpoints hold them; HF model dirs do not (final/qat.json does).
    QatScale,
    // Gemma 2/3: the norms of the attention and MLP outputs (post_attention_layernorm,
    // post_feedforward_layernorm; the MLP's input norm, MlpNorm, is pre_feedforward_layernorm).
    PostAttnNorm,
    PostFfnNorm,
};

// How tensor parallelism splits a parameter (Megatron): column-parallel linears split their
// output rows (dim 0), row-parallel linears their input columns (dim 1), vocab-parallel tables
// their vocabulary rows (dim 0); everything else is replicated.
//
// max_parts > 0 says the split dim is that many indivisible pieces (GQA key/value heads): at
// tp <= max_parts it splits like any other dim; at tp > max_parts (tp a multiple of it) it is cut
// into max_parts slices and each slice is held by tp / max_parts consecutive ranks (shard.h).
//
// lead > 0 makes the groups unequal (Phi-3's qkv_proj, q | k | v under GQA): group 0 is lead
// times as wide as each of the others and is always cut into tp parts; max_parts caps the
// others only.
struct ShardRule {
    int dim = -1;       // -1 replicated; 0 rows; 1 columns (of the ETE (out, in) layout)
    int groups = 1;     // the split dim is G equal groups, each split across tp (c_attn q|k|v: 3)
    bool pad = false;   // a group may not divide by tp: pad it to a multiple of tp with zero rows
    int max_parts = 0;  // 0: no limit; else the most parts the split dim may be cut into
    int lead = 0;       // 0: equal groups; else group 0's width in units of the others'
};

struct ParamSpec {
    std::string name;  // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
    Shape shape;       // as this rank stores it; linears (out, in)
    ParamKind kind = ParamKind::Matrix;
    ParamInit init = ParamInit::Normal;
    float init_std = 0.02f;
    bool hf_transposed = false;  // HF stores it as shape reversed (GPT-2 Conv1D)
    bool trainable = true;
    ShardRule shard{};     // replicated unless set
    Shape global_shape{};  // the logical, unpadded shape (= shape without tensor parallelism)
    // The last pipeline stage's copy of a tied embedding (used as the LM head). Its gradient must
    // be summed with stage 0's embedding gradient before the optimizer step; it is not counted in
    // the gradient norm and not saved (stage 0 owns the tensor).
    bool tied_copy = false;
    ParamRole role = ParamRole::TokenEmbed;
    int layer = -1;  // decoder layer of a per-layer parameter, -1 otherwise
    // A frozen matrix stored in NF4 (core/nf4.h) with this block size; 0 = not quantized.
    int nf4_block = 0;
    bool nf4_double_quant = true;
    // LoraA / LoraB / QatScale: the role of the base weight the parameter belongs to (Q, K, ...,
    // Down; LmHead for a scale).
    ParamRole lora_base = ParamRole::TokenEmbed;
};

// This stage's parameters with this tp rank's local shapes (ModelParallel{} = the whole model):
// stage 0 holds the embeddings, each stage its layers [layer_begin, layer_end), the last stage
// the final norm and the LM head — for tied embeddings on more than one stage, a tied_copy of
// the embedding named like it, at the end of the table. In execution order (embeddings, layers,
// final norm, head); fused groups (q|k|v, gate|up) are adjacent so the model can run them as one
// GEMM, locally too. Throws ete::Error if the heads do not fit tp (ModelParallel::resolved).
// lora (model/lora_spec.h) enabled: every base parameter is frozen, the decoder's linears are NF4
// or in the compute dtype by lora.base_format, and each targeted linear's weight is followed by
// its adapter's A and B (the only trainable parameters).
// qat enabled with learnable_scale: each weight QAT quantizes has a QatScale parameter (named
// qat_scale_name of it, sharded with its rows, or its columns per group), at the end of its
// layer (after the LM head for the head).
struct LoraSpec;
struct QatSpec;
std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp = {});
std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp,
                                   const LoraSpec& lora);
std::vector<ParamSpec> param_specs(const ModelConfig& c, const ModelParallel& mp,
                                   const LoraSpec& lora, const QatSpec& qat);

// The name of a weight's learned QAT scale factors: "P.weight" -> "P.weight_scale_factor".
std::string qat_scale_name(const std::string& weight);

// Whether a parameter is a tensor of the HF model (not a LoRA adapter's, not QAT's scales).
bool param_in_hf_model(const ParamSpec& s);

// A weight of a decoder layer's linear (q/k/v/o, gate/up/down, GPT-2's Conv1Ds): what NF4
// quantizes; embeddings, norms, biases, the LM head and adapters are not.
bool param_is_decoder_linear(const ParamSpec& s);

// The LM head's weight name. A tied head (the token embedding) has no parameter of that name;
// its fake-quantized and integer copies go by it.
inline constexpr const char* kLmHeadName = "lm_head.weight";

// Weight decay applies to matrices only by default (not norms, biases, embeddings).
bool param_decays(const ParamSpec& p);

}  // namespace ete
