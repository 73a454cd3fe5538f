// ete/train/run_setup.h — the pieces of a training job around the loop (internal to train/):
// the resolved model config, the tokenizer, the data source, the settings a resume must find
// unchanged, metrics truncation on resume, and the stop and checkpoint signals.
#pragma once

#include <chrono>
#include <csignal>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ete/data/batch_source.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/train/config.h"

namespace ete {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0);

// The trainer's view of the process's signals (core/signals.h; `ete train` installs the
// handlers at the first instruction of main, so a request made during start-up is kept): SIGTERM,
// SIGINT, SIGHUP and SIGUSR2 (what `ete launch` sends through mpirun) ask for a clean stop — the
// current step finishes, a checkpoint is saved, the run exits kExitStopped; repeats never
// interrupt the save (a second SIGINT ends at once). SIGUSR1 asks for a checkpoint after the
// current step, and training goes on. SIGPIPE is ignored while training: a closed stdout or
// stderr (`ete train ... | head -1`) never kills a run, its writes just fail. A scope that finds
// no handlers (a test calling run_training) installs them and removes them again.
class StopSignals {
  public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    int pending() const;  // the first stop signal's number, or 0
    // Whether SIGUSR1 arrived since the last call (the request is consumed).
    bool take_checkpoint_request();

  private:
    bool installed_here_ = false;
    struct sigaction old_pipe_ = {};
};

// The model config for this run: from model.init_from, or [model] with the vocabulary and
// special ids taken from the tokenizer. Also writes it back into cfg.model.
ModelConfig resolve_model(RunConfig& cfg, const std::optional<Tokenizer>& tok);
std::optional<Tokenizer> load_tokenizer(const RunConfig& cfg);
// Throws naming data.tokenizer when it is set and names no file.
void check_tokenizer_path(const RunConfig& cfg);
// data.train exists; a token shard's vocabulary fits the model's (job_check.h runs both before
// a rank talks to another, open_data again).
void check_data_file(const RunConfig& cfg);
void check_shard_fits(const RunConfig& cfg, const TokenShard& shard, const ModelConfig& mc);
// The batch source of data.format: a token-shard sampler (over *shard, which it fills and which
// must outlive it) or an SFT dataset. warn: whether this process reports the file's skipped
// lines (world rank 0 alone in a job: every rank reads the same file).
std::unique_ptr<BatchSource> open_data(const RunConfig& cfg, const ModelConfig& mc,
                                       const std::optional<Tokenizer>& tok,
                                       std::optional<TokenShard>& shard, bool warn = true);

// The settings a resume must find unchanged for the continuation to be bit-exact.
// lora_base_hash: model_dir_hash of a LoRA run's base dir ("" without LoRA or without a dir).
nlohmann::json run_settings(const RunConfig& c, const ModelConfig& mc,
                            const std::string& lora_base_hash = "");
void check_resume_compatible(const nlohmann::json& saved, const nlohmann::json& now,
                             const std::string& from, const std::vector<std::string>& force);
// Keeps the metrics of steps <= step, so a resumed run's file equals an uninterrupted one's.
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace ete
