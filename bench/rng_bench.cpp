// bench/rng_bench.cpp — CounterRng::normal_fill vs the per-element normal() loop, the exhaustive
// check behind normal_fill's exactness (rng_normal.h), and the cost of the dropout op.
//
//   ete_bench_rng [--n N] [--threads T,T,...]  time both at each thread count (checked first)
//   ete_bench_rng --verify-exhaustive          every one of the 2^32 inputs of each factor
//   ete_bench_rng --dropout [--threads ...]    ns per element of the CPU backend's dropout on a
//                                              (256, 5632) bf16 input: a LoRA down_proj of the
//                                              1.1B bench model at micro-batch 1, seq 256
#include <omp.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/core/rng.h"
#include "ete/core/rng_normal.h"

namespace {

using ete::CounterRng;
namespace rd = ete::rng_detail;

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The loop ParamStore::init ran before normal_fill: one normal() per element, one thread.
void normal_loop(const CounterRng& rng, float* out, int64_t n, float scale) {
    for (int64_t k = 0; k < n; ++k) out[k] = scale * rng.normal(uint64_t(k));
}

int bench(int64_t n, const std::vector<int>& threads) {
    CounterRng rng(1337, "transformer.h.0.mlp.c_fc.weight");
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    auto t0 = std::chrono::steady_clock::now();
    normal_loop(rng, want.data(), n, 0.02f);
    std::printf("n = %lld\nper-element normal() loop, 1 thread: %.3f s\n", (long long)n,
                seconds_since(t0));
    for (int t : threads) {
        omp_set_num_threads(t);
        std::memset(got.data(), 0, got.size() * sizeof(float));
        t0 = std::chrono::steady_clock::now();
        rng.normal_fill(got.data(), 0, n, 0.02f);
        double s = seconds_since(t0);
        bool same = std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
        std::printf("normal_fill, %d thread%s: %.3f s  %s\n", t, t == 1 ? "" : "s", s,
                    same ? "(bit-identical)" : "MISMATCH");
        if (!same) return 1;
    }
    return 0;
}

// max over all w of |approx - libm| / |libm| for each factor, in parallel chunks of 2^20.
int verify_exhaustive() {
    if (!rd::has_vector_normal()) {
        std::printf("no vector path in this build: normal_fill calls normal() itself\n");
        return 0;
    }
    constexpr int64_t kChunk = 1 << 20, kChunks = (int64_t(1) << 32) / kChunk;
    double worst_r = 0, worst_c = 0;
    uint32_t arg_r = 0, arg_c = 0;
    bool zero_ok = true;
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
        std::vector<uint32_t> w(kChunk);
        std::vector<double> r(kChunk), c(kChunk);
        double wr = 0, wc = 0;
        uint32_t ar = 0, ac = 0;
        bool zok = true;
#pragma omp for schedule(dynamic)
        for (int64_t chunk = 0; chunk < kChunks; ++chunk) {
            for (int64_t i = 0; i < kChunk; ++i) w[size_t(i)] = uint32_t(chunk * kChunk + i);
            rd::approx_factors(w.data(), w.data(), r.data(), c.data(), kChunk);
            for (size_t i = 0; i < size_t(kChunk); ++i) {
                double rs = rd::radius(w[i]), cs = rd::cos_angle(w[i]);
                if (rs == 0) {  // w = 2^32 - 1: both must be the same zero
                    zok = zok && std::bit_cast<uint64_t>(rs) == std::bit_cast<uint64_t>(r[i]);
                } else if (double e = std::abs(r[i] - rs) / rs; e > wr) {
                    wr = e, ar = w[i];
                }
                if (double e = std::abs(c[i] - cs) / std::abs(cs); e > wc) wc = e, ac = w[i];
            }
        }
#pragma omp critical
        {
            if (wr > worst_r) worst_r = wr, arg_r = ar;
            if (wc > worst_c) worst_c = wc, arg_c = ac;
            zero_ok = zero_ok && zok;
        }
    }
    std::printf("all 2^32 inputs in %.1f s\n", seconds_since(t0));
    std::printf("radius: max rel diff %.3g (2^%.2f) at w0 = %u; zero at w0 = 2^32-1: %s\n", worst_r,
                std::log2(worst_r), arg_r, zero_ok ? "same" : "DIFFERENT");
    std::printf("cos:    max rel diff %.3g (2^%.2f) at w1 = %u\n", worst_c, std::log2(worst_c),
                arg_c);
    bool ok = zero_ok && worst_r <= rd::kMaxRelError && worst_c <= rd::kMaxRelError;
    std::printf("bound kMaxRelError = 2^%.0f: %s\n", std::log2(rd::kMaxRelError),
                ok ? "holds, normal_fill is exact" : "VIOLATED");
    return ok ? 0 : 1;
}

// The three calls one adapter of one micro-batch makes: x̃ in forward, x̃ again for d_A, and the
// masked input-gradient term accumulated into a bf16 d_x from an f32 product.
int bench_dropout(const std::vector<int>& threads) {
    const int64_t N = 256, W = 5632, reps = 20;
    auto be = ete::make_cpu_backend();
    ete::DeviceBuffer x(*be, size_t(N * W) * 2), y(*be, size_t(N * W) * 2),
        t(*be, size_t(N * W) * 4);
    be->fill({x.data(), ete::DType::BF16, N, W}, 0.5f);
    be->fill({t.data(), ete::DType::F32, N, W}, 0.25f);
    ete::DropoutMask m;
    m.seed = 1337;
    m.stream = 7;
    m.row_stride = 2 * uint64_t(W);
    m.p = 0.05f;
    for (int th : threads) {
        omp_set_num_threads(th);
        for (bool acc : {false, true}) {
            ete::CMat in = acc ? ete::CMat{t.data(), ete::DType::F32, N, W}
                               : ete::CMat{x.data(), ete::DType::BF16, N, W};
            be->dropout({y.data(), ete::DType::BF16, N, W}, in, m, acc);  // warm
            auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) {
                m.stream = uint64_t(r);
                be->dropout({y.data(), ete::DType::BF16, N, W}, in, m, acc);
            }
            const double ns = seconds_since(t0) * 1e9 / double(reps * N * W);
            std::printf("dropout %s, %d thread%s: %.3f ns per element\n",
                        acc ? "f32 -> bf16 +=" : "bf16 -> bf16", th, th == 1 ? "" : "s", ns);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n = 124'000'000;
    std::vector<int> threads = {1, 2};
    bool dropout = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--verify-exhaustive") return verify_exhaustive();
        if (a == "--dropout") dropout = true;
        if (a == "--n" && i + 1 < argc) {
            n = std::atoll(argv[++i]);
        } else if (a == "--threads" && i + 1 < argc) {
            threads.clear();
            for (const char* p = argv[++i]; *p;) {
                char* end;
                threads.push_back(int(std::strtol(p, &end, 10)));
                p = *end ? end + 1 : end;
            }
        } else if (a != "--dropout") {
            std::fprintf(stderr,
                         "usage: %s [--n N] [--threads 1,2] [--dropout] | --verify-exhaustive\n",
                         argv[0]);
            return 2;
        }
    }
    return dropout ? bench_dropout(threads) : bench(n, threads);
}
