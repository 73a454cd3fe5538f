// ete/train/auto_layout.h — `parallel.auto = true`: `ete train` plans its own layout at start on
// the ranks it was given (train/plan.h's planner over this job measured: the GEMM rates every rank
// gets while all of them compute, the links between the ranks, the memory a rank may use) and
// trains with the fastest layout that fits.
//
// What it chooses: parallel.dp / tp / pp, train.recompute and parallel.zero_stage. What stays
// the user's: the global batch (train.micro_batch rows x train.grad_accum), the precision and the
// method (full training, or LoRA / QLoRA when lora.enabled), and everything else in the config.
#pragma once

#include "ete/parallel/launch_env.h"
#include "ete/train/config.h"

namespace ete {

// Collective over the job's ranks (every rank calls it at start, before the job check): returns
// cfg with the chosen layout and auto_predicted_step_s set; rank 0 logs the measurements, the
// choice, its predicted step and the runner-up. Throws ConfigError when no layout fits.
RunConfig auto_layout(const RunConfig& cfg, const LaunchInfo& launch);

// What the job check sees before parallel.auto has chosen: cfg with dp 0, tp 1, pp 1 (a mesh
// valid on any number of ranks), so a bad model, tokenizer or data path is still one error from
// every rank before any of them measures; cfg itself without parallel.auto.
RunConfig before_auto_layout(const RunConfig& cfg);

}  // namespace ete
