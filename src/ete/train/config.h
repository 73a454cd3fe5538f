// ete/train/config.h — the run configuration: TOML file, `--set section.key=value` overrides,
// and `--dump-config`, all driven by one key table so the three can never disagree.
#pragma once

#include <string>
#include <vector>

#include "ete/core/dtype.h"
#include "ete/data/sft.h"
#include "ete/model/config.h"

namespace ete {

// lora.targets' default, which lora_spec reads as "PEFT's default for the family".
inline constexpr const char* kDefaultLoraTargets = "q_proj,v_proj";

struct RunConfig {
    // [model] — used when model.init_from is empty (fresh init).
    std::string model_arch = "llama";
    // Whether model.num_kv_heads was given (TOML or --set): GPT-2, which has no grouped-query
    // attention, otherwise takes it from model.num_heads.
    bool model_kv_heads_given = false;
    ModelConfig model;
    std::string model_init_from;  // HF model dir to start from
    // [train]
    int64_t steps = 900;
    int micro_batch = 8;
    int seq_len = 128;
    int grad_accum = 1;
    double lr = 3e-3;
    double min_lr = 3e-4;
    int64_t warmup_steps = 40;
    std::string lr_schedule = "cosine";
    std::string optimizer = "adamw";  // adamw | adamw8bit (optim/optimizer.h)
    double weight_decay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double adam_eps = 1e-8;
    double grad_clip = 1.0;
    uint64_t seed = 1337;
    std::string recompute = "none";
    int64_t eval_every = 300;
    int eval_batches = 8;
    int64_t log_every = 50;
    std::string backend = "cpu";
    // Mixed precision (DESIGN.md §3b): the GEMMs' operand dtype; masters, gradients, optimizer
    // and statistics stay fp32. fp16 adds a dynamic loss scaler.
    std::string precision = "fp32";    // fp32 | bf16 | fp16
    std::string save_dtype;            // final/ dtype: "" = the precision's (fp32, bf16, fp16)
    int64_t loss_scale_window = 2000;  // fp16: clean steps before the loss scale doubles
    int64_t checkpoint_every = 0;      // steps between checkpoints (0 = only on SIGTERM/SIGINT)
    double checkpoint_minutes = 30;    // wall-clock minutes between checkpoints (0 = off)
    int keep_checkpoints = 3;          // newest committed checkpoints kept (0 = all)
    // Under Slurm: checkpoint this many seconds before the job's end time (0 = off).
    double checkpoint_before_end_s = 300;
    // Attempts in a row that resumed from the same step and ended without a clean stop (crashed,
    // killed, failed) before the next one refuses to start (0 = no limit): a requeued or
    // relaunched job that fails the same step every time stops instead of looping.
    int max_attempts_without_progress = 3;
    bool memory_check = true;  // refuse a run whose memory estimate exceeds what is free
    // [data]
    std::string data_format = "tokens";  // "tokens" (ETETOK01 shard) or "sft" (JSONL records)
    std::string data_train = "data/kjv.bin";
    double data_sft_max_bad_fraction = 0.01;
    bool data_sft_pack = false;  // several examples per row, attention kept inside each
    std::string data_sft_prompt_template = SftOptions{}.prompt_template;
    std::string data_sft_prompt_template_no_input = SftOptions{}.prompt_template_no_input;
    // Chat records: "ete" (ETE's "<|role|>" format), "model" (the chat_template of the
    // tokenizer_config.json beside data.tokenizer), or a path (data/sft_chat.h).
    std::string data_sft_chat_template = "ete";
    std::string data_tokenizer = "data/tokenizer.json";
    double data_val_fraction = 0.02;
    bool data_shuffle = true;  // false: every epoch in file order
    // [parallel] — the mesh dp x tp x pp must equal the number of ranks (mpirun -np N).
    // train.micro_batch and train.grad_accum describe the global step on any layout: each of the
    // dp replicas runs micro_batch / dp rows of every micro-batch (see README, Parallel runs).
    int parallel_dp = 0;  // 0 = world size / (tp * pp)
    int parallel_tp = 1;
    int parallel_pp = 1;
    std::string parallel_pp_layers;             // "" = balanced, or layers per stage "3,5"
    std::string parallel_uneven_batch = "pad";  // micro_batch % dp != 0: pad or drop rows
    double parallel_bucket_mb = 25;             // DP all-reduce bucket size (MiB)
    bool parallel_overlap = true;               // all-reduce buckets during backward
    bool parallel_grad_bf16 = false;            // communicate DP gradients in bf16
    bool parallel_zero1 = false;                // = parallel.zero_stage 1 (kept for old configs)
    int parallel_zero_stage = 0;  // ZeRO: 0 off, 1 optimizer state, 2 + gradients, 3 + parameters
    bool parallel_zero_reshard_after_forward = true;  // ZeRO-3: gather again for backward
    bool parallel_auto = false;  // plan dp/tp/pp, recompute, ZeRO at start (train/auto_layout.h)
    double auto_predicted_step_s = 0;  // parallel.auto's prediction (set at start, not a key)
    int64_t parallel_replica_check_every = 100;  // steps between replica checksums (0 = off)
    double parallel_timeout_s = 300;             // a collective slower than this is an error
    double parallel_hang_warn_s = 0;  // report a collective pending this long (0 = timeout / 5)
    // [lora] — LoRA / QLoRA fine-tuning (model/lora_spec.h): a frozen base, adapters trained.
    bool lora_enabled = false;
    int lora_r = 8;
    double lora_alpha = 16;
    double lora_dropout = 0;
    // Comma-separated PEFT names, or all-linear; left at the default: the family's PEFT default.
    std::string lora_targets = kDefaultLoraTargets;
    bool lora_use_rslora = false;
    std::string lora_base_format = "nf4";  // f32 | bf16 | nf4
    int lora_nf4_blocksize = 64;
    bool lora_double_quant = true;
    std::string lora_init_from;  // a PEFT adapter dir the adapters start from ("" = fresh)
    // Dynamic rank (train/rank_controller.h): adapters allocated at r_max, rank changed in place.
    bool lora_dynamic_rank = false;
    int lora_r_min = 2;
    int lora_r_max = 32;
    int64_t lora_rank_patience = 50;
    double lora_rank_shrink_threshold = 0.002;
    double lora_rank_grow_threshold = 1.0;
    // [monitor] — what operators scrape and plot (docs/operations.md).
    int monitor_prometheus_port = 0;  // rank 0 serves /metrics there (0 = off)
    std::string monitor_prometheus_addr = "127.0.0.1";
    bool monitor_tensorboard = false;      // RUN/tensorboard/events.out.tfevents.*
    double monitor_peak_flops = 0;         // per rank, for MFU (0 = measured at start)
    int64_t monitor_straggler_every = 10;  // steps between per-rank timing gathers (0 = off)
    bool monitor_watchdog = true;          // flight recorder + hang watchdog (world > 1)
    // [anomaly] — steps every rank agrees to skip (train/anomaly.h, docs/operations.md).
    double anomaly_spike_zscore = 0;  // 0 = no spike detection (non-finite values always skip)
    int anomaly_window = 100;
    int anomaly_max_consecutive_skips = 5;
    std::string anomaly_on_repeated = "stop";  // stop | rollback
    int anomaly_max_rollbacks = 3;
    // [qat] — quantization-aware training (model/qat_spec.h, docs/qat.md).
    bool qat_enabled = false;
    std::string qat_points = "weight,linear_in";
    std::string qat_linears = "all-linear";
    int qat_weight_bits = 8;
    int qat_act_bits = 8;
    std::string qat_weight_granularity = "channel";  // channel | tensor | group
    std::string qat_act_granularity = "tensor";      // tensor | token
    int qat_group_size = 128;
    std::string qat_observer = "moving_average";  // moving_average | minmax
    double qat_averaging_constant = 0.01;
    int64_t qat_warmup_steps = 0;
    int64_t qat_freeze_step = 0;       // 0 = never
    std::string qat_skip_layers;       // e.g. "0,-1"
    bool qat_learnable_scale = false;  // LSQ: the weights' scales are trained
};

// The embedded default: a small Llama on the bundled KJV corpus (see README quickstart).
RunConfig default_run_config();

// Applies a TOML document (file contents) onto cfg; unknown keys and bad values throw ete::Error
// naming the key and the expected form. `where` names the source in messages.
void apply_toml(RunConfig& cfg, const std::string& toml_text, const std::string& where);
// Applies one `section.key=value` override.
void apply_override(RunConfig& cfg, const std::string& assignment);
// The resolved config as TOML (every key, so the output is a complete, reloadable config).
std::string dump_toml(const RunConfig& cfg);
// Cross-key checks after all sources are applied (model shape, batch sizes, ...).
void validate(const RunConfig& cfg);
// The compute dtype of train.precision, and the dtype final/ is saved in (train.save_dtype, or
// the precision's natural choice).
DType compute_dtype(const RunConfig& cfg);
DType save_dtype(const RunConfig& cfg);
// The ZeRO stage in effect: parallel.zero_stage, or 1 for parallel.zero1 = true.
inline int zero_stage(const RunConfig& cfg) {
    return cfg.parallel_zero_stage > 0 ? cfg.parallel_zero_stage : (cfg.parallel_zero1 ? 1 : 0);
}
// Whether ZeRO stage 2 shards the gradient buffer itself (each group's gradient in a window,
// reduced into the replica's shard after its backward: model/param_store.h), for model mc over
// dp replicas and pp stages at ZeRO stage `stage`. Not with QAT's learned scales (their masks
// rewrite whole weight gradients after backward; refused at stage 2 anyway, config.cpp: QAT's range
// scales leave every gradient as backward wrote it) nor with embeddings tied across pipeline stages
// (their gradients are summed whole between the stages): there a replica keeps the whole buffer
// and reduces each bucket to its owners.
inline bool zero2_shards_grads(const RunConfig& cfg, const ModelConfig& mc, int dp, int pp,
                               int stage) {
    const bool tied = mc.family().always_tied || mc.tie_word_embeddings;
    return dp > 1 && stage == 2 && !(cfg.qat_enabled && cfg.qat_learnable_scale) &&
           !(pp > 1 && tied);
}
inline bool zero2_shards_grads(const RunConfig& cfg, const ModelConfig& mc, int dp, int pp) {
    return zero2_shards_grads(cfg, mc, dp, pp, zero_stage(cfg));
}

// The [lora] section as the model sees it (enabled = false when LoRA is off). lora.targets left at
// its default on GPT-2 or Phi-3 (no q_proj/v_proj) is PEFT's default for that family.
struct LoraSpec;
LoraSpec lora_spec(const RunConfig& cfg);
struct AnomalyConfig;
AnomalyConfig anomaly_config(const RunConfig& cfg);
// The [qat] section as the model sees it (a disabled default spec when qat.enabled = false);
// throws naming a qat.* key whose value does not parse.
struct QatSpec;
QatSpec qat_spec(const RunConfig& cfg);

// All keys with a one-line description, for --help.
std::vector<std::pair<std::string, std::string>> config_keys_help();

}  // namespace ete
