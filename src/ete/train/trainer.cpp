// ete/train/trainer.cpp
#include "ete/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/loader.h"
#include "ete/data/sft.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/checkpoint.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "ete/train/progress.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// SIGTERM/SIGINT ask for a clean stop: the current step finishes, a checkpoint is saved, the run
// exits 0. The handler resets itself, so a second signal terminates at once.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
    g_stop_signal = sig;
}

class StopSignals {
  public:
    StopSignals() {
        g_stop_signal = 0;
        struct sigaction sa {};
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, &old_term_);
        sigaction(SIGINT, &sa, &old_int_);
    }
    ~StopSignals() {
        sigaction(SIGTERM, &old_term_, nullptr);
        sigaction(SIGINT, &old_int_, nullptr);
    }
    int pending() const { return g_stop_signal; }

  private:
    struct sigaction old_term_ {
    }, old_int_{};
};

// The model config for this run: from model.init_from, or [model] with the vocabulary and
// special ids taken from the tokenizer.
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

std::optional<Tokenizer> load_tokenizer(const RunConfig& cfg) {
    if (cfg.data_tokenizer.empty()) return std::nullopt;
    ETE_CHECK(fs::exists(cfg.data_tokenizer),
              "data.tokenizer '{}': file not found (train one with `ete tokenizer train`, or set "
              "data.tokenizer=\"\")",
              cfg.data_tokenizer);
    return Tokenizer::load(cfg.data_tokenizer);
}

// The settings a resume must find unchanged for the continuation to be bit-exact.
json run_settings(const RunConfig& c, const ModelConfig& mc) {
    return {{"model", config_to_hf_json(mc)},
            {"train.seed", c.seed},
            {"data.train", c.data_train},
            {"data.format", c.data_format},
            {"data.sft_pack", c.data_sft_pack},
            {"data.sft_prompt_template", c.data_sft_prompt_template},
            {"data.sft_prompt_template_no_input", c.data_sft_prompt_template_no_input},
            {"data.val_fraction", c.data_val_fraction},
            {"train.micro_batch", c.micro_batch},
            {"train.seq_len", c.seq_len},
            {"train.grad_accum", c.grad_accum},
            {"train.steps", c.steps},
            {"train.lr", c.lr},
            {"train.min_lr", c.min_lr},
            {"train.warmup_steps", c.warmup_steps},
            {"train.lr_schedule", c.lr_schedule},
            {"train.weight_decay", c.weight_decay},
            {"train.beta1", c.beta1},
            {"train.beta2", c.beta2},
            {"train.adam_eps", c.adam_eps},
            {"train.grad_clip", c.grad_clip}};
}

void check_resume_compatible(const json& saved, const json& now, const std::string& from,
                             const std::vector<std::string>& force) {
    for (const auto& [key, value] : now.items()) {
        if (saved.contains(key) && saved[key] == value) continue;
        if (std::find(force.begin(), force.end(), key) != force.end()) {
            log_warn("resume: {} changed ({} -> {}); continuing as forced", key,
                     saved.contains(key) ? saved[key].dump() : "unset", value.dump());
            continue;
        }
        throw_error(
            fmt::format("resume from '{}': {} changed ({} -> {}), so the run would not "
                        "continue as if never stopped; pass --resume-force {} to accept",
                        from, key, saved.contains(key) ? saved[key].dump() : "unset",
                        key == "model" ? "(the model config)" : value.dump(), key));
    }
}

// Keeps the metrics of steps <= step, so a resumed run's file equals an uninterrupted one's.
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

// Mean loss over `batches` validation micro-batches.
// ds is null or the doc_start buffer of packed sources.
double evaluate(Transformer& model, const BatchSource& loader, int batches, int B, int T,
                std::vector<int32_t>& in, std::vector<int32_t>& tgt, int32_t* ds) {
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < batches; ++i) {
        loader.fill_val_batch(uint64_t(i) * B, B, in.data(), tgt.data(), ds);
        sum += model.forward_loss(in.data(), tgt.data(), B, T, ds);
        count += std::count_if(tgt.begin(), tgt.begin() + int64_t(B) * T,
                               [](int32_t t) { return t != kIgnoreIndex; });
    }
    return count ? sum / double(count) : 0.0;
}

}  // namespace

// One training job: everything the loop needs, built once.
class Trainer {
  public:
    Trainer(RunConfig cfg, std::string out_dir)
        : cfg_(std::move(cfg)),
          out_(std::move(out_dir)),
          backend_(make_backend(cfg_.backend)),
          tok_(load_tokenizer(cfg_)),
          mc_(resolve_model(cfg_, tok_)),
          loader_(open_data()),
          model_(mc_, *backend_),
          opt_(model_.params(), *backend_,
               {cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.adam_eps, cfg_.weight_decay}),
          sched_(lr_schedule_from_name(cfg_.lr_schedule)) {
        const size_t n = size_t(cfg_.grad_accum) * cfg_.micro_batch * cfg_.seq_len;
        in_.resize(n);
        tgt_.resize(n);
        if (loader_->packed()) doc_start_.resize(n);
        model_.setup(cfg_.micro_batch, cfg_.seq_len,
                     recompute_plan(cfg_.recompute, mc_.num_layers));
    }

    TrainSummary run(const ResumeOptions& resume);

  private:
    // The batch source of data.format: a token-shard sampler or an SFT dataset.
    std::unique_ptr<BatchSource> open_data() {
        ETE_CHECK(fs::exists(cfg_.data_train),
                  "data.train '{}': file not found (prepare it with `ete tokenize`, see README)",
                  cfg_.data_train);
        if (cfg_.data_format == "sft") {
            SftOptions opt;
            opt.max_bad_fraction = cfg_.data_sft_max_bad_fraction;
            opt.pack = cfg_.data_sft_pack;
            opt.prompt_template = cfg_.data_sft_prompt_template;
            opt.prompt_template_no_input = cfg_.data_sft_prompt_template_no_input;
            return std::make_unique<SftDataset>(cfg_.data_train, *tok_, cfg_.seq_len, opt,
                                                cfg_.seed, cfg_.data_val_fraction);
        }
        shard_.emplace(cfg_.data_train);
        ETE_CHECK(shard_->vocab_size() <= uint32_t(mc_.vocab_size),
                  "data.train '{}': tokens come from a vocabulary of {}, larger than the "
                  "model's {}",
                  cfg_.data_train, shard_->vocab_size(), mc_.vocab_size);
        return std::make_unique<BatchSampler>(*shard_, cfg_.seq_len, cfg_.data_val_fraction,
                                              cfg_.seed);
    }
    int64_t start(const ResumeOptions& resume);
    StepMetrics step(int64_t step);
    void checkpoint(int64_t steps_done);
    uint64_t data_position(int64_t step) const {
        return uint64_t(step) * uint64_t(cfg_.grad_accum) * uint64_t(cfg_.micro_batch);
    }

    RunConfig cfg_;
    std::string out_;
    std::unique_ptr<Backend> backend_;
    std::optional<Tokenizer> tok_;
    ModelConfig mc_;
    std::optional<TokenShard> shard_;  // data.format = tokens; outlives the sampler
    std::unique_ptr<BatchSource> loader_;
    Transformer model_;
    AdamW opt_;
    LrSchedule sched_;
    std::vector<int32_t> in_, tgt_;
    std::vector<int32_t> doc_start_;  // packed sources only (else empty)
    int32_t* doc_start(size_t offset) {
        return doc_start_.empty() ? nullptr : doc_start_.data() + offset;
    }
};

// Initialises or resumes; returns the number of steps already done.
int64_t Trainer::start(const ResumeOptions& resume) {
    std::optional<std::string> from;
    if (resume.from == "auto") {
        from = latest_checkpoint(out_);
        if (!from) log_info("resume auto: no checkpoint in {}/checkpoints, starting fresh", out_);
    } else if (!resume.from.empty()) {
        from = resume.from;
    }
    if (!from) {
        // A fresh run must not mix its checkpoints with an earlier run's (pruning could then
        // delete the new ones and --resume auto would pick the old): never silently.
        auto old = resume.from.empty() ? latest_checkpoint(out_) : std::nullopt;
        ETE_CHECK(!old,
                  "--out '{}' already holds checkpoints of a run (newest {}): continue it "
                  "with --resume auto, or choose another --out",
                  out_, *old);
        if (cfg_.model_init_from.empty()) {
            model_.params().init(cfg_.seed);
        } else {
            load_hf_weights(cfg_.model_init_from, model_.params());
        }
        fs::remove(out_ + "/metrics.jsonl");
        return 0;
    }
    CheckpointState st =
        load_checkpoint(*from, model_.params(), opt_.exp_avg().f32(), opt_.exp_avg_sq().f32());
    check_resume_compatible(st.run, run_settings(cfg_, mc_), *from, resume.force);
    ETE_CHECK(st.data_position == data_position(st.step),
              "checkpoint '{}': data position {} does not match step {}", *from, st.data_position,
              st.step);
    opt_.set_steps_taken(st.optimizer_steps);
    truncate_metrics(out_ + "/metrics.jsonl", st.step);
    log_info("resumed from {} at step {}", *from, st.step);
    return st.step;
}

StepMetrics Trainer::step(int64_t step) {
    const int B = cfg_.micro_batch, T = cfg_.seq_len, A = cfg_.grad_accum;
    auto t0 = Clock::now();
    for (int a = 0; a < A; ++a) {
        const size_t o = size_t(a) * B * T;
        loader_->fill_batch(data_position(step) + uint64_t(a) * B, B, &in_[o], &tgt_[o],
                            doc_start(o));
    }
    // Normalise by the target tokens of the whole step, not a mean of micro-batch means.
    int64_t tokens =
        std::count_if(tgt_.begin(), tgt_.end(), [](int32_t t) { return t != kIgnoreIndex; });
    float d_scale = 1.0f / float(std::max<int64_t>(tokens, 1));
    model_.params().zero_grads();
    double loss_sum = 0;
    for (int a = 0; a < A; ++a) {
        const size_t o = size_t(a) * B * T;
        loss_sum += model_.forward_backward(&in_[o], &tgt_[o], B, T, d_scale, doc_start(o));
    }
    double norm = clip_grad_norm(model_.params(), *backend_, cfg_.grad_clip);
    double lr = lr_at(sched_, step, cfg_.steps, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
    opt_.step(lr);
    double dt = seconds_since(t0);
    return {step + 1,
            loss_sum / double(std::max<int64_t>(tokens, 1)),
            lr,
            norm,
            double(int64_t(A) * B * T) / dt,
            dt * 1e3,
            tokens,
            std::nullopt};
}

void Trainer::checkpoint(int64_t steps_done) {
    auto t0 = Clock::now();
    CheckpointState st{steps_done, opt_.steps_taken(), data_position(steps_done),
                       run_settings(cfg_, mc_)};
    std::string dir = save_checkpoint(out_, st, model_.params(), opt_.exp_avg().f32(),
                                      opt_.exp_avg_sq().f32(), dump_toml(cfg_));
    prune_checkpoints(out_, cfg_.keep_checkpoints);
    log_info("checkpoint: {} ({:.1f}s)", dir, seconds_since(t0));
}

TrainSummary Trainer::run(const ResumeOptions& resume) {
    fs::create_directories(out_);
    TrainSummary sum;
    sum.start_step = sum.steps = start(resume);
    write_file_atomic(out_ + "/config.toml", dump_toml(cfg_));
    const int B = cfg_.micro_batch, T = cfg_.seq_len;
    log_info(
        "ete train: {} {}L C={} H={}/{} V={} | {:.2f}M params | {} tokens/step | "
        "activations {:.0f} MiB | backend {}",
        arch_name(mc_.arch), mc_.num_layers, mc_.hidden_size, mc_.num_heads, mc_.num_kv_heads,
        mc_.vocab_size, double(model_.params().numel()) / 1e6, int64_t(B) * T * cfg_.grad_accum,
        double(model_.activation_bytes()) / (1 << 20), backend_->name());
    log_info("data: {} ({}) | {} training / {} validation samples of {} tokens", cfg_.data_train,
             cfg_.data_format, loader_->num_train_samples(), loader_->num_val_samples(), T);
    Progress progress(out_ + "/metrics.jsonl", cfg_.steps, cfg_.log_every);
    StopSignals signals;
    std::vector<double> tps;
    auto run_start = Clock::now();
    for (int64_t s = sum.start_step; s < cfg_.steps; ++s) {
        StepMetrics m = step(s);
        bool last = s + 1 == cfg_.steps;
        if (loader_->num_val_samples() > 0 && cfg_.eval_every > 0 &&
            ((s + 1) % cfg_.eval_every == 0 || last)) {
            m.val_loss =
                evaluate(model_, *loader_, cfg_.eval_batches, B, T, in_, tgt_, doc_start(0));
            sum.final_val_loss = *m.val_loss;
        }
        progress.record(m, seconds_since(run_start), s + 1 - sum.start_step);
        tps.push_back(m.tokens_per_s);
        sum.final_loss = m.loss;
        sum.steps = s + 1;
        if (signals.pending() && !last) {
            progress.finish();
            log_info("received {}: saving a checkpoint after step {}",
                     signals.pending() == SIGINT ? "SIGINT" : "SIGTERM", sum.steps);
            checkpoint(sum.steps);
            log_info("stopped; continue with `ete train ... --out {} --resume auto`", out_);
            sum.interrupted = true;
            return sum;
        }
        if (cfg_.checkpoint_every > 0 && sum.steps % cfg_.checkpoint_every == 0) {
            checkpoint(sum.steps);
        }
    }
    progress.finish();
    if (!tps.empty()) {
        std::nth_element(tps.begin(), tps.begin() + int64_t(tps.size() / 2), tps.end());
        sum.tokens_per_s = tps[tps.size() / 2];
    }
    save_hf_model(out_ + "/final", mc_, model_.params(), tok_ ? cfg_.data_tokenizer : "");
    log_info(
        "done: {} steps in {} | final loss {:.4f} | median {:.0f} tok/s | model saved to "
        "{}/final",
        sum.steps, format_duration(seconds_since(run_start)), sum.final_loss, sum.tokens_per_s,
        out_);
    return sum;
}

TrainSummary run_training(RunConfig cfg, const std::string& out_dir, const ResumeOptions& resume) {
    validate(cfg);
    Trainer trainer(std::move(cfg), out_dir);
    return trainer.run(resume);
}

}  // namespace ete
