// bench/train_throughput.cpp — ete_bench_train: optimizer steps per second of a bench model.
//
// --model llama-bench (default): a ~32M-parameter Llama (V 8192, C 512, L 8, H 8, KV 4, F 1408,
// untied head) at micro-batch (B, T) = (8, 256); --model gemma-bench: Gemma 2 on those shapes
// (tied head, (1 + w) sandwich norms, GeGLU, soft-caps 50/30, a window of 128 on alternate
// layers; its model FLOP/s count full causal attention); --model phi3-bench: Phi-3 on those
// shapes (fused qkv_proj and gate_up_proj, RoPE on 3/4 of each head); qwen2-bench (q/k/v biases,
// tied), qwen3-bench (per-head q/k norms), mistral-bench (a window of 128 on every layer) likewise.
// --model gpt2-124m: GPT-2 small as HF
// builds it (V 50257, C 768, L 12, H 12, F 3072, tied head) at (4, 64), llm.c's CPU setting. Random
// token ids with a fixed seed, AdamW and global-norm clipping at 1.0, in --precision fp32, bf16 or
// fp16 (fp32 masters, gradients and optimizer; 16-bit GEMM operands). A step is exactly what the
// trainer does: zero grads, forward_backward with d_scale = 1/(B·T), the gradient norm, AdamW
// (with the clip coefficient applied as it reads the gradients; --optimizer adamw8bit: 8-bit
// AdamW, whose measured state bytes per parameter the report shows). After --warmup
// steps, --steps measured steps give the per-step times; tokens/s and model FLOP/s use their
// median. The report ends with the process's peak RSS. --qat POINTS trains with quantization-aware
// training at those points (the [qat] defaults otherwise), stepping the QAT runtime as the trainer
// does (fq(W) rewritten after AdamW, the gradient mask and the observers' fold after the backward).
//
// Model FLOPs per step = 6·P_mm·N + 6·L·B·H·D·T·(T+1), where P_mm counts the parameters of every
// matmul (q|k|v, o, gate|up, down per layer, and the LM head; not the embedding lookup or norms)
// and N = B·T tokens. The second term is causal attention: QKᵀ and P·V each cost 2·D·(t+1) flops
// for query t in the forward, and the backward costs twice the forward. Recomputation is not
// counted (model FLOPs, not hardware FLOPs).
#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include <sys/resource.h>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/mem_stats.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "ete/optim/optimizer.h"
#include "op_profile.h"

namespace ete::bench {
namespace {

struct Options {
    int steps = 8;
    int warmup = 3;
    int threads = 0;  // 0 = leave OpenMP / OpenBLAS defaults
    int batch = 0;    // 0 = the model's default
    int seq = 0;
    std::string model = "llama-bench";
    std::string precision = "fp32";
    bool recompute = false;
    bool json = false;
    bool ops = false;                 // also print time per op name
    std::string qat;                  // QAT points (model/qat_spec.h), or empty: plain training
    std::string optimizer = "adamw";  // train.optimizer: adamw or adamw8bit
    uint64_t seed = 1234;
};

ModelConfig bench_model_config(const std::string& name) {
    ModelConfig c;
    if (name == "gpt2-124m") {
        c.arch = Arch::GPT2;
        c.vocab_size = 50257;
        c.hidden_size = 768;
        c.intermediate_size = 3072;
        c.num_layers = 12;
        c.num_heads = 12;
        c.num_kv_heads = 12;
        c.max_position_embeddings = 1024;
        c.norm_eps = 1e-5;
        c.tie_word_embeddings = true;
        return c;
    }
    const std::string family = name.substr(0, name.find('-'));
    ETE_CHECK(name == family + "-bench" &&
                  (family == "gemma" || family == "llama" || family == "phi3" ||
                   family == "qwen2" || family == "qwen3" || family == "mistral"),
              "--model '{}': expected llama-bench, gemma-bench, phi3-bench, qwen2-bench, "
              "qwen3-bench, mistral-bench or gpt2-124m",
              name);
    c.arch = Arch::Llama;
    c.vocab_size = 8192;
    c.hidden_size = 512;
    c.intermediate_size = 1408;
    c.num_layers = 8;
    c.num_heads = 8;
    c.num_kv_heads = 4;
    c.max_position_embeddings = 256;
    c.tie_word_embeddings = false;
    if (name == "gemma-bench") {  // Gemma 2 on the same shapes: tied, a window of 128 on the
        c.arch = Arch::Gemma2;    // local (even) layers, soft-caps 50 and 30
        c.use_family_defaults();
        c.tie_word_embeddings = true;
        c.sliding_window = 128;
    }
    if (name == "phi3-bench") {  // Phi-3 on the same shapes: fused qkv_proj and gate_up_proj,
        c.arch = Arch::Phi3;     // RoPE on 48 of each head's 64 dims (Phi-4-mini's 0.75)
        c.use_family_defaults();
        c.partial_rotary_factor = 0.75;
    }
    if (family == "qwen2" || family == "qwen3" || family == "mistral") {
        c.arch = family_named(family)->arch;  // Qwen2: q/k/v biases, tied as its small models;
        c.use_family_defaults();              // Qwen3: per-head q/k norms; Mistral: a window
        c.tie_word_embeddings = family == "qwen2";
        c.sliding_window = family == "mistral" ? 128 : 0;
    }
    return c;
}

DType precision_dtype(const std::string& p) {
    if (p == "bf16") return DType::BF16;
    if (p == "fp16") return DType::F16;
    ETE_CHECK(p == "fp32", "--precision '{}': expected fp32, bf16 or fp16", p);
    return DType::F32;
}

// Parameters that take part in a matmul: per layer q|k|v (S, C), o (C, H·D), the MLP's up
// (gate|up (2F, C) for Llama, (F, C) for GPT-2) and down (C, F); plus the LM head (V, C).
double matmul_params(const ModelConfig& c) {
    double C = c.hidden_size, F = c.intermediate_size, HD = double(c.num_heads) * c.D();
    double S = double(c.num_heads + 2 * c.num_kv_heads) * c.D();
    double up = c.family().gated_mlp() ? 2 * F * C : F * C;
    return c.num_layers * (S * C + HD * C + up + C * F) + double(c.vocab_size) * C;
}

// Peak resident set size of this process so far, in MiB.
double peak_rss_mib() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_maxrss) / 1024.0;
}

double attention_flops(const ModelConfig& c, int B, int T) {
    return 6.0 * c.num_layers * B * c.num_heads * c.D() * double(T) * (T + 1);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct StepParts {
    double total = 0, zero = 0, fwd_bwd = 0, clip = 0, adamw = 0;
    double loss_per_token = 0;
};

// The training step of the trainer, with each part timed.
StepParts train_step(Transformer& model, Optimizer& opt, const std::vector<int32_t>& ids, int B,
                     int T, int64_t step) {
    // ids is (B, T+1): inputs are columns [0, T), targets the same rows shifted by one.
    std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
    for (int b = 0; b < B; ++b) {
        const int32_t* row = &ids[size_t(b) * (T + 1)];
        std::copy(row, row + T, &in[size_t(b) * T]);
        std::copy(row + 1, row + T + 1, &tgt[size_t(b) * T]);
    }
    StepParts p;
    auto t0 = std::chrono::steady_clock::now();
    model.params().zero_grads();
    QatRuntime* q = model.qat();
    p.zero = seconds_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    double loss = model.forward_backward(in.data(), tgt.data(), B, T, 1.0f / float(B * T));
    if (q) {  // as the trainer: mask the weights' gradients, fold the step's ranges
        q->finish_grads();
        q->end_step(q->step_ranges());
    }
    p.fwd_bwd = seconds_since(t1);
    // As the trainer: the norm, then the clip coefficient applied inside AdamW.
    auto t2 = std::chrono::steady_clock::now();
    const float coef = clip_coefficient(grad_norm(model.params(), model.backend(), nullptr), 1.0);
    p.clip = seconds_since(t2);
    auto t3 = std::chrono::steady_clock::now();
    opt.step(3e-4, coef);
    if (q) q->begin_step(step + 1);  // the next step's fq(W)
    p.adamw = seconds_since(t3);
    p.total = seconds_since(t0);
    p.loss_per_token = loss / (double(B) * T);
    return p;
}

struct PhaseRow {
    std::string name;
    double ms = 0;      // per step
    double gflops = 0;  // GEMM rows only
};

// Per-step time by phase over `steps` measured steps; "other" is forward_backward time spent
// outside kernels (memcpy of residuals, loss sum, id checks) plus zero_grads.
std::vector<PhaseRow> phase_rows(const PhaseProfiler& tb, double fwd_bwd_s, double zero_s,
                                 int steps) {
    std::vector<PhaseRow> rows;
    double in_kernels = 0;
    for (int i = 0; i < kPhaseCount; ++i) {
        const PhaseStats& s = tb.stats(Phase(i));
        Phase p = Phase(i);
        if (p != Phase::Clip && p != Phase::Optimizer) in_kernels += s.seconds;
        if (s.calls == 0) continue;
        double gf = s.flops > 0 ? s.flops / s.seconds * 1e-9 : 0;
        rows.push_back({phase_name(p), s.seconds / steps * 1e3, gf});
    }
    rows.push_back({"other (uploads, zero_grads, loss sum)",
                    (fwd_bwd_s - in_kernels + zero_s) / steps * 1e3, 0});
    return rows;
}

struct Result {
    std::vector<StepParts> steps;
    std::vector<PhaseRow> phases;
    double first_loss = 0;
    int64_t numel = 0;
    double init_s = 0;        // parameter init
    double peak_rss_mib = 0;  // at the end
    size_t activation_bytes = 0;
    size_t optimizer_bytes = 0;  // the optimizer's state as allocated
};

// Correctness before speed: at init (std 0.02) the logits are near zero, so the first loss per
// token must be close to ln V; anything else means the step computes garbage.
void check_first_loss(double loss, int vocab) {
    double ln_v = std::log(double(vocab));
    ETE_CHECK(std::isfinite(loss) && std::fabs(loss - ln_v) < 0.5,
              "bench model: first loss per token {} is not near ln(V) = {}", loss, ln_v);
}

Result run(const Options& o, const ModelConfig& cfg) {
    std::unique_ptr<Backend> cpu = make_cpu_backend();
    PhaseProfiler tb;
    QatSpec qat;
    if (!o.qat.empty()) {
        qat.enabled = true;
        qat.points = qat_points_from_string(o.qat);
        check_qat_spec(qat, cfg);
    }
    Transformer model(cfg, *cpu, {}, precision_dtype(o.precision), {}, qat);
    if (qat.enabled) model.enable_qat(qat);
    Result r;
    auto t_init = std::chrono::steady_clock::now();
    model.params().init(o.seed);
    r.init_s = seconds_since(t_init);
    model.setup(o.batch, o.seq, o.recompute ? Recompute::Full : Recompute::None);
    r.activation_bytes = model.activation_bytes();
    std::unique_ptr<Optimizer> opt =
        make_optimizer({optimizer_kind_from_name(o.optimizer), {3e-4, 0.9, 0.95, 1e-8, 0.1}},
                       model.params(), *cpu, 0, model.params().numel());
    r.optimizer_bytes = opt->state_bytes();
    cpu->set_profiler(&tb);

    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
    std::vector<int32_t> ids(size_t(o.batch) * (o.seq + 1));
    r.numel = model.params().numel();
    if (QatRuntime* q = model.qat()) q->begin_step(0);
    double fwd_bwd = 0, zero = 0;
    for (int s = 0; s < o.warmup + o.steps; ++s) {
        for (int32_t& id : ids) id = tok(rng);
        if (s == o.warmup) tb.reset();
        StepParts p = train_step(model, *opt, ids, o.batch, o.seq, s);
        if (s == 0) check_first_loss(p.loss_per_token, cfg.vocab_size);
        if (s == 0) r.first_loss = p.loss_per_token;
        std::fprintf(stderr, "%s step %2d: %8.1f ms  loss %.4f\n",
                     s < o.warmup ? "warmup" : "      ", s, p.total * 1e3, p.loss_per_token);
        if (s < o.warmup) continue;
        r.steps.push_back(p);
        fwd_bwd += p.fwd_bwd;
        zero += p.zero;
    }
    r.phases = phase_rows(tb, fwd_bwd, zero, o.steps);
    if (o.ops) {
        std::fprintf(stderr, "per op (ms per step, calls per step):\n");
        for (const auto& [name, st] : tb.by_op())
            std::fprintf(stderr, "  %-28s %8.2f ms %6ld\n", name.c_str(),
                         st.seconds / o.steps * 1e3, st.calls / o.steps);
    }
    r.peak_rss_mib = peak_rss_mib();
    return r;
}

std::vector<double> column(const std::vector<StepParts>& v, double StepParts::*m) {
    std::vector<double> out;
    for (const StepParts& p : v) out.push_back(p.*m);
    return out;
}

// The figures every report shows, from the measured steps.
struct Summary {
    double tokens = 0;    // per step
    double flops = 0;     // model FLOPs per step
    double median_s = 0;  // median step time
    double mean_s = 0;    // mean step time (the phase table's denominator)
};

Summary summarize(const Options& o, const ModelConfig& cfg, const Result& r) {
    Summary s;
    s.tokens = double(o.batch) * o.seq;
    s.flops = 6.0 * matmul_params(cfg) * s.tokens + attention_flops(cfg, o.batch, o.seq);
    std::vector<double> total = column(r.steps, &StepParts::total);
    s.median_s = median(total);
    for (double t : total) s.mean_s += t / double(total.size());
    return s;
}

void print_json(const Options& o, const ModelConfig& cfg, const Result& r, int threads) {
    Summary s = summarize(o, cfg, r);
    nlohmann::json j;
    j["bench"] = "ete_train";
    j["model"] = {{"name", o.model},
                  {"precision", o.precision},
                  {"vocab", cfg.vocab_size},
                  {"hidden", cfg.hidden_size},
                  {"layers", cfg.num_layers},
                  {"heads", cfg.num_heads},
                  {"kv_heads", cfg.num_kv_heads},
                  {"intermediate", cfg.intermediate_size},
                  {"batch", o.batch},
                  {"seq", o.seq},
                  {"recompute", o.recompute}};
    j["threads"] = threads;
    j["openblas_core"] = cpu::openblas_core_name();
    j["dnnl"] = cpu::dnnl_info();
    j["params"] = r.numel;
    j["init_s"] = r.init_s;
    j["peak_rss_mib"] = r.peak_rss_mib;
    j["optimizer"] = o.optimizer;
    j["optimizer_state_bytes"] = r.optimizer_bytes;
    j["optimizer_bytes_per_param"] = double(r.optimizer_bytes) / double(r.numel);
    j["activation_mib"] = double(r.activation_bytes) / (1 << 20);
    j["first_loss"] = r.first_loss;
    std::vector<double> ms;
    for (double t : column(r.steps, &StepParts::total)) ms.push_back(t * 1e3);
    j["step_ms"] = ms;
    j["median_step_ms"] = s.median_s * 1e3;
    j["tokens_per_s"] = s.tokens / s.median_s;
    j["model_flops_per_step"] = s.flops;
    j["model_flop_per_s"] = s.flops / s.median_s;
    for (const auto& [name, m] : {std::pair{"zero_grads", &StepParts::zero},
                                  {"forward_backward", &StepParts::fwd_bwd},
                                  {"clip", &StepParts::clip},
                                  {"adamw", &StepParts::adamw}}) {
        j["parts_median_ms"][name] = median(column(r.steps, m)) * 1e3;
    }
    for (const PhaseRow& p : r.phases) {
        j["phases_ms"][p.name] = p.ms;
        if (p.gflops > 0) j["phases_gflops"][p.name] = p.gflops;
    }
    std::printf("%s\n", j.dump().c_str());
}

void print_text(const Options& o, const ModelConfig& cfg, const Result& r, int threads) {
    Summary s = summarize(o, cfg, r);
    std::printf("%s: %s V=%d C=%d L=%d H=%d KV=%d F=%d, B=%d T=%d, %.1fM params, %s%s\n",
                o.model.c_str(), arch_name(cfg.arch).c_str(), cfg.vocab_size, cfg.hidden_size,
                cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, o.batch,
                o.seq, double(r.numel) * 1e-6, o.precision.c_str(),
                o.recompute ? ", recompute full" : "");
    std::printf("threads %d, OpenBLAS core %s, %s\n", threads, cpu::openblas_core_name(),
                cpu::dnnl_info().c_str());
    std::printf("init %.2f s | activations %.0f MiB | peak RSS %.0f MiB\n", r.init_s,
                double(r.activation_bytes) / (1 << 20), r.peak_rss_mib);
    std::printf("optimizer %s: state %.1f MiB, %.3f bytes per parameter\n", o.optimizer.c_str(),
                double(r.optimizer_bytes) / (1 << 20), double(r.optimizer_bytes) / double(r.numel));
    std::printf(
        "median step %.1f ms  |  %.0f tokens/s  |  %.1f GFLOP/s model "
        "(6*P_mm*tokens + 6*L*B*H*D*T*(T+1) = %.1f GFLOP/step)\n",
        s.median_s * 1e3, s.tokens / s.median_s, s.flops / s.median_s * 1e-9, s.flops * 1e-9);
    std::printf("\nper-step breakdown (mean of %d measured steps):\n", o.steps);
    for (const PhaseRow& p : r.phases) {
        std::printf("  %-38s %8.1f ms  %5.1f%%", p.name.c_str(), p.ms,
                    100.0 * p.ms / (s.mean_s * 1e3));
        if (p.gflops > 0) std::printf("  %6.1f GFLOP/s", p.gflops);
        std::printf("\n");
    }
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    ete::keep_freed_memory();  // as ete itself does (core/mem_stats.h)
    ete::cpu::openblas_fix_coretype(argv);
    ete::bench::Options o;
    CLI::App app{"ete_bench_train — training throughput of a bench model (Llama or GPT-2 124M)"};
    app.add_option("--steps", o.steps, "measured optimizer steps")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--warmup", o.warmup, "warm-up steps (not measured)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--threads", o.threads, "OpenMP and OpenBLAS threads (0 = library default)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--model", o.model,
                   "llama-bench, gemma-bench, phi3-bench, qwen2-bench, qwen3-bench, mistral-bench "
                   "or gpt2-124m")
        ->capture_default_str();
    app.add_option("--precision", o.precision, "fp32, bf16 or fp16")->capture_default_str();
    app.add_option("--batch", o.batch, "micro-batch rows B (0 = the model's: 8, gpt2 4)")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    app.add_option("--seq", o.seq, "sequence length T (0 = the model's: 256, gpt2 64)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    app.add_option("--seed", o.seed, "init and token seed")->capture_default_str();
    app.add_flag("--recompute", o.recompute, "full activation recomputation");
    app.add_option("--optimizer", o.optimizer, "adamw or adamw8bit (train.optimizer)")
        ->capture_default_str();
    app.add_flag("--json", o.json, "print one JSON object instead of the text report");
    app.add_flag("--ops", o.ops, "also print the time of each backend op (stderr)");
    app.add_option("--qat", o.qat,
                   "quantization-aware training at these points (qat.points, e.g. "
                   "weight,linear_in,post_norm; W8A8, weights per channel)");
    CLI11_PARSE(app, argc, argv);
    try {
        if (o.threads > 0) {
            omp_set_num_threads(o.threads);
            openblas_set_num_threads(o.threads);
        }
        int threads = omp_get_max_threads();
        ete::ModelConfig cfg = ete::bench::bench_model_config(o.model);
        const bool gpt2 = cfg.arch == ete::Arch::GPT2;
        if (o.batch == 0) o.batch = gpt2 ? 4 : 8;
        if (o.seq == 0) o.seq = gpt2 ? 64 : 256;
        ETE_CHECK(o.seq <= cfg.max_position_embeddings, "--seq {}: the model holds {} positions",
                  o.seq, cfg.max_position_embeddings);
        ete::bench::Result r = ete::bench::run(o, cfg);
        if (o.json) {
            ete::bench::print_json(o, cfg, r, threads);
        } else {
            ete::bench::print_text(o, cfg, r, threads);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete_bench_train: %s\n", e.what());
        return 1;
    }
    return 0;
}
