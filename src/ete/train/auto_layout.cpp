// ete/train/auto_layout.cpp — parallel.auto (auto_layout.h).
#include "ete/train/auto_layout.h"

#include <omp.h>

#include <algorithm>
#include <map>

#include "ete/backend/backend.h"
#include "ete/core/error.h"
#include "ete/core/log.h"
#include "ete/core/mem_stats.h"
#include "ete/train/cluster.h"
#include "ete/train/monitor.h"
#include "ete/train/plan.h"
#include "ete/train/run_setup.h"

namespace ete {

namespace {

std::string layout_line(const PlanCandidate& c) {
    const PlanLayout& l = c.layout;
    return fmt::format(
        "dp {} x tp {} x pp {}, recompute {}, ZeRO {}: predicted {:.3f} s a step (GEMMs "
        "{:.3f}, attention {:.3f}, elementwise {:.3f}, bubble {:.3f}, tp {:.3f}, pp {:.3f}, dp "
        "exposed {:.3f}, optimizer {:.3f}), peak {:.2f} GiB",
        l.dp, l.tp, l.pp, l.recompute, l.zero_stage, c.cost.total(), c.cost.compute,
        c.cost.attention, c.cost.elementwise, c.cost.bubble, c.cost.tp, c.cost.pp,
        c.cost.dp_exposed, c.cost.optimizer, c.peak_gib);
}

}  // namespace

RunConfig auto_layout(const RunConfig& cfg, const LaunchInfo& launch) {
    ETE_CHECK(cfg.precision == "bf16" || cfg.precision == "fp32",
              "parallel.auto: train.precision = {}: the planner knows bf16 and fp32",
              cfg.precision);
    std::unique_ptr<Communicator> world = make_world(launch);
    std::unique_ptr<Backend> backend =
        make_rank_backend(cfg.backend, launch.rank, launch.local_rank);
    ClusterSpec cluster = measure_job(*world, *backend, cfg.parallel_bucket_mb);
    PlanRequest req;
    req.base = cfg;
    req.model = resolve_model(req.base, load_tokenizer(req.base));
    req.seq = cfg.seq_len;
    req.global_batch = int64_t(cfg.micro_batch) * cfg.grad_accum;
    req.goal = cfg.lora_enabled ? "finetune" : "pretrain";
    req.pins = {{"precision", cfg.precision},
                {"grad_accum", std::to_string(cfg.grad_accum)},
                {"method", !cfg.lora_enabled               ? "full"
                           : cfg.lora_base_format == "nf4" ? "qlora"
                                                           : "lora"}};
    // Every rank measures the model's GEMMs at the same points, at once.
    measure_model_gemms(cluster, *backend, req.model, req.seq, gemm_points(req, cluster),
                        world.get());
    // Rank 0 plans; every rank gets its layout: dp, tp, pp, recompute, zero stage, found.
    int64_t pick[6] = {0, 0, 0, 0, 0, 0};
    double predicted = 0;
    if (world->rank() == 0) {
        req.runtime_bytes = process_rss_bytes();
        req.threads = omp_get_max_threads();
        const Plan p = make_plan(req, cluster);
        log_info("parallel.auto: {} | {} layouts fit, {} rejected", cluster.source, p.ranked.size(),
                 p.rejected.size());
        if (!p.ranked.empty()) {
            const PlanLayout& l = p.ranked[0].layout;
            pick[0] = l.dp, pick[1] = l.tp, pick[2] = l.pp, pick[3] = l.recompute == "full",
            pick[4] = l.zero_stage, pick[5] = 1;
            predicted = p.ranked[0].cost.total();
            log_info("parallel.auto: chose {}", layout_line(p.ranked[0]));
            for (const PlanCandidate& c : p.ranked)
                if (c.layout.dp != l.dp || c.layout.tp != l.tp || c.layout.pp != l.pp) {
                    log_info("parallel.auto: runner-up {}", layout_line(c));
                    break;
                }
        } else {
            for (size_t i = 0; i < std::min<size_t>(p.rejected.size(), 3); ++i)
                log_info("parallel.auto: rejected dp {} x tp {} x pp {}: {}",
                         p.rejected[i].first.dp, p.rejected[i].first.tp, p.rejected[i].first.pp,
                         p.rejected[i].second);
        }
    }
    world->broadcast(pick, 6, DType::I64, 0);
    world->broadcast(&predicted, 1, DType::F64, 0);
    if (pick[5] == 0)
        throw ConfigError(fmt::format(
            "parallel.auto: no layout of {} ranks fits or is accepted (global batch {} x {}, "
            "train.precision {}; the first rejections are logged above)",
            world->size(), cfg.micro_batch, cfg.grad_accum, cfg.precision));
    RunConfig out = cfg;
    out.parallel_dp = int(pick[0]);
    out.parallel_tp = int(pick[1]);
    out.parallel_pp = int(pick[2]);
    out.recompute = pick[3] ? "full" : "none";
    out.parallel_zero_stage = int(pick[4]);
    out.parallel_zero1 = false;
    out.auto_predicted_step_s = predicted;
    return out;
}

RunConfig before_auto_layout(const RunConfig& cfg) {
    RunConfig c = cfg;
    if (c.parallel_auto) c.parallel_dp = 0, c.parallel_tp = 1, c.parallel_pp = 1;
    return c;
}

}  // namespace ete
