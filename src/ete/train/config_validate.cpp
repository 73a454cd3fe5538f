// ete/train/config_validate.cpp — what a RunConfig must satisfy before a run starts (validate:
// each key's range, and the combinations that cannot train), and the specs derived from it
// (precision dtypes, LoRA, QAT, anomaly handling). config.cpp holds the key table.
#include <string>

#include "ete/core/error.h"
#include "ete/model/qat_spec.h"
#include "ete/model/transformer.h"
#include "ete/train/anomaly.h"
#include "ete/train/config.h"

namespace ete {

namespace {

DType precision_dtype(const std::string& v, const char* key) {
    if (v == "fp32") return DType::F32;
    if (v == "bf16") return DType::BF16;
    if (v == "fp16") return DType::F16;
    throw_error(fmt::format("{} = '{}': expected fp32, bf16 or fp16", key, v));
}

}  // namespace

DType compute_dtype(const RunConfig& c) {
    return precision_dtype(c.precision, "train.precision");
}

DType save_dtype(const RunConfig& c) {
    return c.save_dtype.empty() ? compute_dtype(c)
                                : precision_dtype(c.save_dtype, "train.save_dtype");
}

namespace {

// train.*: the model, the step and the optimizer.
void validate_train(const RunConfig& c) {
    ETE_CHECK(family_named(c.model_arch), "model.arch = '{}': expected {}", c.model_arch,
              family_names());
    ETE_CHECK(c.steps > 0, "train.steps = {}: expected > 0", c.steps);
    ETE_CHECK(c.micro_batch > 0, "train.micro_batch = {}: expected > 0", c.micro_batch);
    ETE_CHECK(c.seq_len > 0, "train.seq_len = {}: expected > 0", c.seq_len);
    ETE_CHECK(c.grad_accum > 0, "train.grad_accum = {}: expected > 0", c.grad_accum);
    // Finite is checked as every number is read; these bound what can train at all (lr = 1e3
    // turns the loss NaN within steps; decay above 10 per unit lr flips weights' signs).
    ETE_CHECK(c.lr > 0 && c.lr <= 10, "train.lr = {}: expected in (0, 10]", c.lr);
    ETE_CHECK(c.min_lr >= 0 && c.min_lr <= c.lr, "train.min_lr = {}: expected in [0, train.lr]",
              c.min_lr);
    ETE_CHECK(c.warmup_steps >= 0, "train.warmup_steps = {}: expected >= 0", c.warmup_steps);
    ETE_CHECK(c.optimizer == "adamw" || c.optimizer == "adamw8bit",
              "train.optimizer = '{}': expected adamw or adamw8bit", c.optimizer);
    ETE_CHECK(c.optimizer != "adamw8bit" || c.backend != "cuda",
              "train.optimizer = adamw8bit: 8-bit AdamW has no CUDA kernel yet (expected "
              "train.backend = cpu, or train.optimizer = adamw)");
    ETE_CHECK(c.weight_decay >= 0 && c.weight_decay <= 10,
              "train.weight_decay = {}: expected in [0, 10]", c.weight_decay);
    ETE_CHECK(c.beta1 >= 0 && c.beta1 < 1, "train.beta1 = {}: expected in [0, 1)", c.beta1);
    ETE_CHECK(c.beta2 >= 0 && c.beta2 < 1, "train.beta2 = {}: expected in [0, 1)", c.beta2);
    ETE_CHECK(c.adam_eps > 0 && c.adam_eps <= 1, "train.adam_eps = {}: expected in (0, 1]",
              c.adam_eps);
    ETE_CHECK(c.model.initializer_range > 0 && c.model.initializer_range <= 10,
              "model.initializer_range = {}: expected in (0, 10]", c.model.initializer_range);
    ETE_CHECK(c.grad_clip >= 0, "train.grad_clip = {}: expected >= 0", c.grad_clip);
    compute_dtype(c);
    save_dtype(c);
    ETE_CHECK(c.loss_scale_window > 0, "train.loss_scale_window = {}: expected > 0",
              c.loss_scale_window);
    // With model.init_from the layer count is known only once the model dir is read.
    if (c.model_init_from.empty() && c.model.num_layers > 0) {
        recompute_plan(c.recompute, c.model.num_layers);
    }
}

// Evaluation, logging, checkpoints, attempts, anomalies and QAT.
void validate_run(const RunConfig& c) {
    ETE_CHECK(c.eval_every >= 0, "train.eval_every = {}: expected >= 0", c.eval_every);
    ETE_CHECK(c.eval_batches > 0, "train.eval_batches = {}: expected > 0", c.eval_batches);
    ETE_CHECK(c.log_every > 0, "train.log_every = {}: expected > 0", c.log_every);
    ETE_CHECK(c.checkpoint_every >= 0, "train.checkpoint_every = {}: expected >= 0",
              c.checkpoint_every);
    ETE_CHECK(c.keep_checkpoints >= 0, "train.keep_checkpoints = {}: expected >= 0",
              c.keep_checkpoints);
    ETE_CHECK(c.checkpoint_minutes >= 0, "train.checkpoint_minutes = {}: expected >= 0 (0 = off)",
              c.checkpoint_minutes);
    ETE_CHECK(c.checkpoint_before_end_s >= 0,
              "train.checkpoint_before_end_s = {}: expected >= 0 (0 = off)",
              c.checkpoint_before_end_s);
    ETE_CHECK(c.max_attempts_without_progress >= 0,
              "train.max_attempts_without_progress = {}: expected >= 0 (0 = no limit)",
              c.max_attempts_without_progress);
    validate_anomaly(anomaly_config(c));
    if (c.qat_enabled) {
        const QatSpec q = qat_spec(c);  // parses every qat.* string
        if (c.model_init_from.empty()) check_qat_spec(q, c.model);
        ETE_CHECK(!q.learnable_scale || !c.lora_enabled,
                  "qat.learnable_scale = true: a LoRA run's base weights are frozen, so their "
                  "scales cannot be trained (expected lora.enabled = false)");
    }
}

void validate_monitor_and_data(const RunConfig& c) {
    ETE_CHECK(c.monitor_prometheus_port >= 0 && c.monitor_prometheus_port <= 65535,
              "monitor.prometheus_port = {}: expected 0 (off) or a TCP port 1..65535",
              c.monitor_prometheus_port);
    ETE_CHECK(!c.monitor_prometheus_addr.empty(),
              "monitor.prometheus_addr: expected an address such as 127.0.0.1 or 0.0.0.0");
    ETE_CHECK(c.monitor_peak_flops >= 0, "monitor.peak_flops = {}: expected >= 0 (0 = measured)",
              c.monitor_peak_flops);
    ETE_CHECK(c.monitor_straggler_every >= 0, "monitor.straggler_every = {}: expected >= 0",
              c.monitor_straggler_every);
    ETE_CHECK(c.data_val_fraction >= 0 && c.data_val_fraction < 1,
              "data.val_fraction = {}: expected in [0, 1)", c.data_val_fraction);
    ETE_CHECK(!c.data_train.empty(), "data.train: expected a token shard or JSONL path");
    ETE_CHECK(c.data_format == "tokens" || c.data_format == "sft",
              "data.format = '{}': expected tokens or sft", c.data_format);
    ETE_CHECK(c.data_format != "sft" || !c.data_tokenizer.empty(),
              "data.format = sft needs data.tokenizer to encode the records");
    ETE_CHECK(c.data_sft_max_bad_fraction >= 0 && c.data_sft_max_bad_fraction <= 1,
              "data.sft_max_bad_fraction = {}: expected in [0, 1]", c.data_sft_max_bad_fraction);
}

void validate_parallel(const RunConfig& c) {
    ETE_CHECK(c.parallel_dp >= 0, "parallel.dp = {}: expected >= 0 (0 = automatic)", c.parallel_dp);
    ETE_CHECK(c.parallel_tp >= 1, "parallel.tp = {}: expected >= 1", c.parallel_tp);
    ETE_CHECK(c.parallel_pp >= 1, "parallel.pp = {}: expected >= 1", c.parallel_pp);
    ETE_CHECK(c.parallel_uneven_batch == "pad" || c.parallel_uneven_batch == "drop",
              "parallel.uneven_batch = '{}': expected pad or drop", c.parallel_uneven_batch);
    ETE_CHECK(c.parallel_bucket_mb > 0, "parallel.bucket_mb = {}: expected > 0",
              c.parallel_bucket_mb);
    ETE_CHECK(c.parallel_zero_stage >= 0 && c.parallel_zero_stage <= 3,
              "parallel.zero_stage = {}: expected 0, 1, 2 or 3", c.parallel_zero_stage);
    ETE_CHECK(zero_stage(c) < 2 || !(c.lora_enabled && c.lora_dynamic_rank),
              "parallel.zero_stage = {} with lora.dynamic_rank: the rank rule reads every "
              "adapter's whole gradient, which stage {} leaves on one replica (use stage 1)",
              zero_stage(c), zero_stage(c));
    ETE_CHECK(zero_stage(c) < 2 || !c.qat_learnable_scale,
              "parallel.zero_stage = {} with qat.learnable_scale: a weight's scale gradient is "
              "summed over its whole gradient, which stage {} leaves on one replica (use stage 1)",
              zero_stage(c), zero_stage(c));
    ETE_CHECK(c.parallel_replica_check_every >= 0,
              "parallel.replica_check_every = {}: expected >= 0", c.parallel_replica_check_every);
    ETE_CHECK(c.parallel_timeout_s >= 0, "parallel.timeout_s = {}: expected >= 0 (0 = no limit)",
              c.parallel_timeout_s);
    ETE_CHECK(c.parallel_hang_warn_s >= 0, "parallel.hang_warn_s = {}: expected >= 0 (0 = auto)",
              c.parallel_hang_warn_s);
}

void validate_lora(const RunConfig& c) {
    if (!c.lora_enabled) return;
    // As the float the masks use: 0.99999999 would round to 1.
    ETE_CHECK(c.lora_dropout >= 0 && float(c.lora_dropout) < 1.0f,
              "lora.dropout = {}: expected a probability in [0, 1)", c.lora_dropout);
    ETE_CHECK(
        c.lora_base_format == "f32" || c.lora_base_format == "bf16" || c.lora_base_format == "nf4",
        "lora.base_format = '{}': expected f32, bf16 or nf4", c.lora_base_format);
    // A dense frozen base is held in the compute dtype (the GEMMs read it as they read x).
    ETE_CHECK(c.lora_base_format == "nf4" ||
                  (c.lora_base_format == "f32" && c.precision == "fp32") ||
                  (c.lora_base_format == "bf16" && c.precision == "bf16"),
              "lora.base_format = {} with train.precision = {}: a dense frozen base is held "
              "in the compute dtype, so f32 goes with fp32 and bf16 with bf16 (or use nf4)",
              c.lora_base_format, c.precision);
    if (c.lora_dynamic_rank) {
        ETE_CHECK(c.lora_r_min >= 1 && c.lora_r_min <= c.lora_r && c.lora_r <= c.lora_r_max,
                  "lora.dynamic_rank: expected 1 <= lora.r_min ({}) <= lora.r ({}) <= "
                  "lora.r_max ({})",
                  c.lora_r_min, c.lora_r, c.lora_r_max);
        ETE_CHECK(c.lora_rank_patience > 0, "lora.rank_patience = {}: expected > 0",
                  c.lora_rank_patience);
    }
    // With model.init_from the architecture (and so the target names) comes from the dir;
    // the model checks the spec again once it is known.
    if (c.model_init_from.empty()) check_lora_spec(lora_spec(c), c.model);
}

}  // namespace

void validate(const RunConfig& c) {
    validate_train(c);
    validate_run(c);
    validate_monitor_and_data(c);
    validate_parallel(c);
    validate_lora(c);
}

LoraSpec lora_spec(const RunConfig& c) {
    LoraSpec s;
    s.enabled = c.lora_enabled;
    s.r = c.lora_r;
    s.alpha = float(c.lora_alpha);
    s.rslora = c.lora_use_rslora;
    s.base_format = c.lora_base_format;
    s.nf4_block = c.lora_nf4_blocksize;
    s.nf4_double_quant = c.lora_double_quant;
    s.r_max = c.lora_dynamic_rank ? c.lora_r_max : 0;
    s.dropout = float(c.lora_dropout);
    s.dropout_seed = c.seed;
    s.targets = split_comma_list(c.lora_targets);
    // Left at its default (q_proj, v_proj): PEFT's default for the family, which differs where
    // q|k|v is one tensor (GPT-2, Phi-3), not an error about modules the model does not have.
    if (c.lora_targets == kDefaultLoraTargets) s.targets = peft_default_targets(c.model.arch);
    return s;
}

QatSpec qat_spec(const RunConfig& c) {
    QatSpec s;
    if (!c.qat_enabled) return s;  // disabled: the other keys are not read
    s.enabled = true;
    s.points = qat_points_from_string(c.qat_points);
    s.linears = split_comma_list(c.qat_linears);
    s.weight_bits = c.qat_weight_bits;
    s.act_bits = c.qat_act_bits;
    s.weight_granularity =
        qat_granularity_from_name(c.qat_weight_granularity, "qat.weight_granularity");
    s.act_granularity = qat_granularity_from_name(c.qat_act_granularity, "qat.act_granularity");
    s.group_size = c.qat_group_size;
    s.observer = observer_kind_from_name(c.qat_observer, "qat.observer");
    s.averaging_constant = float(c.qat_averaging_constant);
    s.warmup_steps = c.qat_warmup_steps;
    s.freeze_step = c.qat_freeze_step;
    s.skip_layers = qat_layers_from_string(c.qat_skip_layers);
    s.learnable_scale = c.qat_learnable_scale;
    return s;
}

AnomalyConfig anomaly_config(const RunConfig& c) {
    AnomalyConfig a;
    a.spike_zscore = c.anomaly_spike_zscore;
    a.window = c.anomaly_window;
    a.max_consecutive_skips = c.anomaly_max_consecutive_skips;
    a.on_repeated = c.anomaly_on_repeated;
    a.max_rollbacks = c.anomaly_max_rollbacks;
    return a;
}

}  // namespace ete
