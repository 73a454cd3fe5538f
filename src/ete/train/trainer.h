// ete/train/trainer.h — the training loop: data -> forward/backward -> clip -> AdamW -> metrics.
#pragma once

#include <string>

#include "ete/train/config.h"

namespace ete {

struct TrainSummary {
    int64_t steps = 0;
    double final_loss = 0;
    double final_val_loss = -1;  // < 0 when there is no validation split
    double tokens_per_s = 0;     // median over the run
};

// Runs a full training job and writes out_dir/{config.toml, metrics.jsonl, final/}.
TrainSummary run_training(RunConfig cfg, const std::string& out_dir);

}  // namespace ete
