// ete/train/trainer.h — the training loop: data -> forward/backward -> clip -> AdamW -> metrics,
// with checkpoints, bit-exact resume and a clean stop on SIGTERM/SIGINT.
#pragma once

#include <string>
#include <vector>

#include "ete/train/config.h"

namespace ete {

// `ete train`'s exit code when the run stopped on repeated anomalies (docs/operations.md): not an
// error a restart can fix, so supervisors must not retry it.
constexpr int kExitDiverged = 3;

struct ResumeOptions {
    std::string from;                // "" = fresh run, "auto" = newest in the run dir, or a path
    std::vector<std::string> force;  // keys whose change a resume may accept ("train.steps", ...)
};

struct TrainSummary {
    int64_t start_step = 0;    // steps already done when this invocation began (resume)
    int64_t steps = 0;         // steps done when it ended
    bool interrupted = false;  // stopped by SIGTERM/SIGINT/SIGHUP after saving a checkpoint
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
