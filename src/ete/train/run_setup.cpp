// ete/train/run_setup.cpp
#include "ete/train/run_setup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/core/signals.h"
#include "ete/data/loader.h"
#include "ete/data/sft.h"
#include "ete/io/hf_model.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

StopSignals::StopSignals() : installed_here_(install_signal_handlers(SignalMode::Deferred)) {
    struct sigaction sa {};
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe_);
}

StopSignals::~StopSignals() {
    sigaction(SIGPIPE, &old_pipe_, nullptr);
    if (!installed_here_) return;
    uninstall_signal_handlers();
    reset_signal_requests();
}

int StopSignals::pending() const {
    return stop_signal();
}

bool StopSignals::take_checkpoint_request() {
    return take_checkpoint_signal();
}

ModelConfig resolve_model(RunConfig& cfg, const std::optional<Tokenizer>& tok) {
    ModelConfig mc = cfg.model_init_from.empty() ? cfg.model : load_hf_config(cfg.model_init_from);
    if (mc.vocab_size == 0) {
        ETE_CHECK(tok, "model.vocab_size = 0 takes the size from data.tokenizer, which is unset");
        mc.vocab_size = tok->vocab_size();
    }
    if (tok && cfg.model_init_from.empty()) {
        mc.eos_token_id = tok->eos_id();
        mc.bos_token_id = tok->bos_id();
    }
    mc.validate();
    ETE_CHECK(cfg.seq_len <= mc.max_position_embeddings,
              "train.seq_len = {} exceeds model.max_position_embeddings = {}", cfg.seq_len,
              mc.max_position_embeddings);
    cfg.model = mc;
    cfg.model_arch = arch_name(mc.arch);
    return mc;
}

void check_tokenizer_path(const RunConfig& cfg) {
    ETE_CHECK(cfg.data_tokenizer.empty() || fs::exists(cfg.data_tokenizer),
              "data.tokenizer '{}': file not found (train one with `ete tokenizer train`, or set "
              "data.tokenizer=\"\")",
              cfg.data_tokenizer);
}

std::optional<Tokenizer> load_tokenizer(const RunConfig& cfg) {
    if (cfg.data_tokenizer.empty()) return std::nullopt;
    check_tokenizer_path(cfg);
    return Tokenizer::load(cfg.data_tokenizer);
}

json run_settings(const RunConfig& c, const ModelConfig& mc, const std::string& lora_base_hash) {
    json lora = nullptr;
    if (c.lora_enabled) {
        lora = {
            {"r", c.lora_r},
            {"alpha", c.lora_alpha},
            {"targets", c.lora_targets},
            {"use_rslora", c.lora_use_rslora},
            {"base_format", c.lora_base_format},
            {"nf4_blocksize", c.lora_nf4_blocksize},
            {"double_quant", c.lora_double_quant},
            {"dynamic_rank", c.lora_dynamic_rank ? json{{"r_min", c.lora_r_min},
                                                        {"r_max", c.lora_r_max},
                                                        {"patience", c.lora_rank_patience},
                                                        {"shrink", c.lora_rank_shrink_threshold},
                                                        {"grow", c.lora_rank_grow_threshold}}
                                                 : json(nullptr)}};
    }
    return {{"model", config_to_hf_json(mc)},
            {"lora", lora},
            {"lora.base_hash", lora_base_hash},
            {"qat", c.qat_enabled ? json{{"points", c.qat_points},
                                         {"linears", c.qat_linears},
                                         {"weight_bits", c.qat_weight_bits},
                                         {"act_bits", c.qat_act_bits},
                                         {"weight_granularity", c.qat_weight_granularity},
                                         {"act_granularity", c.qat_act_granularity},
                                         {"group_size", c.qat_group_size},
                                         {"observer", c.qat_observer},
                                         {"averaging_constant", c.qat_averaging_constant},
                                         {"warmup_steps", c.qat_warmup_steps},
                                         {"freeze_step", c.qat_freeze_step},
                                         {"skip_layers", c.qat_skip_layers}}
                                  : json(nullptr)},
            {"train.seed", c.seed},
            {"data.train", c.data_train},
            {"data.format", c.data_format},
            {"data.sft_pack", c.data_sft_pack},
            {"data.sft_prompt_template", c.data_sft_prompt_template},
            {"data.sft_prompt_template_no_input", c.data_sft_prompt_template_no_input},
            {"data.sft_chat_template", c.data_sft_chat_template},
            {"data.val_fraction", c.data_val_fraction},
            {"data.shuffle", c.data_shuffle},
            {"train.micro_batch", c.micro_batch},
            {"train.seq_len", c.seq_len},
            {"train.grad_accum", c.grad_accum},
            {"train.steps", c.steps},
            {"train.lr", c.lr},
            {"train.min_lr", c.min_lr},
            {"train.warmup_steps", c.warmup_steps},
            {"train.lr_schedule", c.lr_schedule},
            {"train.optimizer", c.optimizer},
            {"train.weight_decay", c.weight_decay},
            {"train.beta1", c.beta1},
            {"train.beta2", c.beta2},
            {"train.adam_eps", c.adam_eps},
            {"train.grad_clip", c.grad_clip},
            {"train.precision", c.precision}};
}

void check_resume_compatible(const json& saved_settings, const json& now, const std::string& from,
                             const std::vector<std::string>& force) {
    // Settings added after the first checkpoint format: what a checkpoint without them meant.
    json saved = saved_settings;
    if (!saved.contains("train.precision")) saved["train.precision"] = "fp32";
    if (!saved.contains("train.optimizer")) saved["train.optimizer"] = "adamw";
    if (!saved.contains("data.sft_chat_template")) saved["data.sft_chat_template"] = "ete";
    if (!saved.contains("lora")) saved["lora"] = nullptr;
    if (!saved.contains("lora.base_hash")) saved["lora.base_hash"] = "";
    if (!saved.contains("data.shuffle")) saved["data.shuffle"] = true;
    if (!saved.contains("qat")) saved["qat"] = nullptr;
    for (const std::string& k : force) {
        if (now.contains(k)) continue;
        std::string known;
        for (const auto& [key, value] : now.items()) known += (known.empty() ? "" : ", ") + key;
        throw_error(
            fmt::format("--resume-force {}: not a setting a resume checks (expected one of "
                        "{})",
                        k, known));
    }
    for (const auto& [key, value] : now.items()) {
        if (saved.contains(key) && saved[key] == value) continue;
        if (std::find(force.begin(), force.end(), key) != force.end()) {
            log_warn("resume: {} changed ({} -> {}); continuing as forced", key,
                     saved.contains(key) ? saved[key].dump() : "unset", value.dump());
            continue;
        }
        ETE_CHECK(key != "lora.base_hash",
                  "resume from '{}': the base model's contents changed (hash {} -> {}): the "
                  "adapters were trained against another base; resume with the same "
                  "model.init_from, or pass --resume-force lora.base_hash to accept",
                  from, saved[key].dump(), value.dump());
        throw_error(
            fmt::format("resume from '{}': {} changed ({} -> {}), so the run would not "
                        "continue as if never stopped; pass --resume-force {} to accept",
                        from, key, saved.contains(key) ? saved[key].dump() : "unset",
                        key == "model" ? "(the model config)" : value.dump(), key));
    }
}

void truncate_metrics(const std::string& path, int64_t step) {
    if (!fs::exists(path)) return;
    std::ifstream in(path);
    std::string kept;
    for (std::string line; std::getline(in, line);) {
        json j = json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("step", int64_t(0)) <= step) kept += line + "\n";
    }
    write_file_atomic(path, kept);
}

void check_data_file(const RunConfig& cfg) {
    ETE_CHECK(fs::exists(cfg.data_train),
              "data.train '{}': file not found (prepare it with `ete tokenize`, see README)",
              cfg.data_train);
}

void check_shard_fits(const RunConfig& cfg, const TokenShard& shard, const ModelConfig& mc) {
    ETE_CHECK(shard.vocab_size() <= uint32_t(mc.vocab_size),
              "data.train '{}': tokens come from a vocabulary of {}, larger than the model's {}",
              cfg.data_train, shard.vocab_size(), mc.vocab_size);
}

std::unique_ptr<BatchSource> open_data(const RunConfig& cfg, const ModelConfig& mc,
                                       const std::optional<Tokenizer>& tok,
                                       std::optional<TokenShard>& shard, bool warn) {
    check_data_file(cfg);
    if (cfg.data_format == "sft") {
        SftOptions opt;
        opt.max_bad_fraction = cfg.data_sft_max_bad_fraction;
        opt.pack = cfg.data_sft_pack;
        opt.prompt_template = cfg.data_sft_prompt_template;
        opt.prompt_template_no_input = cfg.data_sft_prompt_template_no_input;
        opt.shuffle = cfg.data_shuffle;
        opt.warn = warn;
        if (cfg.data_sft_chat_template != "ete")
            opt.chat_template =
                load_sft_chat_template(cfg.data_sft_chat_template, cfg.data_tokenizer, *tok);
        return std::make_unique<SftDataset>(cfg.data_train, *tok, cfg.seq_len, opt, cfg.seed,
                                            cfg.data_val_fraction);
    }
    shard.emplace(cfg.data_train);
    check_shard_fits(cfg, *shard, mc);
    return std::make_unique<BatchSampler>(*shard, cfg.seq_len, cfg.data_val_fraction, cfg.seed,
                                          cfg.data_shuffle);
}

}  // namespace ete
