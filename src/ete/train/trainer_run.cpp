// ete/train/trainer_run.cpp — Trainer::run: the run from start to final/ around the steps
// (trainer.cpp): the watchdog, the attempt record, the start lines, the per-step bookkeeping
// (evaluation, metrics, replica checks), anomalies, stop requests and checkpoints.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>

#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/dir_lock.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/core/signals.h"
#include "ete/parallel/flight_recorder.h"
#include "ete/parallel/pp_schedule.h"
#include "ete/parallel/replica_check.h"
#include "ete/train/memory_estimate.h"
#include "ete/train/run_setup.h"
#include "ete/train/trainer_impl.h"

namespace ete {

namespace fs = std::filesystem;

void Trainer::check_replicas(int64_t steps_done) {
    // ZeRO-3's replicas hold different shards: nothing is replicated to compare.
    if (dist_.shape().dp == 1 || zero() == 3 || cfg_.parallel_replica_check_every == 0 ||
        steps_done % cfg_.parallel_replica_check_every != 0)
        return;
    std::vector<float> w(size_t(model_.params().numel()));
    model_.params().download_masters(w.data());
    check_replicas_identical(*dist_.groups.dp, w.data(), w.size(),
                             fmt::format("step {}", steps_done));
}

// Ranks receive signals at different moments, and only rank 0's clock counts: one all-reduce
// makes every rank act on any rank's request.
Trainer::Requests Trainer::agree_requests(StopSignals& signals, Clock::time_point last_checkpoint) {
    int32_t r[2] = {signals.pending(), signals.take_checkpoint_request() ? 1 : 0};
    if (dist_.main() && cfg_.checkpoint_minutes > 0 &&
        seconds_since(last_checkpoint) >= cfg_.checkpoint_minutes * 60)
        r[1] = 1;
    if (end_checkpoint_due()) r[1] = 1;  // rank 0: the Slurm time limit is near
    if (dist_.world->size() > 1) dist_.world->all_reduce(r, 2, DType::I32, ReduceOp::Max);
    return {r[0] != 0, r[1] != 0};
}

// After anomaly.max_consecutive_skips anomalous steps in a row. The weights are still those of
// the last step taken (skipped steps change nothing), so both policies start from good weights.
bool Trainer::on_repeated_anomalies(TrainSummary& sum) {
    const int n = consecutive_skips_;
    consecutive_skips_ = 0;
    const std::optional<std::string> newest =
        anomaly_.on_repeated == "rollback" ? newest_good_checkpoint() : std::nullopt;
    if (newest && rollbacks_ < anomaly_.max_rollbacks) {
        CheckpointState st;
        load_state(*newest, st, true);
        restore_state(st);
        if (QatRuntime* q = model_.qat()) q->begin_step(sum.steps);  // the reloaded weights
        ++rollbacks_;
        if (dist_.main()) {
            update_gauges([](RunGauges& g) { ++g.rollbacks; });
            log_warn(
                "anomaly: {} steps in a row skipped; rolled back to {} (rollback {} of {}); "
                "the data of steps {}..{} is not trained on",
                n, *newest, rollbacks_, anomaly_.max_rollbacks, st.step + 1, sum.steps);
        }
        return true;
    }
    const std::string why =
        anomaly_.on_repeated == "rollback"
            ? (newest ? fmt::format(" (anomaly.max_rollbacks = {} reached)", anomaly_.max_rollbacks)
                      : std::string(" (no checkpoint to roll back to)"))
            : std::string();
    checkpoint(sum.steps, true);
    if (dist_.main())
        std::fprintf(
            stderr, "%s\n",
            fmt::format("ete: error: training stopped{}: {} steps in a row skipped as anomalous "
                        "(skip_causes in {}/metrics.jsonl); the last good weights are in the "
                        "checkpoint above: lower train.lr or check the data, then resume with "
                        "--resume auto (--resume-force train.lr to change it)",
                        why, n, out_)
                .c_str());
    sum.diverged = true;
    end_attempt("diverged", sum.steps);  // final (exit 3): not a failure to count
    return false;
}

void Trainer::log_start() const {
    const MeshShape& m = dist_.shape();
    log_info(
        "ete train: {} {}L C={} H={}/{} V={} | {:.2f}M params | {} tokens/step | "
        "activations {:.0f} MiB | backend {} | precision {}",
        arch_name(mc_.arch), mc_.num_layers, mc_.hidden_size, mc_.num_heads, mc_.num_kv_heads,
        mc_.vocab_size, double(model_.params().numel()) / 1e6,
        int64_t(rows_.global_rows) * cfg_.seq_len * cfg_.grad_accum,
        double(model_.activation_bytes()) / (1 << 20), backend_->name(), cfg_.precision);
    log_info("backend: {}", backend_->describe());
    const std::string advice = cfg_.backend == "cuda" ? "" : cpu::openblas_core_advice();
    if (!advice.empty() && dist_.main()) log_warn("{}", advice);
    log_memory_estimate();
    if (m.size() > 1)
        log_info(
            "parallel: {} ranks = dp {} x tp {} x pp {} | {} rows per replica micro-batch{}{}",
            m.size(), m.dp, m.tp, m.pp, rows_.rows,
            rows_.rows * m.dp != cfg_.micro_batch
                ? fmt::format(" (train.micro_batch {} is uneven: {})", cfg_.micro_batch,
                              cfg_.parallel_uneven_batch)
                : "",
            zero() > 0
                ? fmt::format(" | ZeRO stage {}: {} of {} of {} elements", zero(),
                              zero() == 3       ? "parameters, gradients and optimizer state"
                              : zero2_windows() ? "gradients and optimizer state"
                              : zero() == 2 ? "optimizer state (gradients reduced to their owners "
                                              "in a whole buffer: embeddings tied across "
                                              "pipeline stages)"
                                            : "optimizer state",
                              zero_range().size(), model_.params().numel())
                : "");
    if (m.pp > 1) {
        const std::vector<int> b = pipeline_layer_bounds(mc_, m.pp, cfg_.parallel_pp_layers);
        std::string stages;
        for (int i = 0; i < m.pp; ++i)
            stages += fmt::format("{}[{}, {})", i ? " " : "", b[size_t(i)], b[size_t(i) + 1]);
        log_info(
            "pipeline: {} stages, layers {} | 1F1B over {} micro-batches, theoretical bubble "
            "{:.3f}",
            m.pp, stages, cfg_.grad_accum, bubble_fraction_theory(m.pp, cfg_.grad_accum));
    }
    log_info("data: {} ({}) | {} training / {} validation samples of {} tokens", cfg_.data_train,
             cfg_.data_format, loader_->num_train_samples(), loader_->num_val_samples(),
             cfg_.seq_len);
    if (cfg_.qat_enabled)
        log_info(
            "qat: {} | W{} per {}, A{} per {} | observers watch from step 1, fake "
            "quantization from step {}{}",
            cfg_.qat_points, cfg_.qat_weight_bits, cfg_.qat_weight_granularity, cfg_.qat_act_bits,
            cfg_.qat_act_granularity, cfg_.qat_warmup_steps + 1,
            cfg_.qat_freeze_step > 0
                ? fmt::format(", observers frozen from step {}", cfg_.qat_freeze_step + 1)
                : "");
}

// Rank 0's estimate, and the largest rank's where that is another (a last pipeline stage holds
// the head, a ZeRO tail shard more state): every rank's terms are gathered (one all-gather), and
// the largest is the one whose peak without its runtime term is largest (the lowest on a tie), so
// the ranks' start-up noise does not pick it.
void Trainer::log_memory_estimate() const {
    const MemoryEstimate e =
        estimate_memory(model_, cfg_, dist_.shape().dp, runtime_rss_, omp_get_max_threads());
    log_info("memory estimate (rank {}): {}", dist_.world->rank(), e.line(cfg_.lora_enabled));
    const int n = dist_.world->size();
    if (n == 1) return;
    constexpr int kTerms = 10;
    auto terms = [](MemoryEstimate& x) {
        return std::array<uint64_t*, kTerms>{&x.runtime,   &x.frozen,      &x.weights, &x.gradients,
                                             &x.optimizer, &x.activations, &x.comm,    &x.workspace,
                                             &x.loading,   &x.frozen_dense};
    };
    MemoryEstimate mine = e;
    std::vector<double> all(size_t(n) * kTerms);
    for (int t = 0; t < kTerms; ++t)
        all[size_t(dist_.world->rank() * kTerms + t)] = double(*terms(mine)[size_t(t)]);
    dist_.world->all_gather(all.data() + dist_.world->rank() * kTerms, all.data(), kTerms,
                            DType::F64);
    int largest = 0;
    MemoryEstimate top;
    uint64_t top_runtime = 0;
    for (int r = 0; r < n; ++r) {
        MemoryEstimate x;
        for (int t = 0; t < kTerms; ++t)
            *terms(x)[size_t(t)] = uint64_t(all[size_t(r * kTerms + t)]);
        x.runtime = 0;  // what the layout holds decides, not the ranks' start-up noise
        if (r == 0 || x.peak() > top.peak()) {
            largest = r;
            top = x;
            top_runtime = uint64_t(all[size_t(r * kTerms)]);
        }
    }
    top.runtime = top_runtime;
    if (largest != 0)
        log_info("memory estimate (rank {}, the largest of {}): {}", largest, n,
                 top.line(cfg_.lora_enabled));
}

// After 5 steps (or the run's last), the median of steps 2.. (the first warms caches and
// allocators up) beside parallel.auto's prediction.
void Trainer::log_auto_measured(int64_t nth, double step_s, bool last) {
    if (cfg_.auto_predicted_step_s <= 0 || nth > 5) return;
    if (nth > 1 || last) auto_steps_s_.push_back(step_s);
    if ((nth < 5 && !last) || auto_steps_s_.empty() || !dist_.main()) return;
    std::vector<double> v = auto_steps_s_;
    std::sort(v.begin(), v.end());
    const double med = v[v.size() / 2], pred = cfg_.auto_predicted_step_s;
    log_info(
        "parallel.auto: measured {:.3f} s a step (median of {} step{}) against the predicted "
        "{:.3f} s ({:+.0f}%)",
        med, v.size(), v.size() > 1 ? "s" : "", pred, (pred / med - 1) * 100);
}

void Trainer::log_memory_measured() {
    const MeshShape& m = dist_.shape();
    double v[2] = {
        double(process_peak_rss_bytes()),
        double(estimate_memory(model_, cfg_, m.dp, runtime_rss_, omp_get_max_threads()).peak())};
    if (dist_.world->size() > 1) dist_.world->all_reduce(v, 2, DType::F64, ReduceOp::Max);
    log_info("memory: measured peak RSS {} against the estimated peak {} ({:+.1f}%){}",
             format_bytes(uint64_t(v[0])), format_bytes(uint64_t(v[1])),
             100.0 * (v[0] - v[1]) / v[1], dist_.world->size() > 1 ? " (max over ranks)" : "");
}

void Trainer::start_watchdog() {
    FlightRecorder::instance().set_enabled(cfg_.monitor_watchdog);
    if (dist_.world->size() == 1 || !cfg_.monitor_watchdog) return;
    WatchdogOptions w;
    w.run_dir = out_;
    w.rank = dist_.world->rank();
    w.timeout_s = cfg_.parallel_timeout_s;
    w.warn_s = hang_warn_seconds(cfg_.parallel_hang_warn_s, cfg_.parallel_timeout_s);
    watchdog_ = std::make_unique<Watchdog>(w);
}

TrainSummary Trainer::run(const ResumeOptions& resume) {
    // The run owns --out before it reads or changes anything there (core/dir_lock.h).
    std::optional<DirLock> lock;
    if (dist_.main()) {
        fs::create_directories(out_);
        lock.emplace(out_);
    }
    start_watchdog();
    TrainSummary sum;
    sum.start_step = sum.steps = start(resume);
    begin_attempt(sum.start_step);
    if (QatRuntime* q = model_.qat()) q->begin_step(sum.start_step);
    if (dist_.main()) write_file_atomic(out_ + "/config.toml", dump_toml(cfg_));
    log_start();
    std::optional<Progress> progress;
    if (dist_.main()) progress.emplace(out_ + "/metrics.jsonl", cfg_.steps, cfg_.log_every);
    StopSignals signals;
    if (stop_before_first_step(signals, sum)) return sum;
    std::vector<double> tps;
    run_start_ = last_checkpoint_ = Clock::now();
    start_monitor();
    for (int64_t s = sum.start_step; s < cfg_.steps; ++s) {
        tps.push_back(train_step(s, sum, progress).tokens_per_s);
        check_replicas(sum.steps);
        const bool last = s + 1 == cfg_.steps;
        if (consecutive_skips_ >= anomaly_.max_consecutive_skips) {
            if (progress) progress->finish();
            if (!on_repeated_anomalies(sum)) return sum;
        }
        const Requests req = agree_requests(signals, last_checkpoint_);
        if (req.stop && !last) {
            if (progress) progress->finish();
            stop_on_request(signals, sum);
            return sum;
        }
        // train.checkpoint_every, SIGUSR1 or train.checkpoint_minutes (the last step's model
        // goes to final/ anyway).
        const bool every = cfg_.checkpoint_every > 0 && sum.steps % cfg_.checkpoint_every == 0;
        if (every || (req.checkpoint && !last)) {
            record_checkpoint(sum.steps, false);
            check_stop_grace(last_step_s_);  // now with a measured checkpoint time
        }
    }
    if (progress) progress->finish();
    finish_run(sum, tps);
    return sum;
}

StepMetrics Trainer::train_step(int64_t s, TrainSummary& sum, std::optional<Progress>& progress) {
    if (watchdog_) watchdog_->set_step(s + 1);
    StepMetrics m = step(s);
    const bool last = s + 1 == cfg_.steps;
    last_step_s_ = m.step_ms * 1e-3;
    log_auto_measured(s + 1 - sum.start_step, last_step_s_, last);
    if (s + 1 == std::min<int64_t>(sum.start_step + 3, cfg_.steps)) {
        log_memory_measured();
        check_stop_grace(last_step_s_);
    }
    if (loader_->num_val_samples() > 0 && cfg_.eval_every > 0 &&
        ((s + 1) % cfg_.eval_every == 0 || last)) {
        m.val_loss = evaluate();
        sum.final_val_loss = *m.val_loss;
    }
    gather_rank_times(m);
    if (progress) progress->record(m, seconds_since(run_start_), s + 1 - sum.start_step);
    publish(m, progress ? &*progress : nullptr);
    sum.final_loss = m.loss;
    sum.steps = s + 1;
    return m;
}

// An interval save that fails (disk full) is retried at the next interval, not fatal.
void Trainer::record_checkpoint(int64_t steps, bool must_succeed) {
    const bool ok = checkpoint(steps, must_succeed);
    if (ok) last_checkpoint_ = Clock::now();
    if (dist_.main())
        update_gauges([&](RunGauges& g) {
            ++(ok ? g.checkpoints : g.checkpoint_failures);
            if (ok) g.last_checkpoint = last_checkpoint_;
        });
}

void Trainer::stop_on_request(StopSignals& signals, TrainSummary& sum) {
    const int sig = signals.pending();
    log_info("received {}: saving a checkpoint after step {}",
             sig ? fmt::format("{} {:.1f} s ago", signal_name(sig), seconds_since_stop_signal())
                 : std::string("a stop request from another rank"),
             sum.steps);
    record_checkpoint(sum.steps, true);
    if (sig)
        log_info("checkpoint committed {:.1f} s after {}", seconds_since_stop_signal(),
                 signal_name(sig));
    end_attempt("stopped", sum.steps);
    log_info("stopped; continue with `ete train ... --out {} --resume auto`", out_);
    sum.interrupted = true;
}

void Trainer::finish_run(TrainSummary& sum, std::vector<double>& tps) {
    if (!tps.empty()) {
        std::nth_element(tps.begin(), tps.begin() + int64_t(tps.size() / 2), tps.end());
        sum.tokens_per_s = tps[tps.size() / 2];
    }
    save_final();
    end_attempt("done", sum.steps);
    if (tps.empty()) {  // resumed at its last step: no loss or speed of this attempt to report
        log_info(
            "done: nothing left to train ({} of {} steps were done before) | model saved to "
            "{}/final",
            sum.steps, cfg_.steps, out_);
        return;
    }
    log_info(
        "done: {} steps in {} | final loss {:.4f} | median {:.0f} tok/s | model saved to "
        "{}/final",
        sum.steps, format_duration(seconds_since(run_start_)), sum.final_loss, sum.tokens_per_s,
        out_);
}

TrainSummary run_training(RunConfig cfg, const std::string& out_dir, const ResumeOptions& resume) {
    validate(cfg);
    Trainer trainer(std::move(cfg), out_dir);
    return trainer.run(resume);
}

}  // namespace ete
