// ete/model/param_spec.h — the one parameter table (DESIGN.md §3, STYLE.md habit 7).
//
// Every parameter of a model is one row: its HF name, its shape as ETE stores it, what kind of
// tensor it is (which decides weight decay), how it is initialised and whether HF stores it
// transposed (GPT-2 Conv1D keeps linears as (in, out); ETE keeps every linear as (out, in)).
// Allocation, initialisation, checkpoint keys and optimizer groups all derive from this table;
// sharding rules and LoRA/NF4 selection will be columns of it too.
#pragma once

#include <string>
#include <vector>

#include "ete/core/tensor.h"
#include "ete/model/config.h"

namespace ete {

enum class ParamKind { Matrix, Embedding, Norm, Bias };
enum class ParamInit { Normal, Zeros, Ones };

struct ParamSpec {
    std::string name;  // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
    Shape shape;       // as ETE stores it; linears (out, in)
    ParamKind kind = ParamKind::Matrix;
    ParamInit init = ParamInit::Normal;
    float init_std = 0.02f;
    bool hf_transposed = false;  // HF stores it as shape reversed (GPT-2 Conv1D)
    bool trainable = true;
};

// The table in execution order (embeddings, layer 0..L-1, final norm, head). Fused groups
// (q|k|v, gate|up) are adjacent so the model can run them as one GEMM.
std::vector<ParamSpec> param_specs(const ModelConfig& c);

// Weight decay applies to matrices only by default (not norms, biases, embeddings).
bool param_decays(const ParamSpec& p);

}  // namespace ete
