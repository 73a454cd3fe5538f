// ete/train/job_check.h — the checks of a training job that depend only on its config and on
// files every rank reads alike: the model (with model.init_from's config.json), the tokenizer's
// path, the mesh on the job's ranks, every stage's tensor and pipeline split and its parameter
// shapes, the LoRA and QAT specs, the batch's split over the data-parallel replicas, and (for
// `ete launch`, check_train_job) the data file and a token shard's vocabulary. They run
// before a rank talks to another, so every rank of a job meets the same error at the same point:
// `ete train` reports it from the first rank of each node and ends without aborting MPI, and
// `ete launch` runs the checks before it starts any rank.
#pragma once

#include "ete/train/config.h"

namespace ete {

// Throws ConfigError (core/error.h) with the first failed check's message.
void check_job(const RunConfig& cfg, int world_size);
// check_job and the training data: data.train exists and, as a token shard, its vocabulary fits
// the model's. `ete launch` runs it on its node before it starts any rank; the ranks themselves
// run check_job only (node-local data may differ between nodes, and a rank whose data fails ends
// the job with MPI_Abort rather than leave its peers waiting in MPI_Init).
void check_train_job(const RunConfig& cfg, int world_size);

}  // namespace ete
