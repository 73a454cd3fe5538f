// ete/train/trainer.h — the training loop: data -> forward/backward -> clip -> AdamW -> metrics,
// with checkpoints, bit-exact resume and a clean stop on a signal.
#pragma once

#include <string>
#include <vector>

#include "ete/train/config.h"

namespace ete {

// `ete train`'s exit code when the run stopped on repeated anomalies (docs/operations.md): not an
// error a restart can fix, so supervisors must not retry it.
constexpr int kExitDiverged = 3;
// `ete train`'s exit code when a signal stopped the run before its last step and the checkpoint
// of the last step is committed: resumable (`--resume auto`), what Slurm requeue rules and
// `ete launch` read as a clean stop. 0 is kept for a run that finished.
constexpr int kExitStopped = 4;

struct ResumeOptions {
    std::string from;                // "" = fresh run, "auto" = newest in the run dir, or a path
    std::vector<std::string> force;  // keys whose change a resume may accept ("train.steps", ...)
};

struct TrainSummary {
    int64_t start_step = 0;    // steps already done when this invocation began (resume)
    int64_t steps = 0;         // steps done when it ended
    bool interrupted = false;  // stopped by a signal (checkpoint saved): kExitStopped
    // Stopped by anomaly.on_repeated (after saving a checkpoint of the last good weights): the
    // CLI exits with kExitDiverged.
    bool diverged = false;
    double final_loss = 0;
    double final_val_loss = -1;  // < 0 when there is no validation split
    double tokens_per_s = 0;     // median over this invocation
};

// Runs (or resumes) a training job and writes out_dir/{config.toml, metrics.jsonl,
// checkpoints/, final/}.
TrainSummary run_training(RunConfig cfg, const std::string& out_dir,
                          const ResumeOptions& resume = {});

}  // namespace ete
