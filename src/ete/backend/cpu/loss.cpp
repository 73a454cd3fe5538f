// ete/backend/cpu/loss.cpp — fused softmax cross-entropy (forward, and forward+backward in place).
//
// One row of logits (V) per task, OpenMP static over rows. A row is read from memory once: it is
// walked in L1-sized chunks, and for each chunk the running max M is raised to the chunk max
// (rescaling the running sum by e^(M_old - M_new)), then e^(z - M) is summed — online softmax
// with one exp per logit. The forward+backward variant also stores e^(z - M_chunk) in place and
// remembers each chunk's M; a second, cache-resident pass then multiplies every chunk by
// d_scale * e^(M_chunk - M_final) / sum, so the gradient costs no second exp.
//
// Numerics: exp_fast is ~1.3 ulp; chunk sums are float (<= a few thousand terms <= 1), the row
// sum, max correction and log are double. Loss relative error ~1e-6, gradient ~3 ulp + rounding
// of the target's p - 1.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/simd_math.h"
#include "ete/core/error.h"

namespace ete::cpu {
namespace {

constexpr int kMaxChunks = 64;  // chunk maxima live on the stack
constexpr int kMinChunk = 512;  // 2 KiB of logits: stays in L1 between the max and exp passes
constexpr int64_t kParallelMin = 1 << 14;

int chunk_len(int V) {
    int per = (V + kMaxChunks - 1) / kMaxChunks;
    return std::max(kMinChunk, (per + 15) / 16 * 16);
}

struct RowStats {
    float max;   // final running max M
    double sum;  // sum of e^(z - M)
};

// Online softmax statistics of one row z(V). With a mutable z (Elem = float), also overwrites z
// with e^(z - M_chunk) and writes each chunk's M_chunk into chunk_max.
template <typename Elem>
RowStats row_softmax_stats(Elem* z, int V, int len, float* chunk_max) {
    constexpr bool kStore = !std::is_const_v<Elem>;
    float m = -INFINITY;
    double sum = 0;
    for (int c0 = 0, k = 0; c0 < V; c0 += len, ++k) {
        int n = std::min(len, V - c0);
        Elem* zc = z + c0;
        float cm = -INFINITY;  // written as a select: GCC 12 does not vectorise std::max here
#pragma omp simd reduction(max : cm)
        for (int i = 0; i < n; ++i) cm = zc[i] > cm ? zc[i] : cm;
        if (cm > m) {
            sum *= std::exp(double(m) - cm);  // 0 on the first chunk (m = -inf)
            m = cm;
        }
        float cs = 0;
#pragma omp simd reduction(+ : cs)
        for (int i = 0; i < n; ++i) {
            float e = exp_fast(zc[i] - m);
            if constexpr (kStore) zc[i] = e;
            cs += e;
        }
        sum += cs;
        if constexpr (kStore) chunk_max[k] = m;
    }
    return {m, sum};
}

void check_targets(const char* op, const int32_t* targets, int N, int V) {
    for (int n = 0; n < N; ++n)
        ETE_CHECK(targets[n] == kIgnoreIndex || (targets[n] >= 0 && targets[n] < V),
                  "{}: target {} of row {} is outside [0, {}) and not the ignore index {}", op,
                  targets[n], n, V, kIgnoreIndex);
}

// One row of the fused forward+backward: z (V) is overwritten by e^(z - M_chunk) and then
// scaled into the gradient; when dz is another buffer (16-bit, for the head's backward GEMMs)
// the scaled values go there instead and z keeps the exponentials.
template <typename G>
float ce_row_fused(float* z, G* dz, int V, int len, int t, float d_scale) {
    float z_t = z[t];
    float chunk_max[kMaxChunks];
    RowStats st = row_softmax_stats(z, V, len, chunk_max);
    const float loss = float(double(st.max) + std::log(st.sum) - z_t);
    for (int c0 = 0, k = 0; c0 < V; c0 += len, ++k) {
        int cnt = std::min(len, V - c0);
        float f = float(d_scale * std::exp(double(chunk_max[k]) - st.max) / st.sum);
        float* zc = z + c0;
        G* dc = dz + c0;
#pragma omp simd
        for (int i = 0; i < cnt; ++i) store(dc[i], zc[i] * f);
    }
    if constexpr (std::is_same_v<G, float>) {
        dz[t] -= d_scale;
    } else {
        // Subtract before rounding: the target's p - 1 would otherwise lose its low bits twice.
        float e_t = z[t] * float(d_scale * std::exp(double(chunk_max[t / len]) - st.max) / st.sum);
        store(dz[t], e_t - d_scale);
    }
    return loss;
}

template <typename G>
void ce_fused(float* logits, int64_t ldz, float* losses, const int32_t* targets, G* d, int64_t ldd,
              int N, int V, float d_scale) {
    int len = chunk_len(V);
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        float* z = logits + int64_t(n) * ldz;  // (V)
        G* dz = d + int64_t(n) * ldd;
        int t = targets[n];
        if (t == kIgnoreIndex) {
            losses[n] = 0.0f;
            for (int i = 0; i < V; ++i) store(dz[i], 0.0f);
            continue;
        }
        losses[n] = ce_row_fused(z, dz, V, len, t, d_scale);
    }
}

// The shapes every cross-entropy op shares: logits (N, V) F32, per-row vectors (N), targets I32.
void check_ce(const char* op, const CMat& logits, const CVec& targets,
              std::initializer_list<CVec> rows) {
    ETE_CHECK(logits.dtype == DType::F32, "{}: logits must be F32, not {}", op,
              dtype_name(logits.dtype));
    ETE_CHECK(targets.dtype == DType::I32 && targets.n == logits.rows,
              "{}: targets must be {} I32 values, got {}", op, logits.rows, targets.n);
    for (const CVec& r : rows)
        ETE_CHECK(r.dtype == DType::F32 && r.n == logits.rows, "{}: row vectors must be {} F32", op,
                  logits.rows);
}

}  // namespace

void CpuBackend::cross_entropy_forward_backward(Mat logits, Vec losses, CVec targets, float d_scale,
                                                Mat d_logits) {
    const char* op = "cross_entropy_forward_backward";
    Scope h(*this, "cross_entropy");
    check_ce(op, logits, targets, {losses});
    ETE_CHECK(d_logits.rows == logits.rows && d_logits.cols == logits.cols,
              "{}: d_logits ({}, {}) for logits ({}, {})", op, d_logits.rows, d_logits.cols,
              logits.rows, logits.cols);
    ETE_CHECK(d_logits.data != logits.data || d_logits.dtype == DType::F32,
              "{}: an in-place gradient must be F32", op);
    logits = h(logits);
    losses = h(losses);
    targets = h(targets);
    d_logits = h(d_logits);
    const int N = int(logits.rows), V = int(logits.cols);
    const int32_t* t = elems<int32_t>(targets);
    check_targets(op, t, N, V);
    with_float_type(d_logits.dtype, op, [&](auto g) {
        using G = decltype(g);
        ce_fused(elems<float>(logits), logits.ld, elems<float>(losses), t, elems<G>(d_logits),
                 d_logits.ld, N, V, d_scale);
    });
}

namespace {

void check_softcap(const char* op, const CMat& x, const CMat& d) {
    ETE_CHECK(x.dtype == DType::F32 &&
                  (d.empty() || (d.dtype == DType::F32 && d.rows == x.rows && d.cols == x.cols)),
              "{}: ({}, {}) {} and ({}, {}) {}: expected F32 of one shape", op, x.rows, x.cols,
              dtype_name(x.dtype), d.rows, d.cols, dtype_name(d.dtype));
}

}  // namespace

void CpuBackend::softcap_forward(Mat x, Mat d_cap, float cap) {
    const char* op = "softcap_forward";
    Scope h(*this, op);
    check_softcap(op, x, d_cap);
    ETE_CHECK(cap > 0 && std::isfinite(cap), "{}: cap {}: expected a finite number > 0", op, cap);
    x = h(x);
    d_cap = d_cap.empty() ? d_cap : h(d_cap);
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMin)
    for (int64_t r = 0; r < x.rows; ++r) {
        float* row = elems<float>(x) + r * x.ld;
        float* d = d_cap.empty() ? nullptr : elems<float>(d_cap) + r * d_cap.ld;
        softcap_row(row, d, int(x.cols), cap);
    }
}

void CpuBackend::softcap_backward(Mat d_x, CMat d_cap) {
    const char* op = "softcap_backward";
    Scope h(*this, op);
    ETE_CHECK(!d_cap.empty(), "{}: d_cap is empty", op);
    check_softcap(op, d_x, d_cap);
    d_x = h(d_x);
    d_cap = h(d_cap);
#pragma omp parallel for schedule(static) if (d_x.numel() >= kParallelMin)
    for (int64_t r = 0; r < d_x.rows; ++r) {
        float* d = elems<float>(d_x) + r * d_x.ld;
        const float* f = elems<float>(d_cap) + r * d_cap.ld;
#pragma omp simd
        for (int64_t c = 0; c < d_x.cols; ++c) d[c] *= f[c];
    }
}

void CpuBackend::cross_entropy_forward(Vec losses, CMat logits, CVec targets) {
    const char* op = "cross_entropy_forward";
    Scope h(*this, "cross_entropy");
    check_ce(op, logits, targets, {losses});
    losses = h(losses);
    logits = h(logits);
    targets = h(targets);
    const int N = int(logits.rows), V = int(logits.cols);
    const int32_t* tg = elems<int32_t>(targets);
    check_targets(op, tg, N, V);
    float* out = elems<float>(losses);
    const float* lz = elems<float>(logits);
    int len = chunk_len(V);
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        int t = tg[n];
        if (t == kIgnoreIndex) {
            out[n] = 0.0f;
            continue;
        }
        const float* z = lz + int64_t(n) * logits.ld;  // (V), read only
        RowStats st = row_softmax_stats(z, V, len, nullptr);
        out[n] = float(double(st.max) + std::log(st.sum) - z[t]);
    }
}

void CpuBackend::cross_entropy_stats(Vec lse, Vec target_logit, CMat logits, CVec targets) {
    const char* op = "cross_entropy_stats";
    Scope h(*this, "cross_entropy");
    check_ce(op, logits, targets, {lse, target_logit});
    lse = h(lse);
    target_logit = h(target_logit);
    logits = h(logits);
    targets = h(targets);
    const int N = int(logits.rows), V = int(logits.cols);
    const int32_t* tg = elems<int32_t>(targets);
    const float* lz = elems<float>(logits);
    float *l = elems<float>(lse), *zt = elems<float>(target_logit);
    int len = chunk_len(std::max(V, 1));
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        const float* z = lz + int64_t(n) * logits.ld;
        const int t = tg[n];
        zt[n] = t >= 0 && t < V ? z[t] : 0.0f;
        if (V == 0) {
            l[n] = -INFINITY;
            continue;
        }
        RowStats st = row_softmax_stats(z, V, len, nullptr);
        l[n] = float(double(st.max) + std::log(st.sum));
    }
}

void CpuBackend::cross_entropy_backward(Mat d_logits, CMat logits, CVec lse, CVec targets,
                                        float d_scale) {
    const char* op = "cross_entropy_backward";
    Scope h(*this, "cross_entropy");
    check_ce(op, logits, targets, {lse});
    ETE_CHECK(d_logits.rows == logits.rows && d_logits.cols == logits.cols,
              "{}: d_logits ({}, {}) for logits ({}, {})", op, d_logits.rows, d_logits.cols,
              logits.rows, logits.cols);
    d_logits = h(d_logits);
    logits = h(logits);
    lse = h(lse);
    targets = h(targets);
    const int N = int(logits.rows), V = int(logits.cols);
    const int32_t* tg = elems<int32_t>(targets);
    const float *lz = elems<float>(logits), *l = elems<float>(lse);
    with_float_type(d_logits.dtype, op, [&](auto g) {
        using G = decltype(g);
        G* d = elems<G>(d_logits);
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
        for (int n = 0; n < N; ++n) {
            const float* z = lz + int64_t(n) * logits.ld;
            G* dz = d + int64_t(n) * d_logits.ld;
            const int t = tg[n];
            if (t == kIgnoreIndex) {
                for (int j = 0; j < V; ++j) store(dz[j], 0.0f);
                continue;
            }
            const float m = l[n];
            const float z_t = t >= 0 && t < V ? z[t] : 0.0f;  // read first: d may alias z
#pragma omp simd
            for (int j = 0; j < V; ++j) store(dz[j], d_scale * exp_fast(z[j] - m));
            if (t >= 0 && t < V) store(dz[t], d_scale * (exp_fast(z_t - m) - 1.0f));
        }
    });
}

}  // namespace ete::cpu
