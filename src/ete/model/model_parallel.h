// ete/model/model_parallel.h — where one model replica's rank sits in tensor and pipeline
// parallelism (DESIGN.md §4), as a plain value handed to param_specs() and Transformer.
//
// Tensor parallelism (Megatron): the tp ranks of a group each hold a slice of every sharded
// parameter (ParamSpec::shard) and run the same layers on the same replicated activations, with
// one all-reduce per attention block and per MLP. GQA kv heads split when tp divides their
// number and are replicated when their number divides tp (each on tp / KV ranks; the Transformer
// sums those copies' gradients). Pipeline parallelism: stage s holds the contiguous global
// layers [layer_begin, layer_end); stage 0 also holds the embedding, the last stage the final
// norm and the LM head.
#pragma once

#include <string>
#include <vector>

#include "ete/model/config.h"

namespace ete {

class Communicator;

struct ModelParallel {
    // The tensor-parallel group (not owned). nullptr means tp_size 1; param_specs() alone also
    // accepts nullptr with tp_size > 1 (shapes are pure arithmetic), a Transformer does not.
    Communicator* tp = nullptr;
    int tp_rank = 0, tp_size = 1;
    int stage = 0, num_stages = 1;
    int layer_begin = 0, layer_end = -1;  // global layers of this stage; -1 = num_layers
    // ZeRO stage 3 (parallel.zero_stage = 3): the data-parallel group over backend memory (not
    // owned) across which the trainable parameters are sharded; null = not sharded. The model
    // gathers each group of parameters before use and reduces its gradients into the shard
    // (model/param_store.h "ZeRO-3"). reshard: release a layer's gathered parameters after its
    // forward and gather them again for its backward (parallel.zero_reshard_after_forward).
    Communicator* zero3 = nullptr;
    bool zero3_reshard = true;
    // ZeRO stage 2 (parallel.zero_stage = 2), when set and zero3 is not: only the gradients are
    // sharded over this group; each group of layers writes its gradient into a window that is
    // reduced into the owners' shards after its backward, as at stage 3.
    Communicator* zero2 = nullptr;
    // The window reductions of stages 2 and 3 send bf16 (parallel.grad_bf16: each piece rounded
    // to bf16, summed in f32 and rounded per step by the transport, as GradSync's bf16 buckets).
    bool zero_reduce_bf16 = false;

    bool first_stage() const { return stage == 0; }
    bool last_stage() const { return stage == num_stages - 1; }
    // A copy with layer_end resolved against `c`, after checking every field (ete::Error naming
    // parallel.tp / parallel.pp / model.num_heads / model.num_kv_heads and what was expected).
    ModelParallel resolved(const ModelConfig& c) const;
};

// Stage boundaries for `num_stages` pipeline stages: a vector b of size num_stages + 1 with
// b[0] = 0, b[num_stages] = num_layers, stage s holding layers [b[s], b[s+1]), each >= 1 layer.
//
// spec "" balances the estimated cost (layer_cost_model below); otherwise spec lists the layers
// per stage, e.g. "4,4,3,5" (parallel.pp_layers: num_stages positive counts summing to L).
std::vector<int> pipeline_layer_bounds(const ModelConfig& c, int num_stages,
                                       const std::string& spec = "");

// The cost model behind balanced stages, in units of one decoder layer's cost. Costs are forward
// FLOPs per token (backward ≈ 2× forward for every part, so the ratios hold for a whole step):
//   layer     = 2·(matmul parameters of a layer) + 2·T·H·D   (causal attention: QKᵀ and P·V over
//               T/2 keys on average, T = max_position_embeddings, the longest sequence)
//   embedding = 2·C                                           (row lookup, plus GPT-2's wpe add)
//   head      = 2·V·C + 5·V + 5·C                             (LM head GEMM, softmax/loss, norm)
struct StageCosts {
    double embedding = 0;  // extra cost of stage 0, in layers
    double head = 0;       // extra cost of the last stage, in layers
};
StageCosts layer_cost_model(const ModelConfig& c);

}  // namespace ete
