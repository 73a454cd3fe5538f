// bench/qat_ops_bench.cpp — ete_bench_qat_ops: the QAT ops one training step of the bench Llama
// runs (bench/qat_bench.sh's W8A8 with weight, linear_in and post_norm), each timed on its own:
// the weights' range (min_max per output channel, fp32 masters) and fake quantization into the
// compute dtype, apart and fused (fake_quant_own_range, what a step runs), an activation's fake
// quantization in place with its straight-through mask and observation (min_max per row), and the
// mask's backward. Medians of --reps calls; GB/s counts the bytes each op must read and write once.
// Before timing, every CPU result is checked against the reference backend bit for bit.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete::bench {
namespace {

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

double time_of(const std::function<void()>& f, int reps) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(t);
}

// Host buffers of one (rows, cols) operand in a dtype, filled from N(0, 1) (16-bit: rounded).
std::vector<uint8_t> operand(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<uint8_t> b(size_t(rows * cols) * dtype_size(t));
    for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = d(gen);
        if (t == DType::F32) {
            std::memcpy(b.data() + 4 * i, &v, 4);
        } else {
            const uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
            std::memcpy(b.data() + 2 * i, &h, 2);
        }
    }
    return b;
}

struct Row {
    const char* op;
    double ms, bytes;
};

void report(const char* shape, const std::vector<Row>& rows) {
    for (const Row& r : rows)
        std::printf("  %-10s %-34s %8.3f ms  %6.1f GB/s\n", shape, r.op, r.ms * 1e3,
                    r.bytes / r.ms * 1e-9);
}

// One weight (out, in): min_max per row, quant_params, fake_quant fp32 -> compute dtype.
std::vector<Row> weight_ops(Backend& be, Backend& ref, DType compute, int64_t out, int64_t in,
                            int reps) {
    auto w = operand(DType::F32, out, in, 1);
    std::vector<uint8_t> y(size_t(out * in) * dtype_size(compute)), y_ref = y;
    std::vector<float> lo(static_cast<size_t>(out)), hi(lo), s(lo), z(lo);
    const CMat W{w.data(), DType::F32, out, in};
    const Mat Y{y.data(), compute, out, in}, YR{y_ref.data(), compute, out, in};
    const Vec LO{lo.data(), DType::F32, out}, HI{hi.data(), DType::F32, out};
    const Vec S{s.data(), DType::F32, out}, Z{z.data(), DType::F32, out};
    const QuantGrid g = QuantGrid::of(8, QParamRule::Symmetric);
    auto range = [&] { be.min_max(LO, HI, W, in); };
    auto fq = [&] { be.fake_quant(Y, W, S, Z, {}, in, g); };
    auto own = [&] { be.fake_quant_own_range(Y, W, S, in, g); };
    range();
    be.quant_params(S, Z, LO, HI, g);
    fq();
    ref.fake_quant(YR, W, S, Z, {}, in, g);
    ETE_CHECK(y == y_ref, "weight fake_quant ({}, {}) differs from the reference", out, in);
    std::fill(y.begin(), y.end(), uint8_t(0));
    own();
    ETE_CHECK(y == y_ref, "weight fake_quant_own_range ({}, {}) differs from the three ops", out,
              in);
    const double n = double(out * in), e = double(dtype_size(compute));
    return {{"min_max (weight rows, fp32)", time_of(range, reps), 4 * n},
            {"fake_quant (weight -> compute)", time_of(fq, reps), (4 + e) * n},
            {"fake_quant_own_range (the two)", time_of(own, reps), (4 + e) * n}};
}

// One activation (N, cols) of the compute dtype: observation, fake quant in place with the
// mask, and the mask's backward in place.
std::vector<Row> act_ops(Backend& be, Backend& ref, DType t, int64_t N, int64_t cols, int reps) {
    const auto x0 = operand(t, N, cols, 2);
    auto x = x0, x_ref = x0, d = operand(t, N, cols, 3), d_ref = d;
    const int64_t mb = fake_quant_mask_bytes(N, cols);
    std::vector<uint8_t> m(static_cast<size_t>(mb)), m_ref(m);
    std::vector<float> lo(static_cast<size_t>(N)), hi(lo);
    const float s = 4.0f / 255.0f, z = 0.0f;
    const Mat X{x.data(), t, N, cols}, XR{x_ref.data(), t, N, cols};
    const Mat D{d.data(), t, N, cols}, DR{d_ref.data(), t, N, cols};
    const Vec M{m.data(), DType::U8, mb}, MR{m_ref.data(), DType::U8, mb};
    const CVec S{&s, DType::F32, 1}, Z{&z, DType::F32, 1};
    const QuantGrid g = QuantGrid::of(8, QParamRule::Affine);
    auto observe = [&] {
        be.min_max({lo.data(), DType::F32, N}, {hi.data(), DType::F32, N}, X, cols);
    };
    // Fake quantization is idempotent on its own output, so repeated calls time the same work.
    auto fq = [&] { be.fake_quant(X, X, S, Z, M, cols, g); };
    auto bwd = [&] { be.fake_quant_backward(D, D, M); };
    fq();
    bwd();
    ref.fake_quant(XR, XR, S, Z, MR, cols, g);
    ref.fake_quant_backward(DR, DR, MR);
    ETE_CHECK(x == x_ref && m == m_ref && d == d_ref,
              "activation fake_quant / backward ({}, {}) differ from the reference", N, cols);
    const double n = double(N * cols), e = double(dtype_size(t));
    return {{"min_max (activation rows)", time_of(observe, reps), e * n},
            {"fake_quant (activation, mask)", time_of(fq, reps), 2 * e * n + n / 8},
            {"fake_quant_backward", time_of(bwd, reps), 2 * e * n + n / 8}};
}

}  // namespace
}  // namespace ete::bench

int main(int argc, char** argv) {
    int reps = 20, threads = 0, batch = 4, seq = 256;
    std::string precision = "bf16";
    CLI::App app{"ete_bench_qat_ops — the QAT ops of one bench-Llama step, each on its own"};
    app.add_option("--reps", reps, "calls per op (the median is reported)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    app.add_option("--threads", threads, "OpenMP threads (0 = the default)")
        ->check(CLI::Range(0, 4096));
    app.add_option("--precision", precision, "compute dtype: fp32 or bf16")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->capture_default_str();
    app.add_option("--batch", batch, "B")->check(CLI::Range(1, 1024))->capture_default_str();
    app.add_option("--seq", seq, "T")->check(CLI::Range(1, 65536))->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        if (threads > 0) omp_set_num_threads(threads);
        using namespace ete;
        const DType t = precision == "bf16" ? DType::BF16 : DType::F32;
        auto be = make_cpu_backend();
        auto ref = make_ref_backend();
        const int64_t N = int64_t(batch) * seq;
        std::printf("QAT ops, %s, %d threads, N = B·T = %lld rows\n", precision.c_str(),
                    omp_get_max_threads(), static_cast<long long>(N));
        // The bench Llama (C 512, F 1408, 8 heads of 64, 4 kv heads): its weights and the
        // activations its quantized linears read.
        bench::report("q|k|v", bench::weight_ops(*be, *ref, t, 1024, 512, reps));
        bench::report("gate|up", bench::weight_ops(*be, *ref, t, 2816, 512, reps));
        bench::report("down", bench::weight_ops(*be, *ref, t, 512, 1408, reps));
        bench::report("x (N,512)", bench::act_ops(*be, *ref, t, N, 512, reps));
        bench::report("act (N,1408)", bench::act_ops(*be, *ref, t, N, 1408, reps));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete_bench_qat_ops: %s\n", e.what());
        return 1;
    }
    return 0;
}
