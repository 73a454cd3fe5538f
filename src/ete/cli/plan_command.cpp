// ete/cli/plan_command.cpp — `ete plan --model DIR|CONFIG --cluster FILE|local --seq T
// --global-batch B [--goal pretrain|finetune] [--layout k=v,...] [--set k=v] [--json]`.
#include "ete/cli/plan_command.h"

#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ete/backend/backend.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/mem_stats.h"
#include "ete/parallel/launch_env.h"
#include "ete/train/plan.h"
#include "ete/train/run_setup.h"

namespace ete {

namespace {

using json = nlohmann::json;

json layout_json(const PlanLayout& l) {
    return {{"dp", l.dp},
            {"tp", l.tp},
            {"pp", l.pp},
            {"micro_batch", l.micro_batch},
            {"grad_accum", l.grad_accum},
            {"recompute", l.recompute},
            {"zero_stage", l.zero_stage},
            {"precision", l.precision},
            {"method", l.method}};
}

json candidate_json(const PlanCandidate& c) {
    json j = layout_json(c.layout);
    j["predicted_step_s"] = c.cost.total();
    j["predicted_tokens_per_s"] = c.tokens_per_s;
    j["predicted_peak_gib"] = c.peak_gib;
    j["peak_stage"] = c.peak_stage;
    if (!c.placement.empty()) j["placement"] = c.placement;
    j["cost_s"] = {{"compute", c.cost.compute},
                   {"attention", c.cost.attention},
                   {"elementwise", c.cost.elementwise},
                   {"bubble", c.cost.bubble},
                   {"tp", c.cost.tp},
                   {"pp", c.cost.pp},
                   {"dp", c.cost.dp},
                   {"dp_exposed", c.cost.dp_exposed},
                   {"zero_gather", c.cost.zero},
                   {"optimizer", c.cost.optimizer}};
    return j;
}

std::string layout_text(const PlanLayout& l) {
    return fmt::format(
        "dp {} x tp {} x pp {}, micro_batch {} x grad_accum {}, recompute {}, "
        "ZeRO {}, {}, {}",
        l.dp, l.tp, l.pp, l.micro_batch, l.grad_accum, l.recompute, l.zero_stage, l.precision,
        l.method);
}

// Why the winner wins: its time by term, and against the best layout of every other mesh shape
// and method, what that one spends more on.
std::string why(const Plan& p) {
    const PlanCandidate& w = p.ranked[0];
    const StepCost& c = w.cost;
    const bool z3 = w.layout.zero_stage == 3;
    std::string s = fmt::format(
        "compute {:.3f} s (GEMMs {:.3f}, attention {:.3f}, elementwise {:.3f}), bubble {:.3f}, tp "
        "{:.3f}, pp {:.3f}, dp {:.3f} exposed of {:.3f} ({}), {} {:.3f}, optimizer {:.3f}",
        c.work(), c.compute, c.attention, c.elementwise, c.bubble, c.tp, c.pp, c.dp_exposed, c.dp,
        z3 ? "ZeRO-3's gradient reductions, after each group's backward"
           : "the rest hidden behind the last backward",
        z3 ? "ZeRO-3 parameter gathers exposed" : "ZeRO gather", c.zero, c.optimizer);
    if (!w.placement.empty()) s += "; placed " + w.placement;
    int shown = 0;
    std::vector<std::string> seen = {
        fmt::format("{}/{}/{}/{}", w.layout.dp, w.layout.tp, w.layout.pp, w.layout.method)};
    for (const PlanCandidate& o : p.ranked) {
        const std::string key =
            fmt::format("{}/{}/{}/{}", o.layout.dp, o.layout.tp, o.layout.pp, o.layout.method);
        if (std::find(seen.begin(), seen.end(), key) != seen.end() || shown == 3) continue;
        seen.push_back(key);
        ++shown;
        const StepCost& x = o.cost;
        const std::pair<const char*, double> d[] = {
            {"compute", x.work() - c.work()},
            {"bubble", x.bubble - c.bubble},
            {"tp all-reduces", x.tp - c.tp},
            {"pp transfers", x.pp - c.pp},
            {"exposed dp all-reduce", x.dp_exposed - c.dp_exposed},
            {"ZeRO gather", x.zero - c.zero},
            {"optimizer", x.optimizer - c.optimizer}};
        const auto* most = std::max_element(std::begin(d), std::end(d),
                                            [](auto& a, auto& b) { return a.second < b.second; });
        s += fmt::format("\n  vs {}: {:.3f} s slower, mostly {} (+{:.3f} s)", layout_text(o.layout),
                         x.total() - c.total(), most->first, most->second);
    }
    return s;
}

PlanRequest plan_request(const PlanArgs& a, bool dir) {
    PlanRequest req;
    req.base = default_run_config();
    if (dir) {
        apply_override(req.base, "model.init_from=" + a.model);
    } else {
        apply_toml(req.base, read_file(a.model), a.model);
    }
    for (const std::string& o : a.overrides) apply_override(req.base, o);
    req.model = resolve_model(req.base, load_tokenizer(req.base));
    req.seq = a.seq;
    req.global_batch = a.global_batch;
    req.goal = a.goal;
    req.pins = parse_layout_pins(a.layout);
    return req;
}

// --cluster local: this machine (or, under mpirun, this job) measured, the model's GEMMs timed;
// nullopt on the ranks other than 0, which only took part in the measurement.
std::optional<ClusterSpec> measure_local(PlanRequest& req) {
    const LaunchInfo launch = detect_launch();
    std::unique_ptr<Backend> local =
        make_rank_backend(req.base.backend, launch.rank, launch.local_rank);
    std::unique_ptr<Communicator> world;  // under mpirun: this job measured, rank 0 plans
    if (launch.world_size > 1) world = make_world(launch);
    ClusterSpec cluster =
        world ? measure_job(*world, *local, req.base.parallel_bucket_mb) : local_cluster(*local);
    measure_model_gemms(cluster, *local, req.model, req.seq, gemm_points(req, cluster),
                        world.get());
    if (world && world->rank() != 0) return std::nullopt;
    req.runtime_bytes = process_rss_bytes();
    req.threads = omp_get_max_threads();
    return cluster;
}

// The `ete train` (or `ete launch`) line that runs the best layout.
std::string run_command(const Plan& p, const ClusterSpec& cluster, const PlanArgs& a, bool dir) {
    if (p.ranked.empty()) return "";
    std::string user_sets;  // the user's own --set keys, before the layout's
    for (const std::string& o : a.overrides) user_sets += "--set '" + o + "' ";
    const std::string launcher =
        cluster.devices() > 1 ? fmt::format("ete launch -n {}{}{} --", cluster.devices(),
                                            cluster.nodes > 1 ? " --hostfile HOSTS" : "",
                                            cluster.node_gbps.empty() ? "" : " --placement auto")
                              : "ete";
    return fmt::format("{} train {}{}", launcher, dir ? "" : a.model + " ",
                       (dir ? "--set model.init_from=" + a.model + " " : "") + user_sets +
                           layout_sets(p.ranked[0].layout, a.seq));
}

int print_plan_json(const Plan& p, const ClusterSpec& cluster, const std::string& run_line) {
    json cands = json::array(), rejected = json::array();
    for (const PlanCandidate& c : p.ranked) cands.push_back(candidate_json(c));
    for (const auto& [l, reason] : p.rejected) {
        json j = layout_json(l);
        j["reason"] = reason;
        rejected.push_back(j);
    }
    const json out = {{"best", p.ranked.empty() ? json(nullptr) : candidate_json(p.ranked[0])},
                      {"candidates", cands},
                      {"rejected", rejected},
                      {"command", run_line},
                      {"cluster", cluster.source}};
    std::printf("%s\n", out.dump(2).c_str());
    return p.ranked.empty() ? 1 : 0;
}

void print_plan_table(const Plan& p, const PlanRequest& req, const ClusterSpec& cluster,
                      const PlanArgs& a, const std::string& run_line) {
    std::printf(
        "plan: %s %dL C=%d | seq %d, global batch %lld rows | goal %s | cluster %s: %d x "
        "%d devices of %.1f GiB usable, %.1f bf16 TFLOP/s achieved\n",
        arch_name(req.model.arch).c_str(), req.model.num_layers, req.model.hidden_size, a.seq,
        static_cast<long long>(a.global_batch), a.goal.c_str(), cluster.source.c_str(),
        cluster.nodes, cluster.devices_per_node, cluster.device_memory_gib, cluster.bf16_tflops);
    std::printf("layouts: %zu fit, %zu rejected\n", p.ranked.size(), p.rejected.size());
    if (p.ranked.empty()) {
        for (size_t i = 0; i < std::min<size_t>(p.rejected.size(), 5); ++i)
            std::printf("  %s: %s\n", layout_text(p.rejected[i].first).c_str(),
                        p.rejected[i].second.c_str());
        throw_error("plan: no layout fits (the first rejections above; --layout pins fields)");
    }
    std::printf(
        "\n| # | dp | tp | pp | micro_batch | grad_accum | recompute | ZeRO | precision | "
        "method | step s | tokens/s | peak GiB |\n|---|---|---|---|---|---|---|---|---|---|"
        "---|---|---|\n");
    for (size_t i = 0; i < std::min<size_t>(p.ranked.size(), size_t(a.top)); ++i) {
        const PlanCandidate& c = p.ranked[i];
        const PlanLayout& l = c.layout;
        std::printf("| %zu | %d | %d | %d | %d | %d | %s | %d | %s | %s | %.3f | %.0f | %.2f |\n",
                    i + 1, l.dp, l.tp, l.pp, l.micro_batch, l.grad_accum, l.recompute.c_str(),
                    l.zero_stage, l.precision.c_str(), l.method.c_str(), c.cost.total(),
                    c.tokens_per_s, c.peak_gib);
    }
    std::printf("\nbest: %s — %s\nrun: %s\n", layout_text(p.ranked[0].layout).c_str(),
                why(p).c_str(), run_line.c_str());
}

int cmd_plan(const PlanArgs& a) {
    const bool dir = std::filesystem::is_directory(a.model);
    PlanRequest req = plan_request(a, dir);
    ClusterSpec cluster;
    if (a.cluster == "local") {
        std::optional<ClusterSpec> measured = measure_local(req);
        if (!measured) return 0;
        cluster = *measured;
    } else {
        cluster = load_cluster(a.cluster);
    }
    const Plan p = make_plan(req, cluster);
    ETE_CHECK(!p.ranked.empty() || !p.rejected.empty(),
              "plan: no layout of {} devices matches --layout '{}' (dp x tp x pp uses every "
              "device, tp within a node unless pinned, pp at most {} layers, micro_batch a "
              "multiple of dp that divides --global-batch {})",
              cluster.devices(), a.layout, req.model.num_layers, a.global_batch);
    const std::string run_line = run_command(p, cluster, a, dir);
    if (a.json) return print_plan_json(p, cluster, run_line);
    print_plan_table(p, req, cluster, a, run_line);
    return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, PlanArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "plan",
        "Rank the layouts (dp, tp, pp, micro-batch, recompute, ZeRO, precision, "
        "full/LoRA/QLoRA) a job could run with on a cluster: memory from the engine's "
        "own estimate, step time from a cost model (docs/planner.md)");
    c->add_option("--model", a.model, "an HF model dir, or an `ete train` TOML config")
        ->required()
        ->check(CLI::ExistingPath);
    c->add_option("--cluster", a.cluster, "a cluster TOML file ([cluster] keys), or local")
        ->required();
    c->add_option("--seq", a.seq, "sequence length")->required()->check(CLI::PositiveNumber);
    c->add_option("--global-batch", a.global_batch, "rows per optimizer step")
        ->required()
        ->check(CLI::PositiveNumber);
    c->add_option("--goal", a.goal, "pretrain (full training) or finetune (full, LoRA, QLoRA)")
        ->check(CLI::IsMember({"pretrain", "finetune"}))
        ->capture_default_str();
    c->add_option("--layout", a.layout,
                  "pin fields: dp=2,tp=4,pp=1,micro_batch=8,grad_accum=4,recompute=full,"
                  "zero_stage=1,precision=bf16,method=qlora");
    c->add_option("--set", a.overrides, "override a config key: section.key=value");
    c->add_option("--top", a.top, "rows of the table")->capture_default_str();
    c->add_flag("--json", a.json,
                "one JSON object: best, candidates (ranked), rejected (with reasons), command");
    c->callback([&] { run = [&] { return cmd_plan(a); }; });
}

}  // namespace ete
