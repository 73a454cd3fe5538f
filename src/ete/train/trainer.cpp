// ete/train/trainer.cpp — the training loop on one process or on a dp x tp x pp mesh.
//
// Every rank runs the same loop. Data: step s covers global samples [s·G, (s+1)·G) with
// G = grad_accum × (rows per global micro-batch); replica d runs its rows of every micro-batch
// (dist.h). The loss is normalised by the target tokens of the whole global step. Only world
// rank 0 writes files (metrics, config, checkpoints, the final model); every rank reads them.
#include "ete/train/trainer.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/io/checkpoint.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "ete/parallel/grad_sync.h"
#include "ete/parallel/replica_check.h"
#include "ete/train/dist.h"
#include "ete/train/progress.h"
#include "ete/train/run_setup.h"

namespace ete {

namespace fs = std::filesystem;

namespace {

int64_t count_targets(const int32_t* t, size_t n) {
    return std::count_if(t, t + n, [](int32_t x) { return x != kIgnoreIndex; });
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
          dist_(make_dist(cfg_, mc_.tie_word_embeddings)),
          rows_(replica_rows(cfg_.micro_batch, dist_.shape().dp, dist_.groups.dp_rank,
                             cfg_.parallel_uneven_batch)),
          loader_(open_data(cfg_, mc_, tok_, shard_)),
          model_(mc_, *backend_),
          opt_(make_optimizer()),
          sched_(lr_schedule_from_name(cfg_.lr_schedule)) {
        ETE_CHECK(dist_.shape().tp == 1 && dist_.shape().pp == 1,
                  "parallel.tp = {}, parallel.pp = {}: tensor and pipeline parallelism are not "
                  "wired into the trainer yet (data parallelism is)",
                  dist_.shape().tp, dist_.shape().pp);
        const size_t n = size_t(cfg_.grad_accum) * rows_.rows * cfg_.seq_len;
        in_.resize(n);
        tgt_.resize(n);
        if (loader_->packed()) doc_start_.resize(n);
        model_.setup(rows_.rows, cfg_.seq_len, recompute_plan(cfg_.recompute, mc_.num_layers));
        if (dist_.shape().dp > 1) {
            GradSyncOptions o;
            o.bucket_bytes = size_t(cfg_.parallel_bucket_mb * double(1 << 20));
            o.bf16 = cfg_.parallel_grad_bf16;
            o.overlap = cfg_.parallel_overlap;
            sync_ = std::make_unique<GradSync>(*dist_.groups.dp, model_.params().grads(),
                                               size_t(model_.params().numel()), o);
        }
    }

    TrainSummary run(const ResumeOptions& resume);

  private:
    // AdamW over the whole model, or (parallel.zero1) over this replica's 1/dp of it.
    AdamW make_optimizer() {
        AdamWConfig c{cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.adam_eps, cfg_.weight_decay};
        const int64_t n = model_.params().numel(), dp = dist_.shape().dp;
        if (!cfg_.parallel_zero1 || dp == 1) return AdamW(model_.params(), *backend_, c);
        const int64_t per = (n + dp - 1) / dp, begin = std::min(n, dist_.groups.dp_rank * per);
        return AdamW(model_.params(), *backend_, c, begin, std::min(n, begin + per));
    }
    bool zero1() const { return opt_.shard_end() - opt_.shard_begin() != model_.params().numel(); }
    void gather_shards(const float* mine, float* full);
    int64_t start(const ResumeOptions& resume);
    void init_weights();
    void fill_micro(int64_t step, int a);
    StepMetrics step(int64_t step);
    double evaluate();
    void checkpoint(int64_t steps_done);
    void check_replicas(int64_t steps_done);
    bool stop_requested(int local_signal);
    void log_start() const;
    // Samples since the start of training after `step` steps (layout-independent).
    uint64_t data_position(int64_t step) const {
        return uint64_t(step) * uint64_t(cfg_.grad_accum) * uint64_t(rows_.global_rows);
    }
    int32_t* doc_start(size_t offset) {
        return doc_start_.empty() ? nullptr : doc_start_.data() + offset;
    }
    int64_t sum_over(Communicator& c, int64_t v) {
        c.all_reduce(&v, 1, DType::I64, ReduceOp::Sum);
        return v;
    }
    double sum_over(Communicator& c, double v) {
        c.all_reduce(&v, 1, DType::F64, ReduceOp::Sum);
        return v;
    }

    RunConfig cfg_;
    std::string out_;
    std::unique_ptr<Backend> backend_;
    std::optional<Tokenizer> tok_;
    ModelConfig mc_;
    Dist dist_;
    ReplicaRows rows_;
    std::optional<TokenShard> shard_;  // data.format = tokens; outlives the sampler
    std::unique_ptr<BatchSource> loader_;
    Transformer model_;
    AdamW opt_;
    LrSchedule sched_;
    std::unique_ptr<GradSync> sync_;  // dp > 1
    std::vector<int32_t> in_, tgt_;   // (grad_accum, rows, T)
    std::vector<int32_t> doc_start_;  // packed sources only (else empty)
};

void Trainer::init_weights() {
    if (cfg_.model_init_from.empty()) {
        model_.params().init(cfg_.seed);
    } else {
        load_hf_weights(cfg_.model_init_from, model_.params());
    }
}

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
        init_weights();
        if (dist_.main()) fs::remove(out_ + "/metrics.jsonl");
        return 0;
    }
    // Checkpoints hold the whole moments; under ZeRO-1 this replica keeps its slice.
    const size_t n = size_t(model_.params().numel());
    std::vector<float> m(n), v(n);
    CheckpointState st = load_checkpoint(*from, model_.params(), m.data(), v.data());
    std::copy(m.begin() + opt_.shard_begin(), m.begin() + opt_.shard_end(), opt_.exp_avg().f32());
    std::copy(v.begin() + opt_.shard_begin(), v.begin() + opt_.shard_end(),
              opt_.exp_avg_sq().f32());
    check_resume_compatible(st.run, run_settings(cfg_, mc_), *from, resume.force);
    ETE_CHECK(st.data_position == data_position(st.step),
              "checkpoint '{}': data position {} does not match step {}", *from, st.data_position,
              st.step);
    opt_.set_steps_taken(st.optimizer_steps);
    if (dist_.main()) truncate_metrics(out_ + "/metrics.jsonl", st.step);
    log_info("resumed from {} at step {}", *from, st.step);
    return st.step;
}

// ZeRO-1: every replica's [shard_begin, shard_end) slice of a flat buffer of numel elements,
// `mine` holding this replica's, gathered into `full` (all replicas call it).
void Trainer::gather_shards(const float* mine, float* full) {
    const int64_t n = model_.params().numel(), dp = dist_.shape().dp;
    const int64_t per = (n + dp - 1) / dp, have = opt_.shard_end() - opt_.shard_begin();
    std::vector<float> send(size_t(per), 0.0f), all(size_t(per * dp));
    std::copy(mine, mine + have, send.begin());
    dist_.groups.dp->all_gather(send.data(), all.data(), size_t(per), DType::F32);
    std::copy(all.begin(), all.begin() + n, full);
}

// This replica's rows of global micro-batch a of `step` into slot a of the buffers; rows past
// the end of an uneven micro-batch are padding with no targets.
void Trainer::fill_micro(int64_t step, int a) {
    const int T = cfg_.seq_len;
    const size_t o = size_t(a) * rows_.rows * T, pad = size_t(rows_.real) * T;
    const uint64_t first = data_position(step) + uint64_t(a) * rows_.global_rows + rows_.first;
    if (rows_.real > 0) loader_->fill_batch(first, rows_.real, &in_[o], &tgt_[o], doc_start(o));
    const size_t end = o + size_t(rows_.rows) * T;
    std::fill(in_.begin() + int64_t(o + pad), in_.begin() + int64_t(end), 0);
    std::fill(tgt_.begin() + int64_t(o + pad), tgt_.begin() + int64_t(end), kIgnoreIndex);
    if (!doc_start_.empty())
        std::fill(doc_start_.begin() + int64_t(o + pad), doc_start_.begin() + int64_t(end), 0);
}

StepMetrics Trainer::step(int64_t step) {
    const int R = rows_.rows, T = cfg_.seq_len, A = cfg_.grad_accum;
    auto t0 = Clock::now();
    for (int a = 0; a < A; ++a) fill_micro(step, a);
    // Normalise by the target tokens of the whole global step, not a mean of means.
    const int64_t tokens = sum_over(*dist_.groups.dp, count_targets(tgt_.data(), tgt_.size()));
    const float d_scale = 1.0f / float(std::max<int64_t>(tokens, 1));
    model_.params().zero_grads();
    double loss_sum = 0;
    for (int a = 0; a < A; ++a) {
        if (a + 1 == A && sync_) sync_->begin();
        const size_t o = size_t(a) * R * T;
        loss_sum += model_.forward_backward(&in_[o], &tgt_[o], R, T, d_scale, doc_start(o));
    }
    if (sync_) sync_->finish();
    loss_sum = sum_over(*dist_.groups.dp, loss_sum);
    double norm = clip_grad_norm(model_.params(), *backend_, cfg_.grad_clip);
    double lr = lr_at(sched_, step, cfg_.steps, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
    opt_.step(lr);
    if (zero1()) {  // every replica updated its slice: gather the whole model everywhere
        std::vector<float> mine(model_.params().params() + opt_.shard_begin(),
                                model_.params().params() + opt_.shard_end());
        gather_shards(mine.data(), model_.params().params());
    }
    double dt = seconds_since(t0);
    const int64_t step_tokens = int64_t(A) * rows_.global_rows * T;
    return {step + 1,
            loss_sum / double(std::max<int64_t>(tokens, 1)),
            lr,
            norm,
            double(step_tokens) / dt,
            dt * 1e3,
            tokens,
            std::nullopt,
            sync_ ? std::optional<double>(sync_->wait_seconds() * 1e3) : std::nullopt};
}

// Mean loss over train.eval_batches validation micro-batches, split across replicas like
// training micro-batches.
double Trainer::evaluate() {
    const int T = cfg_.seq_len;
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < cfg_.eval_batches && rows_.real > 0; ++i) {
        const uint64_t first = uint64_t(i) * rows_.global_rows + rows_.first;
        loader_->fill_val_batch(first, rows_.real, in_.data(), tgt_.data(), doc_start(0));
        sum += model_.forward_loss(in_.data(), tgt_.data(), rows_.real, T, doc_start(0));
        count += count_targets(tgt_.data(), size_t(rows_.real) * T);
    }
    sum = sum_over(*dist_.groups.dp, sum);
    count = sum_over(*dist_.groups.dp, count);
    return count ? sum / double(count) : 0.0;
}

void Trainer::checkpoint(int64_t steps_done) {
    auto t0 = Clock::now();
    std::vector<float> m, v;  // whole moments, gathered under ZeRO-1
    if (zero1()) {
        m.resize(size_t(model_.params().numel()));
        v.resize(m.size());
        gather_shards(opt_.exp_avg().f32(), m.data());
        gather_shards(opt_.exp_avg_sq().f32(), v.data());
    }
    if (dist_.main()) {
        CheckpointState st{steps_done, opt_.steps_taken(), data_position(steps_done),
                           run_settings(cfg_, mc_)};
        std::string dir =
            save_checkpoint(out_, st, model_.params(), zero1() ? m.data() : opt_.exp_avg().f32(),
                            zero1() ? v.data() : opt_.exp_avg_sq().f32(), dump_toml(cfg_));
        prune_checkpoints(out_, cfg_.keep_checkpoints);
        log_info("checkpoint: {} ({:.1f}s)", dir, seconds_since(t0));
    }
    dist_.world->barrier();  // nobody moves on (or exits) before the checkpoint is committed
}

void Trainer::check_replicas(int64_t steps_done) {
    if (dist_.shape().dp == 1 || cfg_.parallel_replica_check_every == 0 ||
        steps_done % cfg_.parallel_replica_check_every != 0)
        return;
    check_replicas_identical(*dist_.groups.dp, model_.params().params(),
                             size_t(model_.params().numel()), fmt::format("step {}", steps_done));
}

// Ranks receive signals at different moments: they agree to stop when any of them got one.
bool Trainer::stop_requested(int local_signal) {
    int32_t s = local_signal;
    if (dist_.world->size() > 1) dist_.world->all_reduce(&s, 1, DType::I32, ReduceOp::Max);
    return s != 0;
}

void Trainer::log_start() const {
    const MeshShape& m = dist_.shape();
    log_info(
        "ete train: {} {}L C={} H={}/{} V={} | {:.2f}M params | {} tokens/step | "
        "activations {:.0f} MiB | backend {}",
        arch_name(mc_.arch), mc_.num_layers, mc_.hidden_size, mc_.num_heads, mc_.num_kv_heads,
        mc_.vocab_size, double(model_.params().numel()) / 1e6,
        int64_t(rows_.global_rows) * cfg_.seq_len * cfg_.grad_accum,
        double(model_.activation_bytes()) / (1 << 20), backend_->name());
    if (m.size() > 1)
        log_info("parallel: {} ranks = dp {} x tp {} x pp {} | {} rows per replica micro-batch{}",
                 m.size(), m.dp, m.tp, m.pp, rows_.rows,
                 rows_.rows * m.dp != cfg_.micro_batch
                     ? fmt::format(" (train.micro_batch {} is uneven: {})", cfg_.micro_batch,
                                   cfg_.parallel_uneven_batch)
                     : "");
    log_info("data: {} ({}) | {} training / {} validation samples of {} tokens", cfg_.data_train,
             cfg_.data_format, loader_->num_train_samples(), loader_->num_val_samples(),
             cfg_.seq_len);
}

TrainSummary Trainer::run(const ResumeOptions& resume) {
    if (dist_.main()) fs::create_directories(out_);
    TrainSummary sum;
    sum.start_step = sum.steps = start(resume);
    if (dist_.main()) write_file_atomic(out_ + "/config.toml", dump_toml(cfg_));
    log_start();
    std::optional<Progress> progress;
    if (dist_.main()) progress.emplace(out_ + "/metrics.jsonl", cfg_.steps, cfg_.log_every);
    StopSignals signals;
    std::vector<double> tps;
    auto run_start = Clock::now();
    for (int64_t s = sum.start_step; s < cfg_.steps; ++s) {
        StepMetrics m = step(s);
        bool last = s + 1 == cfg_.steps;
        if (loader_->num_val_samples() > 0 && cfg_.eval_every > 0 &&
            ((s + 1) % cfg_.eval_every == 0 || last)) {
            m.val_loss = evaluate();
            sum.final_val_loss = *m.val_loss;
        }
        if (progress) progress->record(m, seconds_since(run_start), s + 1 - sum.start_step);
        tps.push_back(m.tokens_per_s);
        sum.final_loss = m.loss;
        sum.steps = s + 1;
        check_replicas(sum.steps);
        if (stop_requested(signals.pending()) && !last) {
            if (progress) progress->finish();
            const int sig = signals.pending();
            log_info("received {}: saving a checkpoint after step {}",
                     sig == SIGINT    ? "SIGINT"
                     : sig == SIGTERM ? "SIGTERM"
                                      : "a stop request from another rank",
                     sum.steps);
            checkpoint(sum.steps);
            log_info("stopped; continue with `ete train ... --out {} --resume auto`", out_);
            sum.interrupted = true;
            return sum;
        }
        if (cfg_.checkpoint_every > 0 && sum.steps % cfg_.checkpoint_every == 0) {
            checkpoint(sum.steps);
        }
    }
    if (progress) progress->finish();
    if (!tps.empty()) {
        std::nth_element(tps.begin(), tps.begin() + int64_t(tps.size() / 2), tps.end());
        sum.tokens_per_s = tps[tps.size() / 2];
    }
    if (dist_.main())
        save_hf_model(out_ + "/final", mc_, model_.params(), tok_ ? cfg_.data_tokenizer : "");
    dist_.world->barrier();
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
