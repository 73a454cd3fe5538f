// ete/train/progress.h — what a run prints and records: metrics.jsonl (one JSON object per
// optimizer step) and the console (a live line on a TTY, plain `key: value | ...` lines
// otherwise). Only rank 0 writes either.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ete {

struct StepMetrics {
    int64_t step = 0;  // 1-based: the number of optimizer steps taken
    double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, step_ms = 0;
    int64_t tokens = 0;  // target tokens in this step
    // This rank's forward and backward (micro-batches or the pipeline schedule), waits included;
    // not written to metrics.jsonl (the straggler gather's input).
    double compute_ms = 0;
    std::optional<double> val_loss;
    // Data parallel: time this rank's step spent blocked on gradient all-reduces after
    // backward (what overlap could not hide).
    std::optional<double> comm_wait_ms;
    // Of the step's gradient buckets, how many started their all-reduce before backward had
    // finished (the last bucket became ready): the overlap actually achieved.
    std::optional<int64_t> buckets, buckets_early;
    // Pipeline parallel: the share of the step the stages spend not computing (mean over the
    // stages of 1 - compute / step time) beside 1F1B's theoretical (p - 1) / (m + p - 1).
    std::optional<double> pp_bubble, pp_bubble_theory;
    // Tensor parallel: time spent in the step's blocking tp all-reduces (forward and backward).
    std::optional<double> tp_comm_ms;
    // fp16: the loss scale the step ran with. skipped: under fp16 on every step, otherwise only
    // on a skipped one; skip_causes then maps each cause to the world ranks that raised it
    // ({"nonfinite_grad": [1]}, train/anomaly.h).
    std::optional<double> loss_scale;
    std::optional<bool> skipped;
    nlohmann::json skip_causes;
    // Every monitor.straggler_every steps (world > 1): the slowest rank's compute time over the
    // fastest rank's, and which rank it is.
    std::optional<double> straggler_score;
    std::optional<int> straggler_rank;
    // Dynamic LoRA rank: the adapters' rank after the step, and its change at this step.
    std::optional<int> lora_rank;
    std::optional<std::string> rank_change;  // e.g. "shrink 8 -> 4"
};

// The metrics.jsonl object of a step (also the source of the TensorBoard scalars).
nlohmann::json metrics_json(const StepMetrics& m);

class Progress {
  public:
    // metrics_path may be empty (no file). total_steps is for the ETA.
    Progress(const std::string& metrics_path, int64_t total_steps, int64_t log_every);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // elapsed_s and steps_run cover this invocation only (a resumed run starts mid-way).
    void record(const StepMetrics& m, double elapsed_s, int64_t steps_run);
    void finish();                          // ends the live line
    void message(const std::string& line);  // a line that does not break the live bar

    // Lines that could not be appended (disk full): each failure is undone (no half line) and
    // warned about once per run of failures; training goes on.
    int64_t lost_lines() const { return lost_; }

  private:
    void append(const std::string& line, int64_t step);

    int metrics_ = -1;  // O_APPEND descriptor of metrics.jsonl
    std::string path_;
    int64_t lost_ = 0;
    bool failing_ = false;
    int64_t total_, log_every_;
    bool tty_;
    bool live_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m07s", "42s"

}  // namespace ete
