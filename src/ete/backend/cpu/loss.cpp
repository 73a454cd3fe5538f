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

#include "ete/backend/cpu/cpu_kernels.h"
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

}  // namespace

void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                    int V, float d_scale) {
    check_targets("cross_entropy_forward_backward", targets, N, V);
    int len = chunk_len(V);
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        float* z = logits + int64_t(n) * V;  // (V)
        int t = targets[n];
        if (t == kIgnoreIndex) {
            losses[n] = 0.0f;
            std::fill(z, z + V, 0.0f);
            continue;
        }
        float z_t = z[t];
        float chunk_max[kMaxChunks];
        RowStats st = row_softmax_stats(z, V, len, chunk_max);
        losses[n] = float(double(st.max) + std::log(st.sum) - z_t);
        for (int c0 = 0, k = 0; c0 < V; c0 += len, ++k) {
            int cnt = std::min(len, V - c0);
            float f = float(d_scale * std::exp(double(chunk_max[k]) - st.max) / st.sum);
            float* zc = z + c0;
#pragma omp simd
            for (int i = 0; i < cnt; ++i) zc[i] *= f;
        }
        z[t] -= d_scale;
    }
}

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                           int V) {
    check_targets("cross_entropy_forward", targets, N, V);
    int len = chunk_len(V);
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
    for (int n = 0; n < N; ++n) {
        int t = targets[n];
        if (t == kIgnoreIndex) {
            losses[n] = 0.0f;
            continue;
        }
        const float* z = logits + int64_t(n) * V;  // (V), read only
        RowStats st = row_softmax_stats(z, V, len, nullptr);
        losses[n] = float(double(st.max) + std::log(st.sum) - z[t]);
    }
}

}  // namespace ete::cpu
