// ete/train/plan.h — `ete plan`: the layouts a job could run with on a cluster (dp, tp, pp,
// micro-batch, recompute, ZeRO stage, precision, and for a fine-tune full / LoRA / QLoRA), the
// ones `ete train` accepts (train/job_check.h) and that fit (the engine's own memory estimate of
// every pipeline stage, plan_memory, against the device's memory), ranked by a predicted step
// time.
//
// The cost model of one optimizer step (B = global batch rows, T = sequence, m = grad_accum
// micro-batches, N = dp·tp·pp devices; bandwidths per device, one direction):
//   compute     model FLOPs per token (monitor.h: 6 per weight, 4 per frozen weight, attention
//               unless measured) × B·T / N at the precision's achieved rate (where measured, the
//               model's own GEMMs' at the layout's tp and rows: ClusterSpec::gemm_tflops); QLoRA
//               × 1.18 (its
//               NF4 dequantization: QLoRA/LoRA step time measured on the 1.1B Llama,
//               docs/benchmarks.md)
//   attention   where the cluster measured it (attention_s, local): a rank's causal scores ×
//               head dim, (B/dp)·(L/pp)·(H/tp)·T(T+1)/2·D, times attention_s
//   elementwise where the memory bandwidth is given: a rank's fp32 traffic of the ops between
//               the GEMMs, forward and backward, per token of its replica (B·T/dp), 4 bytes an
//               element: per layer of its stage 24·C (two norms: 6C each; two residual adds:
//               6C each) + 8·F/tp for a gated MLP, 5·F/tp otherwise (the activation: 3 forward,
//               5 or 2 backward) + 4·(H + KV)·D/tp (RoPE on q and k, both ways); and 3·V/tp
//               (the loss's logits, probabilities, gradient) + 2·C (embedding)
//   recompute   full: compute, attention and elementwise × (1 + forward share): the forward runs
//               again (1/3 of a full step's work, 1/2 of a frozen base's)
//   bubble      1F1B: (compute + attention + elementwise) × (pp − 1) / m, each stage's idle share
//   tp          per micro-batch and layer of the stage, 4 all-reduces (6 with recompute) of the
//               (rows, T, C) activations in the compute dtype: a ring's 2(tp−1)/tp of the bytes
//               over the link the tp group crosses, 2(tp−1) latencies each; not overlapped
//   pp          per micro-batch, the stage boundary's (rows, T, C) fp32 activations forward and
//               their gradient back: 2·m transfers over the pp link; counted as exposed
//   dp          the gradient all-reduce (fp32, bf16 with parallel.grad_bf16; stage 2 with
//               NCCL a reduce, half the bytes), overlapped with the last micro-batch's backward
//               (2/3 of its work) except its last bucket (parallel.bucket_mb): exposed =
//               max(comm − backward, last bucket); where the cluster does not overlap (MPI on
//               CPU ranks, cluster.h) or parallel.overlap = false, all exposed
//               stage 3: each group's (embeddings, a layer, head) fp32 gradient reduced to its
//               owners every micro-batch right after its backward, not overlapped (NCCL: (dp−1)/dp
//               of the bytes; MPI: an all-reduce), a latency per group
//   zero        stages 1-2: the masters' all-gather after the step ((dp−1)/dp · 4 bytes per
//               trainable element of the rank), not overlapped; stage 3: the parameter gathers,
//               (dp−1)/dp · (4 bytes per trainable element + the rank's frozen base as stored)
//               per forward and again per backward (reshard),
//               every micro-batch, log2(dp) latencies a group, prefetched behind the previous
//               group's work where the cluster overlaps: exposed max(gathers − work, one
//               group's share)
//   optimizer   the optimizer's pass over the rank's shard (≈ 30 bytes per element for AdamW, 16
//               for 8-bit AdamW) plus clipping's two passes and zeroing the gradients over the
//               rank's elements (16 bytes) at device_memory_gbytes_per_s; left out when that is
//               not given
// Links: ranks are placed in launch order (the mesh's rank order, parallel/mesh.h), a node holding
// devices_per_node consecutive ranks; a group whose ranks share one node uses the intra-node
// link, any other the inter-node one. Where the cluster file gives node_link_gbytes_per_s, each
// layout is priced on the placement `ete launch --placement auto` makes of it instead
// (parallel/placement.h, on these bytes): each axis at the slowest link of its slowest group,
// with the inter-node latencies where a group spans nodes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ete/model/config.h"
#include "ete/parallel/placement.h"
#include "ete/train/cluster.h"
#include "ete/train/config.h"

namespace ete {

struct PlanLayout {
    int dp = 1, tp = 1, pp = 1;
    int micro_batch = 1;  // rows of a global micro-batch (train.micro_batch; micro_batch/dp each)
    int grad_accum = 1;
    std::string recompute = "none";  // none | full
    int zero_stage = 0;
    std::string precision = "bf16";  // bf16 | fp32
    std::string method = "full";     // full | lora | qlora
};

struct StepCost {
    double compute = 0, attention = 0, elementwise = 0;  // a rank's work (GEMMs; the rest)
    double bubble = 0, tp = 0, pp = 0, dp = 0, dp_exposed = 0, zero = 0;
    double optimizer = 0;
    double work() const { return compute + attention + elementwise; }
    double total() const { return work() + bubble + tp + pp + dp_exposed + zero + optimizer; }
};

struct PlanCandidate {
    PlanLayout layout;
    StepCost cost;
    double peak_gib = 0;  // the largest stage's estimated peak (tp rank 0)
    int peak_stage = 0;
    double tokens_per_s = 0;
    // Where the cluster describes its nodes' links: the placement its cost is priced on
    // (describe_placement: "tp: 2 groups on 24 GB/s; dp: ...").
    std::string placement;
};

struct PlanRequest {
    RunConfig base;  // the model and everything a layout does not set (LoRA rank, targets, ...)
    ModelConfig model;
    int seq = 0;
    int64_t global_batch = 0;                 // rows per optimizer step
    std::string goal = "pretrain";            // pretrain | finetune
    std::map<std::string, std::string> pins;  // --layout: a PlanLayout field name -> value
    uint64_t runtime_bytes = 0;               // a rank's memory before its model (0: a GPU's)
    int threads = 1;                          // compute threads a rank (the GEMM workspace)
};

struct Plan {
    std::vector<PlanCandidate> ranked;                         // fitting, fastest first
    std::vector<std::pair<PlanLayout, std::string>> rejected;  // with the reason
};

// Parses --layout "dp=2,tp=4,recompute=full" into pins; names the bad field or value.
std::map<std::string, std::string> parse_layout_pins(const std::string& text);
Plan make_plan(const PlanRequest& req, const ClusterSpec& cluster);
// Where the model's GEMM rate is worth measuring for this request (--cluster local,
// parallel.auto: measure_model_gemms): each precision and tp of its layouts at the fewest and the
// most rows a replica micro-batch has; the same on every rank that asks.
std::vector<GemmPoint> gemm_points(const PlanRequest& req, const ClusterSpec& cluster);
// The run config of a layout (base with the layout's keys set).
RunConfig layout_config(const RunConfig& base, int seq, const PlanLayout& l);
// The bytes each group of an axis moves over its slowest link per step under `cfg`'s layout, the
// cost model's terms above without the links (what placement weighs, parallel/placement.h): tp
// 2(tp − 1)/tp of each all-reduce's activations, pp the boundary's activations and gradients, dp
// 2(dp − 1)/dp of the gradients (fp32, or bf16 with parallel.grad_bf16) of a rank's share
// (trainable_total / (tp · pp)).
AxisBytes comm_bytes(const RunConfig& cfg, const ModelConfig& mc, int64_t trainable_total);
// Trainable elements of the whole model under cfg (the adapters of a frozen base).
int64_t trainable_elements(const ModelConfig& mc, const RunConfig& cfg);
// The `--set` arguments that select the layout, e.g. "--set parallel.dp=8 --set ...".
std::string layout_sets(const PlanLayout& l, int seq);

}  // namespace ete
