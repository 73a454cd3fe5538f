// ete/train/monitor.cpp
#include "ete/train/monitor.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ete/backend/backend.h"
#include "ete/core/device_memory.h"

namespace ete {

namespace {

// A gauge without a value (no validation split, no data parallelism, ...) has no sample.
MetricFamily gauge(const char* name, const char* help, double v) {
    MetricFamily f{name, help, "gauge", {}};
    if (!std::isnan(v)) f.samples.push_back({"", v});
    return f;
}
MetricFamily counter(const char* name, const char* help, double v) {
    return {name, help, "counter", {{"", v}}};
}
MetricFamily by_rank(const char* name, const char* help, const std::vector<double>& v) {
    MetricFamily f{name, help, "gauge", {}};
    for (size_t r = 0; r < v.size(); ++r)
        f.samples.push_back({fmt::format("rank=\"{}\"", r), v[r]});
    return f;
}

}  // namespace

std::vector<double> straggler_scores(const std::vector<double>& compute_s) {
    double fastest = 0;
    for (double c : compute_s)
        if (c > 0 && (fastest == 0 || c < fastest)) fastest = c;
    std::vector<double> out(compute_s.size(), 0.0);
    for (size_t r = 0; r < compute_s.size(); ++r)
        if (fastest > 0 && compute_s[r] > 0) out[r] = compute_s[r] / fastest;
    return out;
}

std::vector<MetricFamily> run_metric_families(const RunGauges& g) {
    const double since =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - g.last_checkpoint).count();
    std::vector<MetricFamily> f;
    f.push_back({"ete_info",
                 "the run: architecture, precision and dp x tp x pp layout",
                 "gauge",
                 {{fmt::format("arch=\"{}\",precision=\"{}\",layout=\"{}\"", label_value(g.arch),
                               label_value(g.precision), label_value(g.layout)),
                   1.0}}});
    f.push_back(gauge("ete_world_size", "ranks in the job", g.world));
    f.push_back(
        counter("ete_steps_total", "optimizer steps done, skipped ones included", double(g.steps)));
    f.push_back(gauge("ete_target_steps", "train.steps", double(g.target_steps)));
    f.push_back(counter("ete_tokens_total", "target tokens trained on", g.tokens));
    f.push_back(gauge("ete_loss", "training loss of the last step", g.loss));
    f.push_back(gauge("ete_validation_loss", "the last validation loss", g.val_loss));
    f.push_back(gauge("ete_learning_rate", "learning rate of the last step", g.lr));
    f.push_back(gauge("ete_grad_norm", "global gradient norm of the last step", g.grad_norm));
    f.push_back(
        gauge("ete_tokens_per_second", "tokens per second of the last step", g.tokens_per_s));
    f.push_back(gauge("ete_model_flops_per_second",
                      "model FLOPs per second of the last step (all ranks)", g.flops_per_s));
    f.push_back(gauge("ete_mfu_ratio", "model FLOPs utilisation: FLOP/s over the peak", g.mfu));
    f.push_back(gauge("ete_peak_flops_per_second",
                      "the peak MFU is taken against (all ranks; monitor.peak_flops or measured)",
                      g.peak_flops));
    f.push_back(gauge("ete_step_seconds", "wall time of the last step", g.step_s));
    f.push_back(gauge("ete_dp_comm_wait_seconds",
                      "time the last step waited for data-parallel gradient all-reduces",
                      g.dp_wait_s));
    f.push_back(gauge("ete_tp_comm_seconds",
                      "time the last step spent in tensor-parallel all-reduces", g.tp_comm_s));
    f.push_back(gauge("ete_pipeline_bubble_ratio",
                      "share of the last step the pipeline stages did not compute", g.pp_bubble));
    MetricFamily skipped{"ete_skipped_steps_total", "steps skipped, by cause", "counter", {}};
    for (const char* cause :
         {"nonfinite_loss", "nonfinite_grad", "nonfinite_grad_norm", "loss_spike", "overflow"}) {
        const auto it = g.skipped.find(cause);
        skipped.samples.push_back(
            {fmt::format("cause=\"{}\"", cause), double(it == g.skipped.end() ? 0 : it->second)});
    }
    f.push_back(std::move(skipped));
    f.push_back(gauge("ete_loss_scale", "fp16 dynamic loss scale", g.loss_scale));
    f.push_back(
        gauge("ete_peak_rss_bytes", "peak resident memory of the largest rank", g.peak_rss_bytes));
    f.push_back(gauge("ete_seconds_since_last_checkpoint",
                      "seconds since the last committed checkpoint (or the run's start)", since));
    f.push_back(counter("ete_checkpoints_total", "checkpoints committed", double(g.checkpoints)));
    f.push_back(counter("ete_checkpoint_failures_total", "checkpoint saves that failed",
                        double(g.checkpoint_failures)));
    f.push_back(counter("ete_rollbacks_total", "anomaly rollbacks", double(g.rollbacks)));
    f.push_back(counter("ete_metrics_lines_lost_total",
                        "metrics.jsonl lines that could not be written",
                        double(g.metrics_lines_lost)));
    f.push_back(by_rank("ete_rank_step_seconds", "each rank's step time (straggler interval)",
                        g.rank_step_s));
    f.push_back(by_rank("ete_rank_compute_seconds",
                        "each rank's step time less its communication waits", g.rank_compute_s));
    f.push_back(by_rank("ete_rank_straggler_score",
                        "each rank's compute time over the fastest rank's (1 = fastest)",
                        straggler_scores(g.rank_compute_s)));
    return f;
}

double model_flops_per_token(const ModelConfig& mc, int seq_len, int64_t trainable,
                             bool frozen_base) {
    const double C = mc.hidden_size, F = mc.intermediate_size, V = mc.vocab_size;
    const double D = mc.head_dim > 0 ? mc.head_dim : C / mc.num_heads;
    const double q = C * mc.num_heads * D, kv = 2 * C * mc.num_kv_heads * D;
    const double mlp = (mc.family().gated_mlp() ? 3 : 2) * C * F;
    const double matmul = mc.num_layers * (q + kv + q + mlp) + V * C;  // + the LM head
    const double attention = attention_flops_per_token(mc, seq_len);
    if (!frozen_base) return 6 * matmul + attention;
    return 4 * matmul + 6 * double(trainable) + attention;
}

namespace {

// The best time of f over at least `reps` runs after a warm-up one, and over at least `min_s` of
// running: a virtual machine's cores come up to speed over a fraction of a second of load, and a
// first burst measured cold read 30-60% slow on the 2-core VMs of docs/planner.md.
template <class F>
double best_time(Backend& backend, int reps, double min_s, F&& f) {
    using Clock = std::chrono::steady_clock;
    double best = 1e30;
    const auto start = Clock::now();
    for (int i = 0;
         i <= reps || std::chrono::duration<double>(Clock::now() - start).count() < min_s; ++i) {
        const auto t0 = Clock::now();
        f();
        backend.synchronize();
        const double t = std::chrono::duration<double>(Clock::now() - t0).count();
        if (i > 0) best = std::min(best, t);
    }
    return best;
}

// One linear's forward, input gradient and weight gradient over m rows of (n, k) weights, on
// buffers of its own.
struct LinearPass {
    DeviceBuffer x, w, y, dx, dw;
    Mat mx, mw, my, mdx, mdw;
    LinearPass(Backend& be, DType dt, int64_t m, int64_t n, int64_t k) {
        const size_t e = dtype_size(dt);
        x = DeviceBuffer(be, size_t(m * k) * e), w = DeviceBuffer(be, size_t(n * k) * e);
        y = DeviceBuffer(be, size_t(m * n) * e), dx = DeviceBuffer(be, size_t(m * k) * e);
        dw = DeviceBuffer(be, size_t(n * k) * 4);
        mx = {x.data(), dt, m, k, k}, mw = {w.data(), dt, n, k, k}, my = {y.data(), dt, m, n, n};
        mdx = {dx.data(), dt, m, k, k}, mdw = {dw.data(), DType::F32, n, k, k};
        be.fill(mx, 0.01f);
        be.fill(mw, 0.01f);
        be.fill(mdw, 0.0f);
    }
    void run(Backend& be) const {
        be.gemm(mx, false, mw, true, my);  // y = x · wᵀ; y then stands for dy
        be.gemm(my, false, mw, false, mdx);
        be.gemm(my, true, mx, false, mdw, 1.0f, 1.0f);
    }
};

// Seconds of f: the median of 5 samples after a warm-up, each sample running f as many times as
// fill ~30 ms, so that ranks sharing cores see their sharing in every sample (a small model's
// pass takes microseconds: a sample of one would fit between two of the scheduler's switches).
template <class F>
double median_time(Backend& backend, F&& f) {
    using Clock = std::chrono::steady_clock;
    auto timed = [&](int n) {
        const auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) f();
        backend.synchronize();
        return std::chrono::duration<double>(Clock::now() - t0).count() / n;
    };
    const double once = timed(1);
    const int n = std::clamp(int(std::ceil(0.03 / std::max(once, 1e-9))), 1, 100000);
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) t.push_back(timed(n));
    std::sort(t.begin(), t.end());
    return t[2];
}

}  // namespace

double measure_peak_flops(Backend& backend, DType dtype) {
    constexpr int64_t n = 1024;
    const size_t bytes = size_t(n * n) * dtype_size(dtype);
    DeviceBuffer a(backend, bytes), b(backend, bytes), c(backend, size_t(n * n) * sizeof(float));
    const Mat ma{a.data(), dtype, n, n, n}, mb{b.data(), dtype, n, n, n};
    const Mat mc{c.data(), DType::F32, n, n, n};
    backend.fill(ma, 0.5f);
    backend.fill(mb, 0.25f);
    const double best = best_time(backend, 3, 0.25, [&] { backend.gemm(ma, false, mb, true, mc); });
    return 2.0 * double(n) * double(n) * double(n) / best;
}

ModelGemmShapes model_gemm_shapes(const ModelConfig& mc, int tp) {
    // (At least one head and one MLP column a rank: a tp the job check will refuse still gets a
    // measurable shape.)
    const int64_t C = mc.hidden_size, D = mc.D(), H = std::max(mc.num_heads / tp, 1);
    const int64_t KV = std::max(mc.num_kv_heads / tp, 1);
    const int64_t F = std::max(mc.intermediate_size / tp, 1);
    ModelGemmShapes g;
    g.layer = {
        {(H + 2 * KV) * D, C}, {C, H * D}, {(mc.family().gated_mlp() ? 2 : 1) * F, C}, {C, F}};
    g.head = {(int64_t(mc.vocab_size) + tp - 1) / tp, C};
    return g;
}

double measure_model_gemm_flops(Backend& backend, DType dtype, const ModelConfig& mc, int seq,
                                int rows, int tp) {
    const ModelGemmShapes g = model_gemm_shapes(mc, tp);
    const auto& shapes = g.layer;
    const int64_t V = g.head.first, C = g.head.second;
    double nk = 0;
    for (const auto& [n, k] : shapes) nk += double(n) * double(k);
    const int64_t tokens = int64_t(rows) * seq;
    const int64_t m = std::min<int64_t>(tokens, std::max<int64_t>(256, int64_t(4e10 / (6 * nk))));
    std::vector<LinearPass> layer;
    for (const auto& [n, k] : shapes) layer.emplace_back(backend, dtype, m, n, k);
    const double layer_s = median_time(backend, [&] {
        for (const LinearPass& p : layer) p.run(backend);
    });
    layer.clear();
    // The head runs in row chunks of ~16M logits (Transformer::plan_activation_bytes)
    // (at most 4e10 FLOPs of it measured, as for a layer).
    const int64_t chunk =
        std::clamp<int64_t>(std::min<int64_t>((int64_t(16) << 20) / V,
                                              std::max<int64_t>(64, int64_t(4e10 / (6.0 * V * C)))),
                            1, m);
    const LinearPass head(backend, dtype, chunk, V, C);
    const double head_s =
        median_time(backend, [&] { head.run(backend); }) * double(m) / double(chunk);
    const double flops = 6.0 * double(m) * (mc.num_layers * nk + double(V) * double(C));
    return flops / (mc.num_layers * layer_s + head_s);
}

double attention_flops_per_token(const ModelConfig& mc, int seq_len) {
    const double D = mc.head_dim > 0 ? mc.head_dim : double(mc.hidden_size) / mc.num_heads;
    return 12.0 * mc.num_layers * mc.num_heads * D * seq_len;
}

double measure_memory_gbps(Backend& backend) {
    constexpr int64_t n = int64_t(16) << 20;  // 64 MiB of fp32
    DeviceBuffer x(backend, size_t(n) * 4), y(backend, size_t(n) * 4);
    const Mat mx{x.data(), DType::F32, 1, n, n}, my{y.data(), DType::F32, 1, n, n};
    backend.fill(mx, 0.5f);
    backend.fill(my, 0.25f);
    const double t = best_time(backend, 3, 0.1, [&] { backend.add(mx, my); });
    return 3.0 * double(n) * 4 / t / 1e9;
}

double measure_attention_s(Backend& backend) {
    const AttnDims d{2, 256, 8, 4, 64};
    const int64_t rows = int64_t(d.B) * d.T, width = d.qkv_stride(), out_w = int64_t(d.H) * d.D;
    DeviceBuffer qkv(backend, size_t(rows * width) * 4), dqkv(backend, size_t(rows * width) * 4),
        out(backend, size_t(rows * out_w) * 4), dout(backend, size_t(rows * out_w) * 4),
        lse(backend, size_t(d.B) * d.H * d.T * 4);
    const Mat mq{qkv.data(), DType::F32, rows, width, width},
        mdq{dqkv.data(), DType::F32, rows, width, width},
        mo{out.data(), DType::F32, rows, out_w, out_w},
        mdo{dout.data(), DType::F32, rows, out_w, out_w};
    const Vec vl{lse.data(), DType::F32, int64_t(d.B) * d.H * d.T};
    backend.fill(mq, 0.01f);
    backend.fill(mdo, 0.01f);
    const float scale = 0.125f;
    const double t = best_time(backend, 3, 0.1, [&] {
        backend.attention_forward(mo, vl, mq, d, scale);
        backend.attention_backward(mdq, mdo, mo, vl, mq, d, scale);
    });
    return t / (double(d.B) * d.H * d.T * (d.T + 1) / 2 * d.D);
}

}  // namespace ete
