// bench/gemm_bench.cpp — ete_bench_gemm: the GEMMs of one bench-model step, ETE vs best sgemm.
//
// Every matmul of the bench model (N = B·T = 2048 rows) in the three roles the model runs it:
//   forward  y(N, out)   = x(N, in)·W(out, in)ᵀ       Backend::gemm(x, false, W, true, y)
//   d_x      d_x(N, in)  = d_y(N, out)·W(out, in)     Backend::gemm(d_y, false, W, false, d_x)
//   d_W      d_W(out,in) += d_y(N, out)ᵀ·x(N, in)     Backend::gemm(d_y, true, x, false, d_W, 1, 1)
// Each product is timed through the CPU backend's gemm with the model's operand layout, and through
// cblas_sgemm with each of the four (transA, transB) layouts on pre-transposed copies of the
// operands; "best" is the fastest of those four, so ratio = ETE / best says whether the model's
// layout costs anything. The output stays row-major (M, N) in all of them (the model's consumers
// need it). Calls are interleaved round-robin so load changes hit every variant alike; each
// figure is the median of --reps calls. Also measured: the machine's sgemm peak (2048³, NN) at
// 1 and 2 threads. Before anything is timed, ETE's result is checked against an fp64 reference at
// sampled entries and every cblas layout against ETE's.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/error.h"

namespace ete::bench {
namespace {

struct GemmCase {
    std::string name;  // e.g. "qkv forward"
    bool ta, tb;       // the model's transposes
    int M, N, K;
    float beta;
    int per_step;  // calls per optimizer step of the bench model
};

// The bench model: C 512, S = (8 + 2·4)·64 = 1024, 2F = 2816, F = 1408, V 8192, L 8, N 2048.
std::vector<GemmCase> bench_cases() {
    struct Linear {
        const char* name;
        int in, out;
        float fwd_beta;  // o_proj and down_proj add into the residual stream
        int per_step;
    };
    const int N = 2048;
    std::vector<Linear> linears = {{"qkv", 512, 1024, 0, 8},
                                   {"o_proj", 512, 512, 1, 8},
                                   {"gate|up", 512, 2816, 0, 8},
                                   {"down", 1408, 512, 1, 8},
                                   {"lm_head", 512, 8192, 0, 1}};
    std::vector<GemmCase> cases;
    for (const Linear& l : linears) {
        std::string n = l.name;
        cases.push_back({n + " forward", false, true, N, l.out, l.in, l.fwd_beta, l.per_step});
        cases.push_back({n + " d_x", false, false, N, l.in, l.out, 0.0f, l.per_step});
        cases.push_back({n + " d_W", true, false, l.out, l.in, N, 1.0f, l.per_step});
    }
    return cases;
}

struct Buffer {
    std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
    size_t n = 0;
    float* data() const { return p.get(); }
};

Buffer make_buffer(size_t n, std::mt19937& rng) {
    Buffer b;
    b.n = n;
    b.p.reset(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64)));
    ETE_ASSERT(b.p);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) b.data()[i] = u(rng);
    return b;
}

// dst (cols, rows) = src (rows, cols)ᵀ, both row-major.
Buffer transposed(const Buffer& src, int rows, int cols) {
    Buffer b;
    b.n = src.n;
    b.p.reset(static_cast<float*>(std::aligned_alloc(64, (b.n * sizeof(float) + 63) / 64 * 64)));
    ETE_ASSERT(b.p);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            b.data()[size_t(c) * rows + r] = src.data()[size_t(r) * cols + c];
    return b;
}

// One way to compute the product: its operands stored for (ta, tb).
struct Variant {
    std::string label;  // "ete NT" or "cblas TN", ...
    bool ete = false;
    bool ta = false, tb = false;
    const Buffer* A = nullptr;
    const Buffer* B = nullptr;
    std::vector<double> seconds;
};

const char* layout(bool ta, bool tb) {
    return ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN");
}

Backend& cpu_backend() {
    static std::unique_ptr<Backend> be = make_cpu_backend();
    return *be;
}

void call(const GemmCase& g, const Variant& v, float* C) {
    int lda = v.ta ? g.M : g.K, ldb = v.tb ? g.K : g.N;
    if (v.ete) {
        // The CPU backend's gemm on views of the same host buffers (its memory is host memory).
        CMat a(v.A->data(), DType::F32, v.ta ? g.K : g.M, lda);
        CMat b(v.B->data(), DType::F32, v.tb ? g.N : g.K, ldb);
        cpu_backend().gemm(a, v.ta, b, v.tb, Mat(C, DType::F32, g.M, g.N), 1.0f, g.beta);
    } else {
        cblas_sgemm(CblasRowMajor, v.ta ? CblasTrans : CblasNoTrans,
                    v.tb ? CblasTrans : CblasNoTrans, g.M, g.N, g.K, 1.0f, v.A->data(), lda,
                    v.B->data(), ldb, g.beta, C, g.N);
    }
}

double time_call(const GemmCase& g, const Variant& v, float* C) {
    auto t0 = std::chrono::steady_clock::now();
    call(g, v, C);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct CaseResult {
    GemmCase g;
    double ete_s = 0, best_s = 0;
    std::string best_layout;
    double ref_err = 0;      // ETE vs the fp64 reference (sampled)
    double max_rel_err = 0;  // cblas layouts vs ETE
};

// Max error of ETE's C against a double-precision dot product at 256 sampled entries, relative
// to sum_k |a·b| + |beta·C0| (the size of what was summed). fp32 sums of up to K = 8192 products:
// the worst-case bound is K·eps ≈ 1e-3, blocked sums land near 1e-7; 1e-4 flags a wrong result.
double check_reference(const GemmCase& g, const float* C, const Buffer& A_n, const Buffer& B_n,
                       const Buffer& C0, std::mt19937& rng) {
    std::uniform_int_distribution<int> row(0, g.M - 1), col(0, g.N - 1);
    double err = 0;
    for (int s = 0; s < 256; ++s) {
        int i = row(rng), j = col(rng);
        double c0 = double(g.beta) * C0.data()[size_t(i) * g.N + j], sum = c0, mag = std::fabs(c0);
        for (int k = 0; k < g.K; ++k) {
            double p = double(A_n.data()[size_t(i) * g.K + k]) * B_n.data()[size_t(k) * g.N + j];
            sum += p;
            mag += std::fabs(p);
        }
        err = std::max(err, std::fabs(C[size_t(i) * g.N + j] - sum) / mag);
    }
    ETE_CHECK(err < 1e-4, "gemm '{}': result differs from the fp64 reference by {}", g.name, err);
    return err;
}

// Every cblas layout must give ETE's C (from the same C0) before any is timed; same tolerance.
double check_variants(const GemmCase& g, const std::vector<Variant>& vs, const Buffer& C0,
                      const std::vector<float>& ref) {
    double scale = 0, err = 0;
    for (float x : ref) scale = std::max(scale, double(std::fabs(x)));
    std::vector<float> out(C0.n);
    for (size_t i = 1; i < vs.size(); ++i) {
        std::copy(C0.data(), C0.data() + C0.n, out.begin());
        call(g, vs[i], out.data());
        for (size_t k = 0; k < out.size(); ++k)
            err = std::max(err, std::fabs(double(out[k]) - ref[k]) / scale);
    }
    ETE_CHECK(err < 1e-4, "gemm '{}': layouts disagree (max relative error {})", g.name, err);
    return err;
}

CaseResult run_case(const GemmCase& g, int reps, std::mt19937& rng) {
    // op(A) is (M, K), op(B) is (K, N); "A_n" stores op(A) as is, "A_t" its transpose.
    Buffer A_n = make_buffer(size_t(g.M) * g.K, rng), B_n = make_buffer(size_t(g.K) * g.N, rng);
    Buffer A_t = transposed(A_n, g.M, g.K), B_t = transposed(B_n, g.K, g.N);
    Buffer C0 = make_buffer(size_t(g.M) * g.N, rng), C = make_buffer(size_t(g.M) * g.N, rng);
    std::vector<Variant> vs;
    vs.push_back({std::string("ete ") + layout(g.ta, g.tb),
                  true,
                  g.ta,
                  g.tb,
                  g.ta ? &A_t : &A_n,
                  g.tb ? &B_t : &B_n,
                  {}});
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            vs.push_back({std::string("cblas ") + layout(ta, tb),
                          false,
                          bool(ta),
                          bool(tb),
                          ta ? &A_t : &A_n,
                          tb ? &B_t : &B_n,
                          {}});
    CaseResult r;
    r.g = g;
    std::vector<float> ete_c(C0.data(), C0.data() + C0.n);
    call(g, vs[0], ete_c.data());
    r.ref_err = check_reference(g, ete_c.data(), A_n, B_n, C0, rng);
    r.max_rel_err = check_variants(g, vs, C0, ete_c);
    for (Variant& v : vs) call(g, v, C.data());  // warm-up: packing buffers, thread pool
    for (int i = 0; i < reps; ++i)
        for (Variant& v : vs) v.seconds.push_back(time_call(g, v, C.data()));
    r.ete_s = median(vs[0].seconds);
    r.best_s = 1e30;
    for (size_t i = 1; i < vs.size(); ++i) {
        double s = median(vs[i].seconds);
        if (s < r.best_s) r.best_s = s, r.best_layout = vs[i].label.substr(6);
    }
    return r;
}

double sgemm_peak_gflops(int threads, int reps, std::mt19937& rng) {
    openblas_set_num_threads(threads);
    GemmCase g{"peak", false, false, 2048, 2048, 2048, 0.0f, 0};
    Buffer A = make_buffer(size_t(2048) * 2048, rng), B = make_buffer(size_t(2048) * 2048, rng);
    Buffer C = make_buffer(size_t(2048) * 2048, rng);
    Variant v{"cblas NN", false, false, false, &A, &B, {}};
    call(g, v, C.data());
    for (int i = 0; i < reps; ++i) v.seconds.push_back(time_call(g, v, C.data()));
    return 2.0 * 2048.0 * 2048.0 * 2048.0 / median(v.seconds) * 1e-9;
}

double gflops(const GemmCase& g, double s) {
    return 2.0 * g.M * g.N * g.K / s * 1e-9;
}

struct Report {
    std::vector<CaseResult> cases;
    double peak1 = 0, peak2 = 0;  // sgemm GFLOP/s on 1 and 2 threads
    int threads = 0;              // of the shape table
    // One optimizer step's GEMMs: sum over cases of calls/step x median time.
    double step_ete_s = 0, step_best_s = 0, step_flops = 0;
};

Report make_report(std::vector<CaseResult> cases, double peak1, double peak2, int threads) {
    Report rep{std::move(cases), peak1, peak2, threads};
    for (const CaseResult& r : rep.cases) {
        rep.step_ete_s += r.ete_s * r.g.per_step;
        rep.step_best_s += r.best_s * r.g.per_step;
        rep.step_flops += 2.0 * r.g.M * r.g.N * r.g.K * r.g.per_step;
    }
    return rep;
}

void print_json(const Report& rep) {
    nlohmann::json j;
    j["bench"] = "ete_gemm";
    j["threads"] = rep.threads;
    j["openblas_core"] = cpu::openblas_core_name();
    j["sgemm_peak_gflops"] = {{"1", rep.peak1}, {"2", rep.peak2}};
    for (const CaseResult& r : rep.cases) {
        j["cases"].push_back({{"name", r.g.name},
                              {"M", r.g.M},
                              {"N", r.g.N},
                              {"K", r.g.K},
                              {"layout", layout(r.g.ta, r.g.tb)},
                              {"per_step", r.g.per_step},
                              {"ete_gflops", gflops(r.g, r.ete_s)},
                              {"best_layout", r.best_layout},
                              {"best_gflops", gflops(r.g, r.best_s)},
                              {"ratio", r.best_s / r.ete_s},
                              {"ref_err", r.ref_err},
                              {"max_rel_err", r.max_rel_err}});
    }
    j["step_gemm_ms"] = {{"ete", rep.step_ete_s * 1e3}, {"best", rep.step_best_s * 1e3}};
    j["step_gemm_gflops"] = rep.step_flops / rep.step_ete_s * 1e-9;
    std::printf("%s\n", j.dump().c_str());
}

void print_text(const Report& rep) {
    std::printf(
        "OpenBLAS core %s, %d threads; sgemm peak (2048^3 NN): %.1f GFLOP/s on 1 thread, "
        "%.1f GFLOP/s on 2\n\n",
        cpu::openblas_core_name(), rep.threads, rep.peak1, rep.peak2);
    std::printf(
        "| product | M x N x K | ETE layout | ETE GFLOP/s | best layout | best GFLOP/s | "
        "ETE/best | calls/step |\n|---|---|---|---:|---|---:|---:|---:|\n");
    for (const CaseResult& r : rep.cases) {
        double ratio = r.best_s / r.ete_s;
        std::printf("| %s | %d x %d x %d | %s | %.1f | %s | %.1f | %.2f%s | %d |\n",
                    r.g.name.c_str(), r.g.M, r.g.N, r.g.K, layout(r.g.ta, r.g.tb),
                    gflops(r.g, r.ete_s), r.best_layout.c_str(), gflops(r.g, r.best_s), ratio,
                    ratio < 0.90 ? " (below 0.90)" : "", r.g.per_step);
    }
    std::printf(
        "\nGEMM time per optimizer step (sum of calls/step x median): ETE %.1f ms, best "
        "layouts %.1f ms; %.1f GFLOP/s over the step's %.1f GFLOP\n",
        rep.step_ete_s * 1e3, rep.step_best_s * 1e3, rep.step_flops / rep.step_ete_s * 1e-9,
        rep.step_flops * 1e-9);
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    int threads = 2, reps = 5;
    bool json = false;
    CLI::App app{
        "ete_bench_gemm — the bench model's GEMM shapes: the CPU backend's gemm vs best sgemm"};
    app.add_option("--threads", threads, "OpenBLAS threads for the shape table")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--reps", reps, "timed calls per variant (median)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_flag("--json", json, "print one JSON object instead of the Markdown table");
    CLI11_PARSE(app, argc, argv);
    try {
        std::mt19937 rng(1234);
        double peak1 = ete::bench::sgemm_peak_gflops(1, reps, rng);
        double peak2 = ete::bench::sgemm_peak_gflops(2, reps, rng);
        openblas_set_num_threads(threads);
        std::vector<ete::bench::CaseResult> rs;
        for (const ete::bench::GemmCase& g : ete::bench::bench_cases()) {
            rs.push_back(ete::bench::run_case(g, reps, rng));
            std::fprintf(stderr, "  %-18s done\n", g.name.c_str());
        }
        ete::bench::Report rep = ete::bench::make_report(std::move(rs), peak1, peak2, threads);
        if (json) {
            ete::bench::print_json(rep);
        } else {
            ete::bench::print_text(rep);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete_bench_gemm: %s\n", e.what());
        return 1;
    }
    return 0;
}
