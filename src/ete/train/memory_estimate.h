// ete/train/memory_estimate.h — the peak memory a training run will need on this rank, by term,
// printed at start and compared with the measured peak RSS after the first steps.
//
// Terms (bytes, this rank):
//   runtime      resident before the model was built: libraries, tokenizer, mapped data
//   frozen base  frozen parameters (a LoRA base: dense, or NF4 with its statistics)
//   weights      trainable F32 masters (+ the 16-bit compute copy under mixed precision)
//   gradients    F32, one per trainable element
//   optimizer    the optimizer's state (optim/optimizer.h: AdamW's two F32 moments, 8-bit
//                AdamW's codes and block absmax), sharded over dp with ZeRO
//   activations  the arena (every slot's saved activations and the shared scratch)
//   comm         data-parallel bucket staging (bf16 copies; the host copy of non-host backends)
//   workspace    NF4 dequantization tiles, and the GEMM engines' buffers
//                (Backend::gemm_workspace_bytes: per thread, and a 16-bit fallback's staging)
//   loading      transient: the largest tensor on the host while a model dir is read (f32 as
//                read, its transposed copy for GPT-2's Conv1D, its 16-bit or NF4 form)
// Two moments compete for the peak: training (runtime + frozen + weights + gradients + optimizer
// + activations + comm + workspace) and loading the largest tensor, when the activations are
// already resident (the arena is zeroed at setup) but the NF4 buffers are not yet allocated
// (runtime + dense frozen + weights + gradients + optimizer + activations + loading).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ete/model/transformer.h"
#include "ete/parallel/mesh.h"
#include "ete/train/config.h"

namespace ete {

struct MemoryEstimate {
    uint64_t runtime = 0, frozen = 0, weights = 0, gradients = 0, optimizer = 0;
    uint64_t activations = 0, comm = 0, workspace = 0, loading = 0;
    uint64_t frozen_dense = 0;  // the part of `frozen` allocated before loading (not NF4)
    uint64_t peak() const;
    // "frozen base 312.4 MiB | adapters 4.1 MiB | ... | peak 1.21 GiB"
    std::string line(bool lora) const;
};

// dp: data-parallel replicas; threads: compute threads (OpenMP). activations: the arena's size
// when the model is not set up yet (Transformer::plan_activation_bytes), else its capacity.
MemoryEstimate estimate_memory(const Transformer& model, const RunConfig& cfg, int dp,
                               uint64_t runtime_bytes, int threads,
                               std::optional<uint64_t> activations = std::nullopt);

// The estimate of one rank of a layout without holding its model: the model of pipeline stage
// `stage`, tensor-parallel rank `tp_rank`, built on the planning backend (make_planning_backend:
// address space that is never backed) with cfg's precision, LoRA/QLoRA, QAT, recompute and
// batch, and estimate_memory's terms for that rank of dp replica 0 (the one with the most rows).
// Under tp the shards of all tp ranks are built on an in-process fake group (the kv-head groups
// of GQA split it), so every figure is the run's own. The weights of a 70B model build in no
// memory and milliseconds.
MemoryEstimate plan_memory(const ModelConfig& mc, const RunConfig& cfg, const MeshShape& mesh,
                           int stage, int tp_rank, uint64_t runtime_bytes, int threads);
// plan_memory in two steps, to estimate many batch settings on one build: calls each(model) with
// the planning-backend model of (stage, tp_rank) — under tp inside the fake group, on that rank —
// and estimate_planned gives cfg's estimate for it (cfg may differ from the build's in what does
// not change the model: micro-batch, grad_accum, recompute, ZeRO stage, optimizer, buckets).
void with_planned_model(const ModelConfig& mc, const RunConfig& cfg, const MeshShape& mesh,
                        int stage, int tp_rank, const std::function<void(Transformer&)>& each);
MemoryEstimate estimate_planned(Transformer& model, const RunConfig& cfg, const MeshShape& mesh,
                                uint64_t runtime_bytes, int threads);

// Before the activations and batch buffers are allocated: throws when this rank's estimated peak
// exceeds what it can still get (core/mem_stats.h available_memory, shared by the `local_ranks`
// ranks of this host), naming the figures and the keys that drive the largest part.
// batch_bytes: the token buffers of a step.
void check_memory(const MemoryEstimate& e, const RunConfig& cfg, uint64_t batch_bytes,
                  int local_ranks);

// "1.21 GiB", "312.4 MiB".
std::string format_bytes(uint64_t b);

}  // namespace ete
