// ete/train/run_setup.h — the pieces of a training job around the loop (internal to train/):
// the resolved model config, the tokenizer, the data source, the settings a resume must find
// unchanged, metrics truncation on resume, and the SIGTERM/SIGINT stop request.
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

// SIGTERM, SIGINT, SIGHUP and SIGUSR2 ask for a clean stop (SIGUSR2 is what `ete launch` sends
// through mpirun, which forwards it to every rank but answers SIGTERM with SIGKILL a second
// later): the current step finishes, a checkpoint is
// saved, the run exits 0. The handler resets itself, so a second signal terminates at once.
// SIGUSR1 asks for a checkpoint after the current step, and training goes on (Slurm's
// `--signal=USR1@120` warning before pre-emption). SIGPIPE is ignored while training: a closed
// stdout or stderr (`ete train ... | head -1`) never kills a run, its writes just fail.
class StopSignals {
  public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    int pending() const;  // the stop signal's number, or 0
    // Whether SIGUSR1 arrived since the last call (the request is consumed).
    bool take_checkpoint_request();

  private:
    static constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR2, SIGUSR1, SIGPIPE};
    struct sigaction old_[6] = {};
};

// "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR2", or "signal N".
std::string signal_name(int sig);

// The model config for this run: from model.init_from, or [model] with the vocabulary and
// special ids taken from the tokenizer. Also writes it back into cfg.model.
ModelConfig resolve_model(RunConfig& cfg, const std::optional<Tokenizer>& tok);
std::optional<Tokenizer> load_tokenizer(const RunConfig& cfg);
// The batch source of data.format: a token-shard sampler (over *shard, which it fills and which
// must outlive it) or an SFT dataset.
std::unique_ptr<BatchSource> open_data(const RunConfig& cfg, const ModelConfig& mc,
                                       const std::optional<Tokenizer>& tok,
                                       std::optional<TokenShard>& shard);

// The settings a resume must find unchanged for the continuation to be bit-exact.
// lora_base_hash: model_dir_hash of a LoRA run's base dir ("" without LoRA or without a dir).
nlohmann::json run_settings(const RunConfig& c, const ModelConfig& mc,
                            const std::string& lora_base_hash = "");
void check_resume_compatible(const nlohmann::json& saved, const nlohmann::json& now,
                             const std::string& from, const std::vector<std::string>& force);
// Keeps the metrics of steps <= step, so a resumed run's file equals an uninterrupted one's.
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace ete
