// ete/train/trainer_monitor.cpp — what a run exposes while it trains (docs/operations.md):
// Prometheus gauges served by rank 0, TensorBoard scalars, and every rank's step time gathered
// every monitor.straggler_every steps for the straggler score.
#include <omp.h>

#include <algorithm>

#include "ete/core/log.h"
#include "ete/core/mem_stats.h"
#include "ete/train/trainer_impl.h"

namespace ete {

void Trainer::start_monitor() {
    const bool serve = cfg_.monitor_prometheus_port > 0;
    const ParamStore& ps = model_.params();
    flops_per_token_ = model_flops_per_token(mc_, cfg_.seq_len, ps.numel(), cfg_.lora_enabled);
    if (serve || cfg_.monitor_tensorboard) {
        // The peak of the whole job: every rank's, configured or measured.
        double peak = cfg_.monitor_peak_flops > 0
                          ? cfg_.monitor_peak_flops
                          : measure_peak_flops(*backend_, compute_dtype(cfg_));
        peak_flops_ = dist_.world->size() > 1 ? sum_over(*dist_.world, peak) : peak;
    }
    if (!dist_.main()) return;
    const MeshShape& m = dist_.shape();
    update_gauges([&](RunGauges& g) {
        g.target_steps = cfg_.steps;
        g.arch = arch_name(mc_.arch);
        g.precision = cfg_.precision;
        g.layout = fmt::format("dp{}_tp{}_pp{}", m.dp, m.tp, m.pp);
        g.world = dist_.world->size();
        g.peak_flops = peak_flops_ > 0 ? peak_flops_ : RunGauges::kNone;
        g.last_checkpoint = run_start_;
    });
    if (cfg_.monitor_tensorboard) {
        tb_ = std::make_unique<TensorBoardWriter>(out_);
        log_info("tensorboard: {}", tb_->path());
    }
    if (serve) {
        metrics_server_ = std::make_unique<MetricsServer>(
            cfg_.monitor_prometheus_addr, cfg_.monitor_prometheus_port, [this] {
                RunGauges g;
                {
                    std::lock_guard<std::mutex> lock(gauges_mu_);
                    g = gauges_;
                }
                return render_exposition(run_metric_families(g));
            });
        log_info("prometheus: http://{}:{}/metrics | peak {:.3g} FLOP/s ({})",
                 cfg_.monitor_prometheus_addr, cfg_.monitor_prometheus_port, peak_flops_,
                 cfg_.monitor_peak_flops > 0 ? "monitor.peak_flops" : "measured");
    }
}

// Each rank's step time, the part of it not spent waiting on communication (data-parallel
// bucket waits, tensor-parallel all-reduces, pipeline waits) and its peak RSS, gathered over the
// world; the slowest rank's compute over the fastest's goes to metrics.jsonl.
void Trainer::gather_rank_times(StepMetrics& m) {
    const int world = dist_.world->size();
    if (world == 1 || cfg_.monitor_straggler_every == 0 ||
        m.step % cfg_.monitor_straggler_every != 0)
        return;
    // Forward and backward less the waits inside them: tensor-parallel all-reduces and the
    // pipeline's waits for activations and gradients (data-parallel buckets go on another thread
    // during backward; a rank that waits for a slower one does so in the collectives after it).
    const double step_s = m.step_ms / 1e3;
    double wait_s = m.tp_comm_ms.value_or(0) / 1e3;
    if (dist_.shape().pp > 1) wait_s += last_pipe_.measured_bubble() * step_s;
    const double mine[3] = {step_s, std::max(0.0, m.compute_ms / 1e3 - wait_s),
                            double(process_peak_rss_bytes())};
    std::vector<double> all(size_t(3 * world));
    dist_.world->all_gather(mine, all.data(), 3, DType::F64);
    const size_t n = size_t(world);
    std::vector<double> step(n), compute(n);
    double rss = 0;
    for (int r = 0; r < world; ++r) {
        step[size_t(r)] = all[size_t(3 * r)];
        compute[size_t(r)] = all[size_t(3 * r + 1)];
        rss = std::max(rss, all[size_t(3 * r + 2)]);
    }
    const std::vector<double> score = straggler_scores(compute);
    const auto worst = std::max_element(score.begin(), score.end());
    m.straggler_score = *worst;
    m.straggler_rank = int(worst - score.begin());
    if (dist_.main())
        update_gauges([&](RunGauges& g) {
            g.rank_step_s = step;
            g.rank_compute_s = compute;
            g.peak_rss_bytes = rss;
        });
}

void Trainer::publish(const StepMetrics& m, const Progress* progress) {
    if (!dist_.main()) return;
    const double flops = flops_per_token_ * m.tokens_per_s;
    update_gauges([&](RunGauges& g) {
        g.steps = m.step;
        g.tokens += double(m.tokens);
        g.loss = m.loss;
        if (m.val_loss) g.val_loss = *m.val_loss;
        g.lr = m.lr;
        g.grad_norm = m.grad_norm;
        g.tokens_per_s = m.tokens_per_s;
        g.flops_per_s = flops;
        g.mfu = peak_flops_ > 0 ? flops / peak_flops_ : RunGauges::kNone;
        g.step_s = m.step_ms / 1e3;
        g.dp_wait_s = m.comm_wait_ms ? *m.comm_wait_ms / 1e3 : RunGauges::kNone;
        g.tp_comm_s = m.tp_comm_ms ? *m.tp_comm_ms / 1e3 : RunGauges::kNone;
        g.pp_bubble = m.pp_bubble.value_or(RunGauges::kNone);
        g.loss_scale = m.loss_scale.value_or(RunGauges::kNone);
        if (m.skip_causes.is_object())
            for (const auto& [cause, ranks] : m.skip_causes.items()) ++g.skipped[cause];
        if (dist_.world->size() == 1) {  // no gather: this rank's own numbers
            g.peak_rss_bytes = double(process_peak_rss_bytes());
            g.rank_step_s = {m.step_ms / 1e3};
            g.rank_compute_s = {m.compute_ms / 1e3};
        }
        if (progress) g.metrics_lines_lost = progress->lost_lines();
    });
    if (!tb_) return;
    std::vector<std::pair<std::string, double>> scalars;
    const nlohmann::json row = metrics_json(m);
    for (const auto& [k, v] : row.items()) {
        if (k == "step") continue;
        if (v.is_number()) scalars.emplace_back(k, v.get<double>());
        if (v.is_boolean()) scalars.emplace_back(k, v.get<bool>() ? 1.0 : 0.0);
    }
    if (peak_flops_ > 0) scalars.emplace_back("mfu", flops / peak_flops_);
    const double wall =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    tb_->add_scalars(m.step, wall, scalars);
}

}  // namespace ete
