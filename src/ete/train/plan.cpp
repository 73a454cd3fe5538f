// ete/train/plan.cpp — layouts enumerated, sized by plan_memory, timed by the cost model of
// plan.h, ranked.
#include "ete/train/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <tuple>

#include "ete/core/error.h"
#include "ete/model/param_spec.h"
#include "ete/model/transformer.h"
#include "ete/parallel/mesh.h"
#include "ete/train/job_check.h"
#include "ete/train/memory_estimate.h"
#include "ete/train/monitor.h"

namespace ete {

namespace {

const std::vector<std::string>& pin_names() {
    static const std::vector<std::string> names = {"dp",          "tp",         "pp",
                                                   "micro_batch", "grad_accum", "recompute",
                                                   "zero_stage",  "precision",  "method"};
    return names;
}

bool is_count(const std::string& v) {
    return !v.empty() && v.size() < 9 && v[0] != '0' &&
           std::all_of(v.begin(), v.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

std::vector<int> divisors(int n) {
    std::vector<int> d;
    for (int i = 1; i <= n; ++i)
        if (n % i == 0) d.push_back(i);
    return d;
}

// Whether the mesh group along `axis` holding rank 0 spans more than one node (ranks placed in
// mesh order, devices_per_node to a node).
bool crosses_nodes(const MeshShape& m, MeshAxis axis, int per_node) {
    const std::vector<int> g = mesh_group_ranks(m, axis, 0);
    for (int r : g)
        if (r / per_node != g[0] / per_node) return true;
    return false;
}

// A ring all-reduce of `bytes` over n ranks on a link (GB/s, µs).
double ring_all_reduce_s(double bytes, int n, double gbps, double lat_us) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / (gbps * 1e9) + 2.0 * (n - 1) * lat_us * 1e-6;
}

struct Link {
    double gbps, lat_us;
};

Link link_of(const ClusterSpec& c, bool inter) {
    return inter ? Link{c.inter_gbytes_per_s, c.inter_latency_us}
                 : Link{c.intra_gbytes_per_s, c.intra_latency_us};
}

// The link each axis's collectives cross: on a placement, the slowest link of the axis's slowest
// group (placement_cost), latencies of the inter-node link where a group spans nodes; in launch
// order, the intra-node link for a group inside one node, else the inter-node one.
struct AxisLinks {
    Link tp, dp, pp;
};
AxisLinks axis_links(const ClusterSpec& c, const MeshShape& m, const PlacementCost* placed) {
    if (!placed) {
        auto at = [&](MeshAxis a) { return link_of(c, crosses_nodes(m, a, c.devices_per_node)); };
        return {at(MeshAxis::Tp), at(MeshAxis::Dp), at(MeshAxis::Pp)};
    }
    auto at = [&](int a) {
        return Link{placed->gbps[a],
                    placed->crosses_nodes[a] ? c.inter_latency_us : c.intra_latency_us};
    };
    return {at(0), at(1), at(2)};
}

// Where the cluster describes its nodes' links: each layout's placement as `ete launch
// --placement auto` makes it (the same bytes, parallel/placement.h), searched once per mesh,
// recompute, precision and method (what its bytes depend on), within a budget of search steps.
class Placer {
  public:
    explicit Placer(const ClusterSpec& c) : on_(!c.node_gbps.empty()) {
        if (on_) links_ = cluster_links(c);
    }
    struct Placed {
        Placement placement;
        std::string text;  // describe_placement
    };
    const Placed* at(const PlanRequest& req, const PlanLayout& l, int64_t total) {
        if (!on_) return nullptr;
        const auto key = std::make_tuple(l.dp, l.tp, l.pp, l.recompute, l.precision, l.method);
        auto it = done_.find(key);
        if (it == done_.end()) {
            const MeshShape m{l.dp, l.tp, l.pp};
            const AxisBytes b = comm_bytes(layout_config(req.base, req.seq, l), req.model, total);
            Placed p{place_ranks(m, links_, b, 200'000), ""};
            p.text = describe_placement(m, links_, p.placement.device_of_rank);
            it = done_.emplace(key, std::move(p)).first;
        }
        return &it->second;
    }

  private:
    bool on_;
    DeviceLinks links_;
    std::map<std::tuple<int, int, int, std::string, std::string, std::string>, Placed> done_;
};

// ZeRO-3 (plan.h): the parameter groups of a stage (embeddings, its layers, head).
double zero3_groups(const PlanRequest& req, const PlanLayout& l) {
    return double(req.model.num_layers) / l.pp + 2;
}

// ZeRO-3's (and ZeRO-2's gradient windows') reductions: every micro-batch, each group's fp32
// (parallel.grad_bf16: bf16) gradient reduced to the replicas owning its pieces right after its
// backward, not overlapped: NCCL's reduce ((dp-1)/dp of the bytes, as a reduce-scatter) or MPI's
// in-place all-reduce; a latency per group.
double zero3_reduce_s(const PlanRequest& req, const ClusterSpec& c, const PlanLayout& l,
                      const Link& dp, int64_t n) {
    const double bytes = double(n) * (req.base.parallel_grad_bf16 ? 2 : 4);
    const double move = c.nccl ? double(l.dp - 1) / l.dp * bytes / (dp.gbps * 1e9)
                               : ring_all_reduce_s(bytes, l.dp, dp.gbps, 0);
    return l.grad_accum * (move + zero3_groups(req, l) * dp.lat_us * 1e-6);
}

// ZeRO-3's parameter gathers: a rank receives the (dp-1)/dp of each group's fp32 masters and of
// its frozen base (bytes as stored: NF4 or 16-bit) it does not hold, per forward and again per
// backward (parallel.zero_reshard_after_forward), every micro-batch, log2(dp) latencies a group
// (broadcasts). The next group's gather is prefetched
// while one computes: where the cluster overlaps communication, what is exposed is
// max(gathers - work, one group's gather a pass); else all of it.
double zero3_gather_s(const PlanRequest& req, const ClusterSpec& c, const PlanLayout& l,
                      const Link& dp, int64_t n, double frozen, double work) {
    const double passes = l.grad_accum * (req.base.parallel_zero_reshard_after_forward ? 2 : 1);
    const double groups = zero3_groups(req, l);
    const double all =
        passes * (double(l.dp - 1) / l.dp * (double(n) * 4 + frozen) / (dp.gbps * 1e9) +
                  groups * std::ceil(std::log2(l.dp)) * dp.lat_us * 1e-6);
    if (!c.overlap || !req.base.parallel_overlap) return all;
    return std::max(all - work, all / groups);
}

// The step cost of layout l (plan.h). trainable_rank: the trainable elements of its largest
// stage's rank (what it all-reduces and steps); frozen_rank: stage 3's whole frozen base of that
// rank (bytes); trainable_total: the whole model's; placed: the layout's placement where the
// cluster describes its nodes' links (else launch order).
StepCost step_cost(const PlanRequest& req, const ClusterSpec& c, const PlanLayout& l,
                   int64_t trainable_rank, double frozen_rank, int64_t trainable_total,
                   const PlacementCost* placed) {
    const ModelConfig& mc = req.model;
    const MeshShape m{l.dp, l.tp, l.pp};
    const bool frozen = l.method != "full";
    const double tokens = double(req.global_batch) * req.seq;
    double flops = model_flops_per_token(mc, req.seq, trainable_total, frozen) * tokens;
    if (c.attention_s > 0) flops -= attention_flops_per_token(mc, req.seq) * tokens;
    const double rate = c.gemm_tflops(l.precision, l.tp, double(l.micro_batch) / l.dp) * 1e12;
    const double layers = double(mc.num_layers) / l.pp;
    const double replica_rows = double(req.global_batch) / l.dp;
    const double C = mc.hidden_size, F = mc.intermediate_size, V = mc.vocab_size;
    const double D = mc.head_dim > 0 ? mc.head_dim : C / mc.num_heads;
    StepCost s;
    s.compute = flops / double(m.size()) / rate;
    if (l.method == "qlora") s.compute *= 1.18;
    if (c.attention_s > 0)
        s.attention = replica_rows * layers * (double(mc.num_heads) / l.tp) * req.seq *
                      (req.seq + 1) / 2.0 * D * c.attention_s;
    if (c.memory_gbytes_per_s > 0) {
        const double per_layer = 24 * C + (mc.family().gated_mlp() ? 8 : 5) * F / l.tp +
                                 4.0 * (mc.num_heads + mc.num_kv_heads) * D / l.tp;
        const double elems = layers * per_layer + 3 * V / l.tp + 2 * C;
        s.elementwise = replica_rows * req.seq * elems * 4 / (c.memory_gbytes_per_s * 1e9);
    }
    if (l.recompute == "full") {
        const double again = 1.0 + (frozen ? 0.5 : 1.0 / 3.0);
        s.compute *= again, s.attention *= again, s.elementwise *= again;
    }
    s.bubble = s.work() * double(l.pp - 1) / double(l.grad_accum);
    const double rows = double(l.micro_batch) / l.dp;
    const double act = rows * req.seq * mc.hidden_size;
    const AxisLinks links = axis_links(c, m, placed);
    const Link& tp = links.tp;
    const double per_ar =
        ring_all_reduce_s(act * (l.precision == "fp32" ? 4 : 2), l.tp, tp.gbps, tp.lat_us);
    s.tp = l.grad_accum * layers * (l.recompute == "full" ? 6 : 4) * per_ar;
    if (l.pp > 1) {
        const Link& pp = links.pp;
        s.pp = 2.0 * l.grad_accum * (act * 4 / (pp.gbps * 1e9) + pp.lat_us * 1e-6);
    }
    if (l.dp > 1 && l.zero_stage == 3) {
        s.dp = s.dp_exposed = zero3_reduce_s(req, c, l, links.dp, trainable_rank);
        s.zero = zero3_gather_s(req, c, l, links.dp, trainable_rank, frozen_rank, s.work());
    } else if (zero2_shards_grads(req.base, mc, l.dp, l.pp, l.zero_stage)) {
        // ZeRO-2's gradient windows reduce as stage 3's do; the masters are gathered as stage 1's.
        s.dp = s.dp_exposed = zero3_reduce_s(req, c, l, links.dp, trainable_rank);
        s.zero = double(l.dp - 1) / l.dp * double(trainable_rank) * 4 / (links.dp.gbps * 1e9);
    } else if (l.dp > 1) {
        const Link& dp = links.dp;
        const double grad = double(trainable_rank) * (req.base.parallel_grad_bf16 ? 2 : 4);
        const double bucket = std::min(grad, double(req.base.parallel_bucket_mb) * (1 << 20));
        const double half = l.zero_stage == 2 && c.nccl ? 0.5 : 1.0;
        s.dp = half * ring_all_reduce_s(grad, l.dp, dp.gbps, dp.lat_us);
        const bool overlap = c.overlap && req.base.parallel_overlap;
        const double backward = overlap ? (s.work() / l.grad_accum) * 2.0 / 3.0 : 0.0;
        s.dp_exposed =
            std::max(s.dp - backward, half * ring_all_reduce_s(bucket, l.dp, dp.gbps, dp.lat_us));
        if (l.zero_stage >= 1)
            s.zero = double(l.dp - 1) / l.dp * double(trainable_rank) * 4 / (dp.gbps * 1e9);
    }
    if (c.memory_gbytes_per_s > 0) {
        const double shard = l.zero_stage >= 1 ? double(trainable_rank) / l.dp : trainable_rank;
        const double bytes = req.base.optimizer == "adamw8bit" ? 16 : 30;
        s.optimizer = (shard * bytes + double(trainable_rank) * 16) / (c.memory_gbytes_per_s * 1e9);
    }
    return s;
}

// The layouts of the request, pins applied, before any check.
std::vector<PlanLayout> enumerate(const PlanRequest& req, const ClusterSpec& c) {
    auto pinned = [&](const std::string& k, const std::string& v) {
        auto it = req.pins.find(k);
        return it == req.pins.end() || it->second == v;
    };
    std::vector<std::string> methods = {"full"};
    if (req.goal == "finetune") methods = {"full", "lora", "qlora"};
    std::vector<std::string> precisions = {"bf16"};
    if (c.fp32_tflops > 0) precisions.push_back("fp32");
    std::vector<PlanLayout> out;
    const int n = c.devices();
    for (int tp : divisors(n)) {
        // Tensor parallelism within a node unless pinned otherwise (its all-reduces are per layer).
        if (tp > c.devices_per_node && !req.pins.count("tp")) continue;
        for (int pp : divisors(n / tp)) {
            if (pp > req.model.num_layers) continue;
            const int dp = n / tp / pp;
            for (int r = 1; r <= 64; r *= 2) {
                const int64_t mb = int64_t(r) * dp;
                if (req.global_batch % mb != 0) continue;
                PlanLayout l;
                l.dp = dp, l.tp = tp, l.pp = pp, l.micro_batch = int(mb);
                l.grad_accum = int(req.global_batch / mb);
                for (const char* rc : {"none", "full"})
                    for (int z = 0; z <= (dp > 1 ? 3 : 0); ++z)
                        for (const std::string& p : precisions)
                            for (const std::string& me : methods) {
                                l.recompute = rc, l.zero_stage = z, l.precision = p, l.method = me;
                                const std::string f[] = {std::to_string(l.dp),
                                                         std::to_string(l.tp),
                                                         std::to_string(l.pp),
                                                         std::to_string(l.micro_batch),
                                                         std::to_string(l.grad_accum),
                                                         l.recompute,
                                                         std::to_string(l.zero_stage),
                                                         l.precision,
                                                         l.method};
                                bool ok = true;
                                for (size_t i = 0; i < pin_names().size(); ++i)
                                    ok = ok && pinned(pin_names()[i], f[i]);
                                if (ok) out.push_back(l);
                            }
            }
        }
    }
    return out;
}

// What decides the model a layout builds (everything else is estimated on the same build).
std::string build_key(const PlanLayout& l) {
    return fmt::format("{}/{}/{}/{}/{}", l.dp, l.tp, l.pp, l.precision, l.method);
}

}  // namespace

int64_t trainable_elements(const ModelConfig& mc, const RunConfig& cfg) {
    int64_t n = 0;
    for (const ParamSpec& p : param_specs(mc, {}, lora_spec(cfg)))
        if (p.trainable) n += shape_numel(p.shape);
    return n;
}

AxisBytes comm_bytes(const RunConfig& cfg, const ModelConfig& mc, int64_t trainable_total) {
    const int dp = cfg.parallel_dp, tp = cfg.parallel_tp, pp = cfg.parallel_pp;
    const double act = double(cfg.micro_batch) / dp * cfg.seq_len * mc.hidden_size;
    const double layers = double(mc.num_layers) / pp;
    AxisBytes b;
    b.tp = cfg.grad_accum * layers * (cfg.recompute == "full" ? 6 : 4) * 2.0 * (tp - 1) / tp * act *
           (cfg.precision == "fp32" ? 4 : 2);
    if (pp > 1) b.pp = 2.0 * cfg.grad_accum * act * 4;
    b.dp = 2.0 * (dp - 1) / dp * double(trainable_total) / (tp * pp) *
           (cfg.parallel_grad_bf16 ? 2 : 4);
    const double grad = cfg.parallel_grad_bf16 ? 2 : 4;  // bytes a gradient element travels in
    if (zero2_shards_grads(cfg, mc, dp, pp))
        b.dp = cfg.grad_accum * 2.0 * (dp - 1) / dp * double(trainable_total) / (tp * pp) * grad;
    if (zero_stage(cfg) == 3)  // per micro-batch: the gathers (twice with reshard), the reductions
        b.dp = cfg.grad_accum * (dp - 1) / dp * double(trainable_total) / (tp * pp) *
               ((cfg.parallel_zero_reshard_after_forward ? 2 : 1) * 4 + 2.0 * grad);
    return b;
}

std::map<std::string, std::string> parse_layout_pins(const std::string& text) {
    std::map<std::string, std::string> pins;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        const std::string k = item.substr(0, eq),
                          v = eq == std::string::npos ? "" : item.substr(eq + 1);
        ETE_CHECK(std::find(pin_names().begin(), pin_names().end(), k) != pin_names().end(),
                  "--layout '{}': unknown field '{}' (expected dp, tp, pp, micro_batch, "
                  "grad_accum, recompute, zero_stage, precision or method)",
                  text, k);
        bool ok = false;
        if (k == "recompute")
            ok = v == "none" || v == "full";
        else if (k == "precision")
            ok = v == "bf16" || v == "fp32";
        else if (k == "method")
            ok = v == "full" || v == "lora" || v == "qlora";
        else if (k == "zero_stage")
            ok = v == "0" || v == "1" || v == "2" || v == "3";
        else
            ok = is_count(v);
        ETE_CHECK(ok, "--layout '{}': {}={}: expected {}", text, k, v,
                  k == "recompute"    ? "none or full"
                  : k == "precision"  ? "bf16 or fp32"
                  : k == "method"     ? "full, lora or qlora"
                  : k == "zero_stage" ? "0, 1, 2 or 3"
                                      : "a positive integer");
        pins[k] = v;
    }
    return pins;
}

RunConfig layout_config(const RunConfig& base, int seq, const PlanLayout& l) {
    RunConfig c = base;
    c.seq_len = seq;
    c.parallel_dp = l.dp;
    c.parallel_tp = l.tp;
    c.parallel_pp = l.pp;
    c.micro_batch = l.micro_batch;
    c.grad_accum = l.grad_accum;
    c.recompute = l.recompute;
    c.parallel_zero_stage = l.zero_stage;
    c.parallel_zero1 = false;
    c.precision = l.precision;
    c.lora_enabled = l.method != "full";
    if (l.method == "qlora") c.lora_base_format = "nf4";
    if (l.method == "lora") c.lora_base_format = l.precision == "fp32" ? "f32" : "bf16";
    return c;
}

std::string layout_sets(const PlanLayout& l, int seq) {
    std::string s = fmt::format(
        "--set parallel.dp={} --set parallel.tp={} --set parallel.pp={} --set train.seq_len={} "
        "--set train.micro_batch={} --set train.grad_accum={} --set train.recompute={} "
        "--set parallel.zero_stage={} --set train.precision={}",
        l.dp, l.tp, l.pp, seq, l.micro_batch, l.grad_accum, l.recompute, l.zero_stage, l.precision);
    if (l.method != "full")
        s += fmt::format(" --set lora.enabled=true --set lora.base_format={}",
                         l.method == "qlora"     ? "nf4"
                         : l.precision == "fp32" ? "f32"
                                                 : "bf16");
    return s;
}

std::vector<GemmPoint> gemm_points(const PlanRequest& req, const ClusterSpec& c) {
    std::map<std::pair<std::string, int>, std::pair<int, int>> range;  // rows: least, most
    for (const PlanLayout& l : enumerate(req, c)) {
        const int rows = l.micro_batch / l.dp;
        auto [it, fresh] = range.try_emplace({l.precision, l.tp}, rows, rows);
        it->second = {std::min(it->second.first, rows), std::max(it->second.second, rows)};
    }
    std::vector<GemmPoint> out;
    for (const auto& [key, r] : range) {
        out.emplace_back(key.first, key.second, r.first);
        if (r.second != r.first) out.emplace_back(key.first, key.second, r.second);
    }
    return out;
}

namespace {

// The estimate of every layout in all[i, j) (one build: the same mesh, method and precision) on
// its largest stage: peak bytes and where, trainable elements, stage 3's whole frozen base, the
// peak stage's terms; or the error that refuses the build.
struct BuildEstimate {
    std::vector<double> peak;
    std::vector<int> stage_of;
    std::vector<int64_t> trainable;
    std::vector<double> frozen;      // stage 3: a rank's whole frozen base, bytes
    std::vector<std::string> terms;  // the peak stage's estimate, by term
    std::string error;
};

BuildEstimate estimate_build(const PlanRequest& req, const std::vector<PlanLayout>& all, size_t i,
                             size_t j) {
    const PlanLayout& first = all[i];
    const MeshShape mesh{first.dp, first.tp, first.pp};
    BuildEstimate b{std::vector<double>(j - i, 0),   std::vector<int>(j - i, 0),
                    std::vector<int64_t>(j - i, 0),  std::vector<double>(j - i, 0),
                    std::vector<std::string>(j - i), ""};
    try {
        for (int s = 0; s < mesh.pp; ++s) {
            const RunConfig bc = layout_config(req.base, req.seq, first);
            with_planned_model(req.model, bc, mesh, s, 0, [&](Transformer& model) {
                // Stage 3: the whole frozen base this stage gathers, the same for every layout
                // of this build (the unsharded estimate's term), computed once.
                double stage_frozen = -1;
                for (size_t k = i; k < j; ++k) {
                    const RunConfig lc = layout_config(req.base, req.seq, all[k]);
                    const MemoryEstimate e =
                        estimate_planned(model, lc, mesh, req.runtime_bytes, req.threads);
                    const double p = double(e.peak());
                    if (p > b.peak[k - i]) {
                        b.peak[k - i] = p, b.stage_of[k - i] = s;
                        b.terms[k - i] = e.line(all[k].method != "full");
                    }
                    b.trainable[k - i] =
                        std::max<int64_t>(b.trainable[k - i], model.params().numel());
                    if (all[k].zero_stage != 3) continue;
                    if (stage_frozen < 0) {
                        RunConfig whole = bc;
                        whole.parallel_zero_stage = 0;
                        stage_frozen =
                            double(estimate_planned(model, whole, mesh, 0, req.threads).frozen);
                    }
                    b.frozen[k - i] = std::max(b.frozen[k - i], stage_frozen);
                }
            });
        }
    } catch (const Error& e) {
        b.error = e.what();
    }
    return b;
}

// Fastest first; layouts within 0.2% of each other's time (one bucket of the fastest's) are
// ranked by what is simpler to run, lower ZeRO stage and no recompute, then by the larger
// micro-batch per replica (the cost model counts FLOPs, and small GEMMs run below the rate it
// assumes), then by less memory.
void rank_candidates(std::vector<PlanCandidate>& ranked) {
    double best = 0;
    for (const PlanCandidate& c : ranked)
        best = best == 0 ? c.cost.total() : std::min(best, c.cost.total());
    auto key = [best](const PlanCandidate& c) {
        return std::make_tuple(std::llround(c.cost.total() / (0.002 * best)), c.layout.zero_stage,
                               c.layout.recompute == "full", -c.layout.micro_batch / c.layout.dp,
                               c.peak_gib);
    };
    std::stable_sort(
        ranked.begin(), ranked.end(),
        [&](const PlanCandidate& a, const PlanCandidate& b) { return key(a) < key(b); });
}

}  // namespace

Plan make_plan(const PlanRequest& req, const ClusterSpec& c) {
    ETE_CHECK(req.seq > 0 && req.global_batch > 0,
              "plan: --seq {} and --global-batch {}: expected > 0", req.seq, req.global_batch);
    ETE_CHECK(req.goal == "pretrain" || req.goal == "finetune",
              "plan: --goal '{}': expected pretrain or finetune", req.goal);
    Plan plan;
    std::vector<PlanLayout> all = enumerate(req, c);
    std::stable_sort(all.begin(), all.end(), [](const PlanLayout& a, const PlanLayout& b) {
        return build_key(a) < build_key(b);
    });
    const double limit = c.device_memory_gib * double(1 << 30);
    Placer placer(c);
    for (size_t i = 0; i < all.size();) {
        size_t j = i;
        while (j < all.size() && build_key(all[j]) == build_key(all[i])) ++j;
        const BuildEstimate b = estimate_build(req, all, i, j);
        const int64_t total =
            trainable_elements(req.model, layout_config(req.base, req.seq, all[i]));
        const int ranks = MeshShape{all[i].dp, all[i].tp, all[i].pp}.size();
        for (size_t k = i; k < j; ++k) {
            std::string bad = b.error;
            if (bad.empty()) {
                try {  // what `ete train` checks before any rank starts (train/job_check.h)
                    check_job(layout_config(req.base, req.seq, all[k]), ranks);
                } catch (const Error& e) {
                    bad = e.what();
                }
            }
            if (!bad.empty()) {
                plan.rejected.push_back({all[k], bad});
                continue;
            }
            if (b.peak[k - i] > limit) {
                plan.rejected.push_back(
                    {all[k], fmt::format("needs {:.2f} GiB on stage {} (usable: {:.2f} GiB): {}",
                                         b.peak[k - i] / double(1 << 30), b.stage_of[k - i],
                                         c.device_memory_gib, b.terms[k - i])});
                continue;
            }
            PlanCandidate cand;
            cand.layout = all[k];
            const Placer::Placed* pl = placer.at(req, all[k], total);
            if (pl) cand.placement = pl->text;
            cand.cost = step_cost(req, c, all[k], b.trainable[k - i], b.frozen[k - i], total,
                                  pl ? &pl->placement.cost : nullptr);
            cand.peak_gib = b.peak[k - i] / double(1 << 30);
            cand.peak_stage = b.stage_of[k - i];
            cand.tokens_per_s = double(req.global_batch) * req.seq / cand.cost.total();
            plan.ranked.push_back(cand);
        }
        i = j;
    }
    rank_candidates(plan.ranked);
    return plan;
}

}  // namespace ete
