// bench/cuda_gemm_bench.cpp — ete_bench_cuda_gemm: the GPU's measured bf16 GEMM rate through the
// CUDA backend (cuBLASLt), the denominator of the model-FLOP/s target (docs/gpu.md), and the
// linears of the ≈1B Llama of issue 13 (hidden 2048, intermediate 5632, vocab 32000) at N = 8192
// rows in their three roles. Each case: warm-up, then --reps calls between two synchronizations,
// the median of --rounds such rounds. Prints a table, and JSON with --json PATH. Exits 2 with the
// reason where there is no CUDA device.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete::bench {
namespace {

struct Case {
    std::string name;
    bool ta, tb;
    int64_t M, N, K;
};

std::vector<Case> cases() {
    const int64_t R = 8192, C = 2048, F = 5632, V = 32000, S = (16 + 2 * 8) * 128;
    std::vector<Case> v = {{"peak 8192^3 (x·Wᵀ)", false, true, 8192, 8192, 8192}};
    struct L {
        const char* name;
        int64_t in, out;
    };
    for (const L& l : {L{"qkv", C, S}, L{"o_proj", C, C}, L{"gate|up", C, 2 * F}, L{"down", F, C},
                       L{"lm_head", C, V}}) {
        v.push_back({std::string(l.name) + " fwd", false, true, R, l.out, l.in});
        v.push_back({std::string(l.name) + " d_x", false, false, R, l.in, l.out});
        v.push_back({std::string(l.name) + " d_W", true, false, l.out, l.in, R});
    }
    return v;
}

// A device buffer of n bf16 values in [-1, 1).
DeviceBuffer random_bf16(Backend& be, int64_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> h(static_cast<size_t>(n));
    for (auto& x : h) x = f32_to_bf16(dist(gen));
    DeviceBuffer b(be, h.size() * 2);
    be.upload(b.data(), h.data(), h.size() * 2);
    return b;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int run(int reps, int rounds, const std::string& json_path) {
    const std::string why = cuda_unavailable_reason();
    if (!why.empty()) {
        std::fprintf(stderr, "ete_bench_cuda_gemm: %s\n", why.c_str());
        return 2;
    }
    auto be = make_backend("cuda");
    std::printf("%s\n%-22s %8s %8s %8s %10s %9s\n", be->describe().c_str(), "case", "M", "N", "K",
                "ms", "TFLOP/s");
    nlohmann::json out = {{"device", be->describe()}, {"cases", nlohmann::json::array()}};
    for (const Case& c : cases()) {
        const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
        const int64_t br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
        DeviceBuffer a = random_bf16(*be, ar * ac, 1), b = random_bf16(*be, br * bc, 2);
        DeviceBuffer y(*be, size_t(c.M * c.N) * 4);
        const CMat av(a.data(), DType::BF16, ar, ac), bv(b.data(), DType::BF16, br, bc);
        const Mat yv(y.data(), DType::F32, c.M, c.N);
        for (int i = 0; i < 3; ++i) be->gemm(av, c.ta, bv, c.tb, yv);
        be->synchronize();
        std::vector<double> ms;
        for (int r = 0; r < rounds; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; ++i) be->gemm(av, c.ta, bv, c.tb, yv);
            be->synchronize();
            ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count() /
                reps);
        }
        const double t = median(ms), tflops = 2.0 * c.M * c.N * c.K / (t * 1e-3) / 1e12;
        std::printf("%-22s %8lld %8lld %8lld %10.3f %9.1f\n", c.name.c_str(), (long long)c.M,
                    (long long)c.N, (long long)c.K, t, tflops);
        out["cases"].push_back(
            {{"name", c.name}, {"M", c.M}, {"N", c.N}, {"K", c.K}, {"ms", t}, {"tflops", tflops}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    return 0;
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    CLI::App app("ete_bench_cuda_gemm: bf16 GEMM TFLOP/s through the CUDA backend");
    int reps = 20, rounds = 5;
    std::string json;
    app.add_option("--reps", reps, "calls per timed round")->capture_default_str();
    app.add_option("--rounds", rounds, "timed rounds (the median is reported)")
        ->capture_default_str();
    app.add_option("--json", json, "also write the results as JSON here");
    CLI11_PARSE(app, argc, argv);
    try {
        return ete::bench::run(reps, rounds, json);
    } catch (const ete::Error& e) {
        std::fprintf(stderr, "ete_bench_cuda_gemm: %s\n", e.what());
        return 1;
    }
}
