// bench/dnnl_bench.cpp — ete_bench_dnnl: 16-bit GEMMs through oneDNN (ete::cpu::dnnl_gemm) vs
// fp32 OpenBLAS sgemm, on 2048³ and the GEMMs of one bench-model step.
//
// The bench model (as in gemm_bench.cpp): N = B·T = 2048 token rows, C 512, q|k|v S 1024,
// gate+up 2F 2816, down F 1408, V 8192. Each linear runs in its three roles:
//   forward  y(N, out)   = x(N, in)·W(out, in)ᵀ   NT (o_proj and down add into the residual: beta
//   1) d_x      d_x(N, in)  = d_y(N, out)·W(out, in)  NN d_W      d_W(out,in) += d_y(N, out)ᵀ·x(N,
//   in)  TN, beta 1, C f32 (gradients accumulate in fp32)
// Variants: bf16 operands with C f32 and with C bf16 (not for d_W), bf16 operands with C f32
// through the sgemm engine (converted operands, dnnl_gemm_fallback), f16 operands with C f32 (the
// fp32 fallback where oneDNN has no f16 kernel; the kernel column says which), and fp32
// cblas_sgemm on the same layout. Per thread count (omp_set_num_threads and
// openblas_set_num_threads), every variant is first checked against an fp64 reference at sampled
// entries (a wrong result is never timed), then the variants are called round-robin --reps times
// so load changes hit all alike; each figure is the median.
#include <cblas.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete::bench {
namespace {

struct Shape {
    std::string name;  // e.g. "qkv forward"
    bool ta, tb;
    int M, N, K;
    float beta;
    bool is_d_w;  // C stays f32: no bf16-C variant
};

std::vector<Shape> bench_shapes() {
    struct Linear {
        const char* name;
        int in, out;
        float fwd_beta;
    };
    const int N = 2048;
    std::vector<Shape> shapes = {{"2048^3", false, false, 2048, 2048, 2048, 0.0f, false}};
    for (Linear l : {Linear{"qkv", 512, 1024, 0}, Linear{"o_proj", 512, 512, 1},
                     Linear{"gate+up", 512, 2816, 0}, Linear{"down", 1408, 512, 1},
                     Linear{"lm_head", 512, 8192, 0}}) {
        std::string n = l.name;
        shapes.push_back({n + " forward", false, true, N, l.out, l.in, l.fwd_beta, false});
        shapes.push_back({n + " d_x", false, false, N, l.in, l.out, 0.0f, false});
        shapes.push_back({n + " d_W", true, false, l.out, l.in, N, 1.0f, true});
    }
    return shapes;
}

struct VariantSpec {
    const char* label;     // column name
    DType ab, c;           // ab F32: cblas_sgemm
    bool sgemm16 = false;  // 16-bit operands through the sgemm engine (dnnl_gemm_fallback)
};

const VariantSpec kVariants[] = {{"bf16->f32", DType::BF16, DType::F32},
                                 {"bf16->bf16", DType::BF16, DType::BF16},
                                 {"bf16->f32 sgemm engine", DType::BF16, DType::F32, true},
                                 {"f16->f32", DType::F16, DType::F32},
                                 {"f32 sgemm", DType::F32, DType::F32}};
constexpr int kNumVariants = 5;

// 64-byte aligned bytes holding elements of one dtype.
struct Buffer {
    DType t = DType::F32;
    size_t n = 0;
    std::unique_ptr<unsigned char, decltype(&std::free)> p{nullptr, &std::free};
    Buffer(DType type, size_t count) : t(type), n(count) {
        size_t bytes = (n * dtype_size(t) + 63) / 64 * 64;
        p.reset(static_cast<unsigned char*>(std::aligned_alloc(64, bytes)));
        ETE_ASSERT(p);
    }
    void* data() const { return p.get(); }
    double get(size_t i) const {
        uint16_t h;
        if (t == DType::F32) return static_cast<const float*>(data())[i];
        std::memcpy(&h, p.get() + 2 * i, 2);
        return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
};

// values converted to t (rounded to nearest even for 16-bit types).
Buffer make_buffer(DType t, const std::vector<float>& values) {
    Buffer b(t, values.size());
    convert_from_f32(b.data(), t, values.data(), values.size());
    return b;
}

std::vector<float> random_values(size_t n, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

struct Variant {
    int index;  // into kVariants
    VariantSpec spec;
    Buffer A, B, C0, C;
    std::vector<double> seconds;
    std::string kernel;
};

void call(const Shape& s, const Variant& v, void* C) {
    int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    if (v.spec.ab == DType::F32) {
        cblas_sgemm(
            CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M,
            s.N, s.K, 1.0f, static_cast<const float*>(v.A.data()), lda,
            static_cast<const float*>(v.B.data()), ldb, s.beta, static_cast<float*>(C), s.N);
    } else if (v.spec.sgemm16) {
        cpu::dnnl_gemm_fallback(s.ta, s.tb, s.M, s.N, s.K, 1.0f, v.A.data(), lda, v.B.data(), ldb,
                                v.spec.ab, s.beta, C, s.N, v.spec.c);
    } else {
        cpu::dnnl_gemm_onednn(s.ta, s.tb, s.M, s.N, s.K, 1.0f, v.A.data(), lda, v.B.data(), ldb,
                              v.spec.ab, s.beta, C, s.N, v.spec.c);
    }
}

// C = C0, one call, then 128 sampled entries against an fp64 dot product of the variant's own
// (exactly representable) operands. Bound: fp32 sums of K exact products, (K + 2)·2^-24 of
// sum|a·b| + |beta·c0|, plus one bf16 rounding (2^-8 relative) for a bf16 C. Refuses to go on
// (ete::Error) when an entry exceeds it.
void check_reference(const Shape& s, Variant& v, std::mt19937& rng) {
    std::memcpy(v.C.data(), v.C0.data(), v.C0.n * dtype_size(v.C0.t));
    call(s, v, v.C.data());
    std::uniform_int_distribution<int> row(0, s.M - 1), col(0, s.N - 1);
    int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    double u_c = v.spec.c == DType::BF16 ? 0x1p-8 : 0.0;
    for (int t = 0; t < 128; ++t) {
        int i = row(rng), j = col(rng);
        size_t at = size_t(i) * s.N + j;
        double c0 = s.beta == 0.0f ? 0.0 : double(s.beta) * v.C0.get(at), sum = c0;
        double mag = std::fabs(c0);
        for (int k = 0; k < s.K; ++k) {
            double a = v.A.get(s.ta ? size_t(k) * lda + i : size_t(i) * lda + k);
            double b = v.B.get(s.tb ? size_t(j) * ldb + k : size_t(k) * ldb + j);
            sum += a * b;
            mag += std::fabs(a * b);
        }
        double err = std::fabs(v.C.get(at) - sum);
        double tol = (s.K + 2) * 0x1p-24 * mag + u_c * std::fabs(sum) + 1e-30;
        ETE_CHECK(err <= tol, "'{}' {}: C[{},{}] = {} but the fp64 reference is {} (tolerance {})",
                  s.name, v.spec.label, i, j, v.C.get(at), sum, tol);
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Row {
    Shape s;
    int threads;
    double gflops[kNumVariants];  // 0: not run
    std::string kernel[kNumVariants];
};

std::vector<Variant> make_variants(const Shape& s, std::mt19937& rng) {
    size_t a_n = size_t(s.M) * s.K, b_n = size_t(s.K) * s.N, c_n = size_t(s.M) * s.N;
    std::vector<float> a = random_values(a_n, rng), b = random_values(b_n, rng);
    std::vector<float> c = random_values(c_n, rng);
    std::vector<Variant> vs;
    for (int k = 0; k < kNumVariants; ++k) {
        const VariantSpec& spec = kVariants[k];
        if (s.is_d_w && spec.c == DType::BF16) continue;
        vs.push_back({k,
                      spec,
                      make_buffer(spec.ab, a),
                      make_buffer(spec.ab, b),
                      make_buffer(spec.c, c),
                      Buffer(spec.c, c_n),
                      {},
                      ""});
    }
    return vs;
}

std::vector<Row> run_shape(const Shape& s, const std::vector<int>& threads, int reps,
                           std::mt19937& rng) {
    std::vector<Variant> vs = make_variants(s, rng);
    std::vector<Row> rows;
    for (int t : threads) {
        omp_set_num_threads(t);
        openblas_set_num_threads(t);
        for (Variant& v : vs) {
            v.seconds.clear();
            check_reference(s, v, rng);  // also the warm-up: primitive creation, packing buffers
            v.kernel =
                v.spec.ab == DType::F32 || v.spec.sgemm16
                    ? std::string("openblas ") + cpu::openblas_core_name()
                    : cpu::dnnl_gemm_impl(s.ta, s.tb, s.M, s.N, s.K, 1.0f, s.ta ? s.M : s.K,
                                          s.tb ? s.K : s.N, v.spec.ab, s.beta, s.N, v.spec.c);
        }
        for (int r = 0; r < reps; ++r)
            for (Variant& v : vs) {
                auto t0 = std::chrono::steady_clock::now();
                call(s, v, v.C.data());
                v.seconds.push_back(
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
        Row row{s, t, {}, {}};
        for (const Variant& v : vs) {
            row.gflops[v.index] = 2.0 * s.M * s.N * s.K / median(v.seconds) * 1e-9;
            row.kernel[v.index] = v.kernel;
        }
        rows.push_back(row);
    }
    return rows;
}

const char* layout(const Shape& s) {
    return s.ta ? (s.tb ? "TT" : "TN") : (s.tb ? "NT" : "NN");
}

void print_text(const std::vector<Row>& rows, int reps) {
    std::printf("%s; OpenBLAS core %s; GFLOP/s, median of %d interleaved calls\n\n",
                cpu::dnnl_info().c_str(), cpu::openblas_core_name(), reps);
    std::printf("| product | M x N x K | layout | threads |");
    for (const VariantSpec& v : kVariants) std::printf(" %s |", v.label);
    std::printf(" bf16 kernel | f16 kernel |\n|---|---|---|---:|---:|---:|---:|---:|---|---|\n");
    for (const Row& r : rows) {
        std::printf("| %s | %d x %d x %d | %s%s | %d |", r.s.name.c_str(), r.s.M, r.s.N, r.s.K,
                    layout(r.s), r.s.beta != 0.0f ? " +C" : "", r.threads);
        for (int k = 0; k < kNumVariants; ++k) {
            if (r.gflops[k] > 0) {
                std::printf(" %.1f |", r.gflops[k]);
            } else {
                std::printf(" - |");
            }
        }
        std::printf(" %s | %s |\n", r.kernel[0].c_str(), r.kernel[3].substr(0, 20).c_str());
    }
}

void print_json(const std::vector<Row>& rows, int reps) {
    nlohmann::json j;
    j["bench"] = "ete_dnnl";
    j["dnnl"] = cpu::dnnl_info();
    j["openblas_core"] = cpu::openblas_core_name();
    j["reps"] = reps;
    for (const Row& r : rows) {
        nlohmann::json row = {
            {"name", r.s.name},      {"M", r.s.M},       {"N", r.s.N},          {"K", r.s.K},
            {"layout", layout(r.s)}, {"beta", r.s.beta}, {"threads", r.threads}};
        for (int k = 0; k < kNumVariants; ++k) {
            if (r.gflops[k] <= 0) continue;
            row["gflops"][kVariants[k].label] = r.gflops[k];
            row["kernel"][kVariants[k].label] = r.kernel[k];
        }
        j["rows"].push_back(row);
    }
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    std::vector<int> threads = {1, 2};
    int reps = 5;
    bool json = false;
    std::string only;
    CLI::App app{"ete_bench_dnnl — 16-bit GEMMs through oneDNN vs fp32 sgemm"};
    app.add_option("--threads", threads, "thread counts to measure")->capture_default_str();
    app.add_option("--reps", reps, "timed calls per variant (median)")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    app.add_option("--only", only, "run only the products whose name contains this");
    app.add_flag("--json", json, "print one JSON object instead of the Markdown table");
    CLI11_PARSE(app, argc, argv);
    if (!ete::cpu::dnnl_available()) {
        std::fprintf(stderr, "ete_bench_dnnl: %s\n", ete::cpu::dnnl_info().c_str());
        return 1;
    }
    try {
        std::mt19937 rng(1234);
        std::vector<ete::bench::Row> rows;
        for (const ete::bench::Shape& s : ete::bench::bench_shapes()) {
            if (s.name.find(only) == std::string::npos) continue;
            for (auto& r : ete::bench::run_shape(s, threads, reps, rng)) rows.push_back(r);
            std::fprintf(stderr, "  %-18s done\n", s.name.c_str());
        }
        if (json) {
            ete::bench::print_json(rows, reps);
        } else {
            ete::bench::print_text(rows, reps);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete_bench_dnnl: %s\n", e.what());
        return 1;
    }
    return 0;
}
