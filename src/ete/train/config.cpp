// ete/train/config.cpp — the key table behind TOML, --set and --dump-config.
#include "ete/train/config.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <variant>

#include "ete/core/error.h"
#include "ete/model/qat_spec.h"
#include "ete/model/transformer.h"
#include "ete/train/anomaly.h"
#include "ete/train/toml_util.h"

namespace ete {
namespace {

enum class Kind { Int, Float, Bool, String };
using Value = std::variant<int64_t, double, bool, std::string>;

struct Key {
    std::string name;
    std::string help;
    Kind kind;
    std::function<void(RunConfig&, const Value&)> set;
    std::function<Value(const RunConfig&)> get;
};

const char* kind_expect(Kind k) {
    switch (k) {
        case Kind::Int:
            return "an integer";
        case Kind::Float:
            return "a number";
        case Kind::Bool:
            return "true or false";
        case Kind::String:
            return "a string";
    }
    return "";
}

// Builds a key bound to a field, either of RunConfig or of its ModelConfig.
template <typename T, typename Owner>
Key field(std::string name, T Owner::*member, std::string help) {
    constexpr bool kModel = std::is_same_v<Owner, ModelConfig>;
    auto owner = [](auto& cfg) -> auto& {
        if constexpr (kModel)
            return cfg.model;
        else
            return cfg;
    };
    Kind kind = std::is_same_v<T, bool>       ? Kind::Bool
                : std::is_integral_v<T>       ? Kind::Int
                : std::is_floating_point_v<T> ? Kind::Float
                                              : Kind::String;
    Key k{std::move(name), std::move(help), kind, nullptr, nullptr};
    k.set = [member, owner, name = k.name](RunConfig& c, const Value& v) {
        if constexpr (std::is_same_v<T, bool>) {
            owner(c).*member = std::get<bool>(v);
        } else if constexpr (std::is_integral_v<T>) {
            int64_t x = std::get<int64_t>(v);
            ETE_CHECK(x >= int64_t(std::numeric_limits<T>::min()) &&
                          uint64_t(x) <= uint64_t(std::numeric_limits<T>::max()),
                      "config key '{}' = {}: out of range", name, x);
            owner(c).*member = T(x);
        } else if constexpr (std::is_floating_point_v<T>) {
            const double x = std::get<double>(v);
            ETE_CHECK(std::isfinite(x), "config key '{}' = {}: expected a finite number", name, x);
            owner(c).*member = x;
        } else {
            owner(c).*member = std::get<std::string>(v);
        }
    };
    k.get = [member, owner](const RunConfig& c) -> Value {
        const auto& o = owner(const_cast<RunConfig&>(c));
        if constexpr (std::is_same_v<T, bool>)
            return bool(o.*member);
        else if constexpr (std::is_integral_v<T>)
            return int64_t(o.*member);
        else if constexpr (std::is_floating_point_v<T>)
            return double(o.*member);
        else
            return std::string(o.*member);
    };
    return k;
}

const std::vector<Key>& keys() {
    static const std::vector<Key> table = [] {
        using M = ModelConfig;
        using R = RunConfig;
        std::vector<Key> t;
        t.push_back(field("model.arch", &R::model_arch, "the model family: " + family_names()));
        t.push_back(field("model.init_from", &R::model_init_from,
                          "HF model dir to start from (empty = fresh init from [model])"));
        t.push_back(field("model.vocab_size", &M::vocab_size, "vocabulary size (0 = tokenizer's)"));
        t.push_back(field("model.hidden_size", &M::hidden_size, "C, the residual width"));
        t.push_back(field("model.intermediate_size", &M::intermediate_size, "F, the MLP width"));
        t.push_back(field("model.num_layers", &M::num_layers, "L, transformer blocks"));
        t.push_back(field("model.num_heads", &M::num_heads, "H, query heads"));
        t.push_back(field("model.num_kv_heads", &M::num_kv_heads, "KV heads (GQA), divides H"));
        t.push_back(field("model.head_dim", &M::head_dim, "D (0 = hidden_size / num_heads)"));
        t.push_back(field("model.max_position_embeddings", &M::max_position_embeddings,
                          "longest sequence"));
        t.push_back(field("model.norm_eps", &M::norm_eps, "RMSNorm/LayerNorm epsilon"));
        t.push_back(field("model.rope_theta", &M::rope_theta, "RoPE base"));
        t.push_back(field("model.partial_rotary_factor", &M::partial_rotary_factor,
                          "share of each head RoPE rotates (phi3; int(head_dim * f) even)"));
        t.push_back(field(
            "model.sliding_window", &M::sliding_window,
            "attend to the last N positions only (0 = all; mistral, qwen2, qwen3, phi3; gemma2/3 "
            "on their local layers)"));
        t.push_back(field("model.tie_word_embeddings", &M::tie_word_embeddings,
                          "share the embedding with the LM head"));
        t.push_back(field("model.initializer_range", &M::initializer_range, "init std"));
        t.push_back(field("train.steps", &R::steps, "optimizer steps"));
        t.push_back(field("train.micro_batch", &R::micro_batch, "sequences per micro-batch"));
        t.push_back(field("train.seq_len", &R::seq_len, "tokens per sequence"));
        t.push_back(field("train.grad_accum", &R::grad_accum, "micro-batches per step"));
        t.push_back(field("train.lr", &R::lr, "peak learning rate"));
        t.push_back(field("train.min_lr", &R::min_lr, "final learning rate of the decay"));
        t.push_back(field("train.warmup_steps", &R::warmup_steps, "linear warmup steps"));
        t.push_back(field("train.lr_schedule", &R::lr_schedule, "constant, cosine or linear"));
        t.push_back(field("train.optimizer", &R::optimizer,
                          "adamw, or adamw8bit (both moments in blockwise 8-bit codes)"));
        t.push_back(field("train.weight_decay", &R::weight_decay, "AdamW decay (matrices only)"));
        t.push_back(field("train.beta1", &R::beta1, "AdamW beta1"));
        t.push_back(field("train.beta2", &R::beta2, "AdamW beta2"));
        t.push_back(field("train.adam_eps", &R::adam_eps, "AdamW epsilon"));
        t.push_back(field("train.grad_clip", &R::grad_clip, "global grad-norm clip (0 = off)"));
        t.push_back(field("train.seed", &R::seed, "seed for init and data order"));
        t.push_back(field("train.recompute", &R::recompute,
                          "recompute in backward: none, full or layers (0-3,6)"));
        t.push_back(field("train.eval_every", &R::eval_every, "validation interval (0 = off)"));
        t.push_back(field("train.eval_batches", &R::eval_batches, "validation micro-batches"));
        t.push_back(field("train.log_every", &R::log_every, "log-line interval (non-TTY)"));
        t.push_back(field("train.backend", &R::backend,
                          "compute backend: cpu, ref, guarded (tests) or cuda"));
        t.push_back(field("train.precision", &R::precision,
                          "GEMM operand dtype: fp32, bf16 or fp16 (fp32 master weights, "
                          "gradients and optimizer; fp16 adds a dynamic loss scaler)"));
        t.push_back(field("train.save_dtype", &R::save_dtype,
                          "dtype of final/: fp32, bf16 or fp16 (empty = the precision's)"));
        t.push_back(field("train.loss_scale_window", &R::loss_scale_window,
                          "fp16: clean steps before the loss scale doubles"));
        t.push_back(field("train.checkpoint_every", &R::checkpoint_every,
                          "steps between checkpoints (0 = only on a signal or the clock)"));
        t.push_back(field("train.checkpoint_minutes", &R::checkpoint_minutes,
                          "wall-clock minutes between checkpoints (0 = off)"));
        t.push_back(field("train.keep_checkpoints", &R::keep_checkpoints,
                          "newest checkpoints kept (0 = all)"));
        t.push_back(
            field("train.checkpoint_before_end_s", &R::checkpoint_before_end_s,
                  "under Slurm: checkpoint this long before the job's time limit (0 = off)"));
        t.push_back(field("train.max_attempts_without_progress", &R::max_attempts_without_progress,
                          "failed attempts in a row from the same step before a restart is "
                          "refused (0 = no limit)"));
        t.push_back(field("train.memory_check", &R::memory_check,
                          "stop before allocating when the memory estimate exceeds what is free"));
        t.push_back(field("data.format", &R::data_format,
                          "tokens (ETETOK01 shard) or sft (JSONL: Alpaca, prompt/completion, "
                          "chat messages)"));
        t.push_back(field("data.train", &R::data_train, "token shard or SFT JSONL file"));
        t.push_back(field("data.sft_max_bad_fraction", &R::data_sft_max_bad_fraction,
                          "malformed SFT lines tolerated before the run stops"));
        t.push_back(field("data.sft_pack", &R::data_sft_pack,
                          "pack several SFT examples per row (attention stays inside each)"));
        t.push_back(field("data.sft_prompt_template", &R::data_sft_prompt_template,
                          "Alpaca prompt with {instruction} and {input}"));
        t.push_back(field("data.sft_prompt_template_no_input",
                          &R::data_sft_prompt_template_no_input,
                          "Alpaca prompt with {instruction}, for records without input"));
        t.push_back(
            field("data.sft_chat_template", &R::data_sft_chat_template,
                  "chat records: ete, model (the tokenizer dir's chat_template) or a path"));
        t.push_back(
            field("data.tokenizer", &R::data_tokenizer, "tokenizer.json saved with the model"));
        t.push_back(
            field("data.val_fraction", &R::data_val_fraction, "share held out for validation"));
        t.push_back(field("data.shuffle", &R::data_shuffle,
                          "shuffle each epoch (false = file order, e.g. for a curriculum)"));
        t.push_back(field("parallel.dp", &R::parallel_dp,
                          "data-parallel replicas (0 = ranks / (tp * pp))"));
        t.push_back(field("parallel.tp", &R::parallel_tp, "tensor-parallel ranks per layer"));
        t.push_back(field("parallel.pp", &R::parallel_pp, "pipeline stages"));
        t.push_back(field("parallel.auto", &R::parallel_auto,
                          "plan dp, tp, pp, recompute and the ZeRO stage at start on the ranks "
                          "given (docs/planner.md)"));
        t.push_back(field("parallel.pp_layers", &R::parallel_pp_layers,
                          "layers per stage, e.g. \"3,5\" (empty = balanced by cost)"));
        t.push_back(field("parallel.uneven_batch", &R::parallel_uneven_batch,
                          "micro_batch not divisible by dp: pad (ignored rows) or drop rows"));
        t.push_back(field("parallel.bucket_mb", &R::parallel_bucket_mb,
                          "data-parallel all-reduce bucket size in MiB"));
        t.push_back(field("parallel.overlap", &R::parallel_overlap,
                          "all-reduce gradient buckets while backward runs"));
        t.push_back(field("parallel.grad_bf16", &R::parallel_grad_bf16,
                          "send data-parallel gradients as bf16 (fp32 accumulation)"));
        t.push_back(field("parallel.zero_stage", &R::parallel_zero_stage,
                          "ZeRO: 0 off, 1 shard the optimizer state across replicas, 2 also "
                          "reduce each gradient only to the replica that updates it, 3 also "
                          "shard the parameters (each layer gathered before use)"));
        t.push_back(field("parallel.zero_reshard_after_forward",
                          &R::parallel_zero_reshard_after_forward,
                          "ZeRO-3: gather a layer's parameters again for its backward instead "
                          "of keeping them from its forward (less memory, more traffic)"));
        t.push_back(field("parallel.zero1", &R::parallel_zero1,
                          "the same as parallel.zero_stage = 1 (a larger zero_stage wins)"));
        t.push_back(field("parallel.replica_check_every", &R::parallel_replica_check_every,
                          "steps between checks that replicas hold identical weights (0 = off)"));
        t.push_back(field("parallel.timeout_s", &R::parallel_timeout_s,
                          "seconds a collective may take before the run stops with an error"));
        t.push_back(field("parallel.hang_warn_s", &R::parallel_hang_warn_s,
                          "seconds a collective may wait before the watchdog reports which ranks "
                          "did not enter it (0 = parallel.timeout_s / 5)"));
        t.push_back(field("lora.enabled", &R::lora_enabled,
                          "fine-tune LoRA adapters over a frozen base (QLoRA with nf4)"));
        t.push_back(field("lora.r", &R::lora_r, "adapter rank"));
        t.push_back(field("lora.alpha", &R::lora_alpha, "adapter scale numerator (alpha / r)"));
        t.push_back(field("lora.dropout", &R::lora_dropout,
                          "dropout probability on each adapter's input while training (PEFT's "
                          "lora_dropout; layout-invariant masks)"));
        t.push_back(
            field("lora.targets", &R::lora_targets,
                  "adapted linears: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,"
                  "down_proj (GPT-2: c_attn,c_proj,c_fc; Phi-3: qkv_proj,o_proj,gate_up_proj,"
                  "down_proj) or all-linear; left at q_proj,v_proj, GPT-2 gets c_attn and Phi-3 "
                  "its four, PEFT's defaults"));
        t.push_back(
            field("lora.use_rslora", &R::lora_use_rslora, "rank-stabilised scale alpha / sqrt(r)"));
        t.push_back(field("lora.init_from", &R::lora_init_from,
                          "PEFT adapter dir (ETE's final/ or PEFT's save_pretrained) to continue "
                          "training; its r, alpha, use_rslora and targets must match"));
        t.push_back(field("lora.base_format", &R::lora_base_format,
                          "frozen base linears: f32, bf16, or nf4 (QLoRA)"));
        t.push_back(field("lora.nf4_blocksize", &R::lora_nf4_blocksize,
                          "NF4 block size (power of two, 32..4096)"));
        t.push_back(field("lora.double_quant", &R::lora_double_quant,
                          "NF4 double quantization of the block absmax values"));
        t.push_back(field("lora.dynamic_rank", &R::lora_dynamic_rank,
                          "change the adapters' rank during training (r_min..r_max)"));
        t.push_back(field("lora.r_min", &R::lora_r_min, "dynamic rank: smallest rank"));
        t.push_back(field("lora.r_max", &R::lora_r_max, "dynamic rank: allocated (largest) rank"));
        t.push_back(field("lora.rank_patience", &R::lora_rank_patience,
                          "dynamic rank: steps per decision window"));
        t.push_back(field("lora.rank_shrink_threshold", &R::lora_rank_shrink_threshold,
                          "dynamic rank: halve when the smoothed loss improves less than this "
                          "(relative) over a window"));
        t.push_back(field("lora.rank_grow_threshold", &R::lora_rank_grow_threshold,
                          "dynamic rank: double when |grad B| / |B| averages above this"));
        t.push_back(field("monitor.prometheus_port", &R::monitor_prometheus_port,
                          "rank 0 serves Prometheus metrics on this port at /metrics (0 = off)"));
        t.push_back(field("monitor.prometheus_addr", &R::monitor_prometheus_addr,
                          "address the metrics endpoint listens on (0.0.0.0 = every interface)"));
        t.push_back(field("monitor.tensorboard", &R::monitor_tensorboard,
                          "write the scalars of metrics.jsonl to RUN/tensorboard/ event files"));
        t.push_back(field("monitor.peak_flops", &R::monitor_peak_flops,
                          "peak FLOP/s of one rank for MFU (0 = a GEMM measured at start)"));
        t.push_back(field("monitor.straggler_every", &R::monitor_straggler_every,
                          "steps between gathers of every rank's step time (0 = off)"));
        t.push_back(field("monitor.watchdog", &R::monitor_watchdog,
                          "flight recorder and hang watchdog of a multi-rank run (false: off, "
                          "no hang reports)"));
        t.push_back(field("anomaly.spike_zscore", &R::anomaly_spike_zscore,
                          "skip a step whose loss is this many standard deviations above the "
                          "window's (0 = off; non-finite losses and gradients always skip)"));
        t.push_back(field("anomaly.window", &R::anomaly_window,
                          "taken steps the spike z-score is measured against"));
        t.push_back(field("anomaly.max_consecutive_skips", &R::anomaly_max_consecutive_skips,
                          "anomalous steps in a row before anomaly.on_repeated acts"));
        t.push_back(field("anomaly.on_repeated", &R::anomaly_on_repeated,
                          "stop (checkpoint, exit 3) or rollback (reload the newest checkpoint "
                          "and go on past the offending data)"));
        t.push_back(field("anomaly.max_rollbacks", &R::anomaly_max_rollbacks,
                          "rollbacks in one run before on_repeated acts as stop"));
        t.push_back(field("qat.enabled", &R::qat_enabled,
                          "quantization-aware training: fake quantization at qat.points"));
        t.push_back(field("qat.points", &R::qat_points,
                          "weight, linear_in, attn_out, ffn_out, post_norm, residual "
                          "(comma-separated)"));
        t.push_back(field("qat.linears", &R::qat_linears,
                          "linears whose weights and inputs are quantized (PEFT names or "
                          "all-linear; lm_head for the LM head)"));
        t.push_back(field("qat.weight_bits", &R::qat_weight_bits, "weight grid: 4 or 8 bits"));
        t.push_back(field("qat.act_bits", &R::qat_act_bits, "activation grid: 8 bits"));
        t.push_back(field("qat.weight_granularity", &R::qat_weight_granularity,
                          "channel, tensor or group (of qat.group_size input columns)"));
        t.push_back(field("qat.act_granularity", &R::qat_act_granularity,
                          "tensor (observed scale) or token (dynamic)"));
        t.push_back(field("qat.group_size", &R::qat_group_size, "input columns per weight group"));
        t.push_back(field("qat.observer", &R::qat_observer, "moving_average or minmax"));
        t.push_back(field("qat.averaging_constant", &R::qat_averaging_constant,
                          "moving-average observer constant in (0, 1]"));
        t.push_back(field("qat.warmup_steps", &R::qat_warmup_steps,
                          "steps that only observe before fake quantization starts"));
        t.push_back(field("qat.freeze_step", &R::qat_freeze_step,
                          "step from which the observers stop (0 = never)"));
        t.push_back(field("qat.skip_layers", &R::qat_skip_layers,
                          "layers left in full precision, e.g. \"0,-1\" (first and last)"));
        t.push_back(field("qat.learnable_scale", &R::qat_learnable_scale,
                          "train the weights' scales (LSQ), starting from their ranges"));
        return t;
    }();
    return table;
}

const Key& find_key(const std::string& name, const std::string& where) {
    for (const Key& k : keys())
        if (k.name == name) return k;
    std::string section = name.substr(0, name.find('.')), known;
    for (const Key& k : keys())
        if (k.name.rfind(section + ".", 0) == 0) known += (known.empty() ? "" : ", ") + k.name;
    throw_error(fmt::format(
        "{}: unknown config key '{}'{}", where, name,
        known.empty() ? " (sections: model, train, data, parallel, lora, monitor, anomaly, qat)"
                      : " (known keys: " + known + ")"));
}

Value from_node(const Key& k, const toml::node& n, const std::string& where) {
    auto bad = [&]() {
        throw_error(
            fmt::format("{}: config key '{}': expected {}", where, k.name, kind_expect(k.kind)));
    };
    switch (k.kind) {
        case Kind::Int:
            if (!n.is_integer()) bad();
            return n.as_integer()->get();
        case Kind::Float:
            if (n.is_integer()) return double(n.as_integer()->get());
            if (!n.is_floating_point()) bad();
            return n.as_floating_point()->get();
        case Kind::Bool:
            if (!n.is_boolean()) bad();
            return n.as_boolean()->get();
        case Kind::String:
            if (!n.is_string()) bad();
            return n.as_string()->get();
    }
    bad();
    return {};
}

Value from_text(const Key& k, std::string s) {
    auto bad = [&]() {
        throw_error(fmt::format("--set {}={}: expected {}", k.name, s, kind_expect(k.kind)));
    };
    switch (k.kind) {
        case Kind::Int: {
            int64_t v = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || p != s.data() + s.size()) bad();
            return v;
        }
        case Kind::Float: {
            double v = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || p != s.data() + s.size() || s.empty()) bad();
            return v;
        }
        case Kind::Bool:
            if (s == "true") return true;
            if (s == "false") return false;
            bad();
            break;
        case Kind::String:
            if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
                s = s.substr(1, s.size() - 2);
            return s;
    }
    return {};
}

}  // namespace

RunConfig default_run_config() {
    RunConfig c;
    c.model.arch = Arch::Llama;
    c.model.vocab_size = 0;  // taken from the tokenizer
    c.model.hidden_size = 256;
    c.model.intermediate_size = 688;
    c.model.num_layers = 4;
    c.model.num_heads = 4;
    c.model.num_kv_heads = 2;
    c.model.head_dim = 0;
    c.model.max_position_embeddings = 256;
    c.model.norm_eps = 1e-5;
    c.model.rope_theta = 10000.0;
    c.model.tie_word_embeddings = true;
    return c;
}

namespace {

// model.arch -> ModelConfig::arch (an unknown name is left for validate() to name).
void set_arch(RunConfig& cfg) {
    if (const Family* f = family_named(cfg.model_arch)) cfg.model.arch = f->arch;
    cfg.model.use_family_defaults();
    if (cfg.model.family().layout == Layout::GPT2 && !cfg.model_kv_heads_given)
        cfg.model.num_kv_heads = cfg.model.num_heads;
}

// Records what the user gave that a family's defaults depend on (set_arch).
void note_given(RunConfig& cfg, const std::string& key) {
    if (key == "model.num_kv_heads") cfg.model_kv_heads_given = true;
}

}  // namespace

toml::table parse_toml(const std::string& text, const std::string& where) {
    try {
        return toml::parse(text, where);
    } catch (const toml::parse_error& e) {
        const auto& b = e.source().begin;
        throw_error(
            fmt::format("{}:{}:{}: invalid TOML: {}", where, b.line, b.column, e.description()));
    }
}

void apply_toml(RunConfig& cfg, const std::string& text, const std::string& where) {
    const toml::table root = parse_toml(text, where);
    for (auto&& [section, node] : root) {
        const toml::table* tbl = node.as_table();
        ETE_CHECK(tbl,
                  "{}: top-level key '{}': expected a [section] (model, train, data, parallel, "
                  "lora, monitor, anomaly)",
                  where, section.str());
        for (auto&& [key, value] : *tbl) {
            const Key& k =
                find_key(std::string(section.str()) + "." + std::string(key.str()), where);
            k.set(cfg, from_node(k, value, where));
            note_given(cfg, k.name);
        }
    }
    set_arch(cfg);
}

void apply_override(RunConfig& cfg, const std::string& assignment) {
    auto eq = assignment.find('=');
    ETE_CHECK(eq != std::string::npos && eq > 0,
              "--set '{}': expected section.key=value (e.g. train.lr=1e-3)", assignment);
    const Key& k = find_key(assignment.substr(0, eq), "--set");
    k.set(cfg, from_text(k, assignment.substr(eq + 1)));
    note_given(cfg, k.name);
    set_arch(cfg);
}

std::string dump_toml(const RunConfig& cfg) {
    std::map<std::string, toml::table> sections;
    for (const Key& k : keys()) {
        auto dot = k.name.find('.');
        auto& t = sections[k.name.substr(0, dot)];
        std::string leaf = k.name.substr(dot + 1);
        std::visit([&](const auto& v) { t.insert(leaf, v); }, k.get(cfg));
    }
    std::ostringstream out;
    for (const char* s :
         {"model", "train", "data", "parallel", "lora", "monitor", "anomaly", "qat"}) {
        out << "[" << s << "]\n" << sections[s] << "\n\n";
    }
    return out.str();
}

std::vector<std::pair<std::string, std::string>> config_keys_help() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Key& k : keys()) out.emplace_back(k.name, k.help);
    return out;
}

}  // namespace ete
