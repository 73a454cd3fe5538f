// ete/backend/cpu/norm.cpp — RMSNorm and LayerNorm forward/backward on the CPU.
//
// Rows are independent: OpenMP static parallel-for over rows, `#pragma omp simd` over C. Row
// statistics accumulate in double (as ete::ref; free here, these kernels are memory-bound).
//
// The weight/bias gradients are column sums over all rows. To keep them deterministic AND
// independent of the thread count, rows are cut into fixed blocks of kRowBlock: each block writes
// its own partial sums (nblk, C), then the partials are added in block order, in double. The
// backward ACCUMULATES into d_x, d_w and d_b (backend.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/row_quantizer.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster
constexpr int kRowBlock = 32;              // rows per partial-sum block (fixed: determinism)
constexpr int kColBlock = 64;

int row_blocks(int N) {
    return (N + kRowBlock - 1) / kRowBlock;
}

// dst(C) += sum over blocks of part(nblk, C), added in block order in double. Cache-resident and
// small next to the row pass: only worth a parallel region when very large.
void add_partials(float* dst, const std::vector<float>& part, int nblk, int C) {
    int ncol = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (int64_t(nblk) * C >= 16 * kParallelMin)
    for (int cb = 0; cb < ncol; ++cb) {
        int c0 = cb * kColBlock, len = std::min(kColBlock, C - c0);
        double acc[kColBlock] = {};
        for (int blk = 0; blk < nblk; ++blk) {
            const float* p = part.data() + int64_t(blk) * C + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) acc[j] += p[j];
        }
        for (int j = 0; j < len; ++j) dst[c0 + j] += float(acc[j]);
    }
}

// A row's 1 / rms (x read as float whatever its dtype, summed in double).
template <typename X>
[[gnu::always_inline]] inline float rms_rstd(const X* xr, int64_t C, float eps) {
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) {
        const double v = load(xr[c]);
        ss += v * v;
    }
    return float(1.0 / std::sqrt(ss / double(C) + eps));
}

// Row statistics read x as float whatever its dtype; outputs round once.
template <typename O, typename X>
void rmsnorm_fwd(O* out, int64_t ldo, float* rstd, const X* x, int64_t ldx, const float* w,
                 int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const X* xr = x + n * ldx;  // (C)
        O* o = out + n * ldo;
        const float r = rms_rstd(xr, C, eps);
        rstd[n] = r;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(o[c], load(xr[c]) * r * w[c]);
    }
}

// quantize_s8 of rmsnorm_fwd's F32 output (rmsnorm_quantize), one pass.
template <typename Q, typename X>
void rmsnorm_quantize_rows(Q* q, int64_t ldq, const X* x, int64_t ldx, const float* w, int64_t N,
                           int64_t C, float eps, const float* scale, const float* zero,
                           bool per_tensor, const QuantGrid& g) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const X* xr = x + n * ldx;
        Q* o = q + n * ldq;
        const float r = rms_rstd(xr, C, eps);
        const RowQuantizer<Q> quant(scale, zero, per_tensor, n, g);
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) o[c] = quant(load(xr[c]) * r * w[c]);
    }
}

template <typename G, typename X>
void rmsnorm_bwd(float* d_x, int64_t ldd, float* d_w, const G* d_out, int64_t ldg, const X* x,
                 int64_t ldx, const float* w, const float* rstd, int64_t N, int64_t C) {
    // d_x += r * (dy * w - xhat * mean(dy * w * xhat)),  d_w += sum over rows of dy * xhat.
    int nblk = row_blocks(int(N));
    std::vector<float> part_w(size_t(nblk) * C, 0.0f);  // (nblk, C)
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int blk = 0; blk < nblk; ++blk) {
        float* pw = part_w.data() + int64_t(blk) * C;
        for (int64_t n = blk * kRowBlock; n < std::min<int64_t>(N, (blk + 1) * kRowBlock); ++n) {
            const X* xr = x + n * ldx;
            const G* dy = d_out + n * ldg;
            float* dx = d_x + n * ldd;
            float r = rstd[n];
            double dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t c = 0; c < C; ++c) dot += double(load(dy[c])) * w[c] * load(xr[c]);
            float k = float(dot * r / double(C));
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
                const float dyc = load(dy[c]);
                float xhat = load(xr[c]) * r;
                pw[c] += dyc * xhat;
                dx[c] += r * (dyc * w[c] - xhat * k);
            }
        }
    }
    add_partials(d_w, part_w, nblk, int(C));
}

template <typename O, typename X>
void layernorm_fwd(O* out, int64_t ldo, float* mean, float* rstd, const X* x, int64_t ldx,
                   const float* w, const float* b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const X* xr = x + n * ldx;  // (C)
        O* o = out + n * ldo;
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < C; ++c) sum += load(xr[c]);
        double mu_d = sum / double(C), var = 0;  // two-pass: no E[x^2] - E[x]^2 cancellation
#pragma omp simd reduction(+ : var)
        for (int64_t c = 0; c < C; ++c) var += (load(xr[c]) - mu_d) * (load(xr[c]) - mu_d);
        float mu = float(mu_d), r = float(1.0 / std::sqrt(var / double(C) + eps));
        mean[n] = mu;
        rstd[n] = r;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(o[c], (load(xr[c]) - mu) * r * w[c] + b[c]);
    }
}

template <typename G, typename X>
void layernorm_bwd(float* d_x, int64_t ldd, float* d_w, float* d_b, const G* d_out, int64_t ldg,
                   const X* x, int64_t ldx, const float* w, const float* mean, const float* rstd,
                   int64_t N, int64_t C) {
    // g = dy * w:  d_x += r * (g - mean(g) - xhat * mean(g * xhat)),  d_w += dy * xhat,  d_b += dy.
    int nblk = row_blocks(int(N));
    std::vector<float> part_w(size_t(nblk) * C, 0.0f), part_b(size_t(nblk) * C, 0.0f);
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int blk = 0; blk < nblk; ++blk) {
        float* pw = part_w.data() + int64_t(blk) * C;
        float* pb = part_b.data() + int64_t(blk) * C;
        for (int64_t n = blk * kRowBlock; n < std::min<int64_t>(N, (blk + 1) * kRowBlock); ++n) {
            const X* xr = x + n * ldx;
            const G* dy = d_out + n * ldg;
            float* dx = d_x + n * ldd;
            float mu = mean[n], r = rstd[n];
            double sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
            for (int64_t c = 0; c < C; ++c) {
                float g = load(dy[c]) * w[c];
                sum_g += g;
                sum_gx += double(g) * ((load(xr[c]) - mu) * r);
            }
            float mg = float(sum_g / double(C)), mgx = float(sum_gx / double(C));
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
                const float dyc = load(dy[c]);
                float xhat = (load(xr[c]) - mu) * r;
                pw[c] += dyc * xhat;
                pb[c] += dyc;
                dx[c] += r * (dyc * w[c] - mg - xhat * mgx);
            }
        }
    }
    add_partials(d_w, part_w, nblk, int(C));
    add_partials(d_b, part_b, nblk, int(C));
}

// A frozen norm has no weight gradient: the kernels then accumulate into a sink of C floats.
struct GradSink {
    std::vector<float> buf;
    Vec operator()(Vec g, int64_t C) {
        if (!g.empty()) return g;
        buf.assign(size_t(C), 0.0f);
        return {buf.data(), DType::F32, C};
    }
};

// Shapes and dtypes every norm op shares: x and out (N, C), stats (N) and weights (C) in F32.
void check_norm(const CMat& x, const CMat& other, const CVec& w, std::initializer_list<CVec> stats,
                const char* op) {
    ETE_CHECK(other.rows == x.rows && other.cols == x.cols && w.n == x.cols,
              "{}: x ({}, {}), other ({}, {}) and weight ({}) do not match", op, x.rows, x.cols,
              other.rows, other.cols, w.n);
    ETE_CHECK(w.dtype == DType::F32, "{}: the weight must be F32", op);
    for (const CVec& s : stats)
        ETE_CHECK(s.n == x.rows && s.dtype == DType::F32, "{}: row statistics must be {} F32", op,
                  x.rows);
}

}  // namespace

void CpuBackend::rmsnorm_forward(Mat out, Vec rstd, CMat x, CVec w, float eps) {
    Scope h(*this, "rmsnorm_forward");
    check_norm(x, out, w, {rstd}, "rmsnorm_forward");
    out = h(out);
    rstd = h(rstd);
    x = h(x);
    w = h(w);
    with_float_type(out.dtype, "rmsnorm_forward", [&](auto o) {
        with_float_type(x.dtype, "rmsnorm_forward", [&](auto xt) {
            using O = decltype(o);
            using X = decltype(xt);
            rmsnorm_fwd(elems<O>(out), out.ld, elems<float>(rstd), elems<X>(x), x.ld,
                        elems<float>(w), x.rows, x.cols, eps);
        });
    });
}

void CpuBackend::rmsnorm_quantize(Mat q, CMat x, CVec w, float eps, CVec scale, CVec zero,
                                  const QuantGrid& g) {
    Scope h(*this, "rmsnorm_quantize");
    check_quantize_s8_args(q, x, scale, zero, g);
    ETE_CHECK(w.n == x.cols && w.dtype == DType::F32, "rmsnorm_quantize: w must be F32 of {}",
              x.cols);
    q = h(q);
    x = h(x);
    w = h(w);
    const float* s = elems<float>(h(scale));
    const float* z = elems<float>(h(zero));
    with_float_type(x.dtype, "rmsnorm_quantize", [&](auto xt) {
        with_s8_type(q.dtype, "rmsnorm_quantize", [&](auto tq) {
            using X = decltype(xt);
            using Q = decltype(tq);
            rmsnorm_quantize_rows(static_cast<Q*>(q.data), q.ld, elems<X>(x), x.ld, elems<float>(w),
                                  x.rows, x.cols, eps, s, z, scale.n == 1, g);
        });
    });
}

void CpuBackend::rmsnorm_backward(Mat d_x, Vec d_w, CMat d_out, CMat x, CVec w, CVec rstd) {
    Scope h(*this, "rmsnorm_backward");
    GradSink sink;
    d_w = h(d_w);
    d_w = sink(d_w, x.cols);
    check_norm(x, d_out, w, {rstd}, "rmsnorm_backward");
    check_norm(x, d_x, d_w, {}, "rmsnorm_backward");
    ETE_CHECK(d_x.dtype == DType::F32, "rmsnorm_backward: d_x (residual stream) must be F32");
    d_x = h(d_x);
    d_out = h(d_out);
    x = h(x);
    w = h(w);
    rstd = h(rstd);
    with_float_type(d_out.dtype, "rmsnorm_backward", [&](auto g) {
        with_float_type(x.dtype, "rmsnorm_backward", [&](auto xt) {
            using G = decltype(g);
            using X = decltype(xt);
            rmsnorm_bwd(elems<float>(d_x), d_x.ld, elems<float>(d_w), elems<G>(d_out), d_out.ld,
                        elems<X>(x), x.ld, elems<float>(w), elems<float>(rstd), x.rows, x.cols);
        });
    });
}

void CpuBackend::layernorm_forward(Mat out, Vec mean, Vec rstd, CMat x, CVec w, CVec b, float eps) {
    Scope h(*this, "layernorm_forward");
    check_norm(x, out, w, {mean, rstd}, "layernorm_forward");
    check_norm(x, out, b, {}, "layernorm_forward");
    out = h(out);
    mean = h(mean);
    rstd = h(rstd);
    x = h(x);
    w = h(w);
    b = h(b);
    with_float_type(out.dtype, "layernorm_forward", [&](auto o) {
        with_float_type(x.dtype, "layernorm_forward", [&](auto xt) {
            using O = decltype(o);
            using X = decltype(xt);
            layernorm_fwd(elems<O>(out), out.ld, elems<float>(mean), elems<float>(rstd),
                          elems<X>(x), x.ld, elems<float>(w), elems<float>(b), x.rows, x.cols, eps);
        });
    });
}

void CpuBackend::layernorm_backward(Mat d_x, Vec d_w, Vec d_b, CMat d_out, CMat x, CVec w,
                                    CVec mean, CVec rstd) {
    Scope h(*this, "layernorm_backward");
    GradSink sink_w, sink_b;
    d_w = sink_w(h(d_w), x.cols);
    d_b = sink_b(h(d_b), x.cols);
    check_norm(x, d_out, w, {mean, rstd}, "layernorm_backward");
    check_norm(x, d_x, d_w, {}, "layernorm_backward");
    check_norm(x, d_x, d_b, {}, "layernorm_backward");
    ETE_CHECK(d_x.dtype == DType::F32, "layernorm_backward: d_x (residual stream) must be F32");
    d_x = h(d_x);
    d_out = h(d_out);
    x = h(x);
    w = h(w);
    mean = h(mean);
    rstd = h(rstd);
    with_float_type(d_out.dtype, "layernorm_backward", [&](auto g) {
        with_float_type(x.dtype, "layernorm_backward", [&](auto xt) {
            using G = decltype(g);
            using X = decltype(xt);
            layernorm_bwd(elems<float>(d_x), d_x.ld, elems<float>(d_w), elems<float>(d_b),
                          elems<G>(d_out), d_out.ld, elems<X>(x), x.ld, elems<float>(w),
                          elems<float>(mean), elems<float>(rstd), x.rows, x.cols);
        });
    });
}

}  // namespace ete::cpu
