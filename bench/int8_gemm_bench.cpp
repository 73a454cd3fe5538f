// bench/int8_gemm_bench.cpp — ete_bench_int8: the integer model's linears against fp32 on the
// bench model's shapes (N = B·T = 2048 rows): Backend::gemm (fp32, OpenBLAS) against gemm_s8 on a
// prepared (packed) weight, with quantize_s8 and dequantize_s32 timed beside it. Before timing,
// the integer path (quantize → packed GEMM → dequantize) is checked against the fp32 product of
// the dequantized operands. Medians of --reps calls, interleaved.
#include <omp.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/error.h"

namespace ete::bench {
namespace {

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

double seconds(const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Shape {
    const char* name;
    int64_t N, K;
};

void run_shape(Backend& be, const Shape& s, int64_t M, int reps) {
    std::mt19937 gen(1);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_int_distribution<int> qd(-127, 127);
    std::vector<float> x(size_t(M * s.K)), wf(size_t(s.N * s.K)), y(size_t(M * s.N)), y8 = y;
    std::vector<int8_t> wq(wf.size());
    for (auto& v : x) v = d(gen);
    const float ws = 0.01f, xs = 0.03f, xz = 3.0f;
    for (size_t i = 0; i < wq.size(); ++i) wq[i] = int8_t(qd(gen)), wf[i] = float(wq[i]) * ws;
    std::vector<uint8_t> xq(x.size());
    std::vector<int32_t> acc(y.size()), wsum(size_t(s.N), 0);
    for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.K; ++k) wsum[size_t(n)] += wq[size_t(n * s.K + k)];
    std::vector<float> wscale(size_t(s.N), ws);
    const CMat X{x.data(), DType::F32, M, s.K}, W{wf.data(), DType::F32, s.N, s.K};
    const Mat Y{y.data(), DType::F32, M, s.N}, Y8{y8.data(), DType::F32, M, s.N};
    const Mat XQ{xq.data(), DType::U8, M, s.K}, A{acc.data(), DType::I32, M, s.N};
    const CVec S{&xs, DType::F32, 1}, Z{&xz, DType::F32, 1};
    const CVec WS{wscale.data(), DType::F32, s.N}, WSUM{wsum.data(), DType::I32, s.N};
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    auto packed = be.prepare_s8({wq.data(), DType::I8, s.N, s.K});
    auto fp32 = [&] { be.gemm(X, false, W, true, Y); };
    auto quant = [&] { be.quantize_s8(XQ, X, S, Z, g); };
    auto gemm = [&] { be.gemm_s8(XQ, *packed, A); };
    auto deq = [&] { be.dequantize_s32(Y8, A, S, Z, 128, WS, WSUM, 0.0f); };
    std::vector<float> fused_scale(size_t(s.N), xs * ws), y9(y.size());
    const Mat Y9{y9.data(), DType::F32, M, s.N};
    auto fused = [&] {
        be.gemm_s8_scaled(XQ, *packed, Y9, {fused_scale.data(), DType::F32, s.N}, 3 + 128, 0.0f);
    };
    // Check: the integer path against fp32 on the fake-quantized input.
    quant();
    gemm();
    deq();
    std::vector<float> xf(x.size());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = (float(int(xq[i]) - 128) - xz) * xs;
    be.gemm({xf.data(), DType::F32, M, s.K}, false, W, true, Y);
    double err = 0, mag = 0;
    for (size_t i = 0; i < y.size(); ++i)
        err = std::max(err, double(std::fabs(y[i] - y8[i]))),
        mag = std::max(mag, double(std::fabs(y[i])));
    ETE_CHECK(err <= 1e-4 * mag, "[{}] the integer product is off by {} (max |y| {})", s.name, err,
              mag);
    fused();
    for (size_t i = 0; i < y.size(); ++i) err = std::max(err, double(std::fabs(y[i] - y9[i])));
    ETE_CHECK(err <= 1e-4 * mag, "[{}] the fused integer product is off by {} (max |y| {})", s.name,
              err, mag);
    std::vector<double> tf, tq, tg, td, tx;
    for (int r = 0; r < reps; ++r) {
        tf.push_back(seconds(fp32));
        tq.push_back(seconds(quant));
        tg.push_back(seconds(gemm));
        td.push_back(seconds(deq));
        tx.push_back(seconds(fused));
    }
    const double f = median(tf), q = median(tq), gm = median(tg), dq = median(td), fx = median(tx);
    std::printf("| %s %lld × %lld | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                s.name, (long long)s.N, (long long)s.K, f * 1e3, gm * 1e3, q * 1e3, dq * 1e3,
                fx * 1e3, f / (gm + q + dq), f / (fx + q), f / gm);
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    CLI::App app{"ete_bench_int8: int8 linears (quantize, packed gemm_s8, dequantize) vs fp32"};
    int threads = 0, reps = 7;
    int64_t rows = 2048;
    app.add_option("--threads", threads, "OpenMP threads (0 = default)");
    app.add_option("--reps", reps, "timed calls per variant (median)");
    app.add_option("--rows", rows, "rows M = B·T");
    CLI11_PARSE(app, argc, argv);
    if (threads > 0) omp_set_num_threads(threads);
    auto be = ete::make_cpu_backend();
    std::printf("%s, %d threads, M = %lld\n\n", be->describe().c_str(), omp_get_max_threads(),
                (long long)rows);
    std::printf(
        "| shape (N × K) | fp32 (ms) | int8 GEMM (ms) | quantize (ms) | dequantize (ms) | fused "
        "GEMM + dequantize (ms) | fp32 / int8 | fp32 / int8 fused | fp32 / GEMM "
        "|\n|---|---|---|---|---|---|---|---|---|\n");
    using ete::bench::Shape;
    for (const Shape& s :
         {Shape{"q|k|v", 1024, 512}, Shape{"o_proj", 512, 512}, Shape{"gate|up", 2816, 512},
          Shape{"down", 512, 1408}, Shape{"LM head", 8192, 512}})
        ete::bench::run_shape(*be, s, rows, reps);
    return 0;
}
