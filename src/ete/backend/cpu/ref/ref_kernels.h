// ete/backend/cpu/ref/ref_kernels.h — scalar reference kernels, the oracle for every backend.
//
// Plain loops, templated on the element type so the finite-difference gradient tests can run
// them in double. Semantics (shapes, += vs =) are exactly those documented in backend.h.
// Accumulations use double regardless of T so the oracle is more accurate than what it checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ete/backend/backend.h"

namespace ete::ref {

template <typename T>
void gemm(bool ta, bool tb, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
          T beta, T* C, int ldc) {
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double acc = 0;
            for (int k = 0; k < K; ++k) {
                double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
                double b = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
                acc += a * b;
            }
            T& c = C[size_t(i) * ldc + j];
            c = T(alpha * acc + (beta == T(0) ? 0.0 : double(beta) * c));
        }
    }
}

template <typename T>
void bias_forward(T* y, const T* b, int N, int C, int ldy) {
    for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c) y[size_t(n) * ldy + c] += b[c];
}

template <typename T>
void bias_backward(T* d_b, const T* d_y, int N, int C, int ldy) {
    for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int n = 0; n < N; ++n) acc += d_y[size_t(n) * ldy + c];
        d_b[c] += T(acc);
    }
}

// Table rows hold ids [first, first + V); other ids give zero rows and no gradient.
template <typename T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int N, int C, int64_t first = 0,
                       int64_t V = INT64_MAX) {
    for (int n = 0; n < N; ++n) {
        const int64_t row = int64_t(ids[n]) - first;
        const bool mine = row >= 0 && row < V;
        for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = mine ? table[row * C + c] : T(0);
    }
}

template <typename T>
void embedding_backward(T* d_table, const T* d_out, const int32_t* ids, int N, int C,
                        int64_t first = 0, int64_t V = INT64_MAX) {
    for (int n = 0; n < N; ++n) {
        const int64_t row = int64_t(ids[n]) - first;
        if (row < 0 || row >= V) continue;
        for (int c = 0; c < C; ++c) d_table[row * C + c] += d_out[size_t(n) * C + c];
    }
}

// Position of (b, t) in its document: t - doc_start[b*T + t], or t without packing.
inline int doc_position(const int32_t* doc_start, int b, int t, int T_) {
    return doc_start ? t - doc_start[size_t(b) * T_ + t] : t;
}

// The first position of the document holding (b, t): d.doc_start is a host view here.
inline int doc_begin(const AttnDims& d, int b, int t) {
    const auto* s = static_cast<const int32_t*>(d.doc_start.data);
    return s ? s[size_t(b) * d.T + t] : 0;
}

// The first key query (b, t) sees: its document's start, or the window's (backend.h).
inline int key_begin(const AttnDims& d, int b, int t) {
    return d.first_key(doc_begin(d, b, t), t);
}

template <typename T>
void pos_embedding_forward(T* out, const T* wpe, const int32_t* doc_start, int B, int T_, int C) {
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T_; ++t) {
            size_t p = size_t(doc_position(doc_start, b, t, T_));
            for (int c = 0; c < C; ++c) out[(size_t(b) * T_ + t) * C + c] += wpe[p * C + c];
        }
}

// Each position's sum runs over the rows (b, t) that use it in row-major order, in double.
template <typename T>
void pos_embedding_backward(T* d_wpe, const T* d_out, const int32_t* doc_start, int B, int T_,
                            int C) {
    std::vector<double> acc(size_t(T_) * C, 0.0);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T_; ++t) {
            size_t p = size_t(doc_position(doc_start, b, t, T_));
            for (int c = 0; c < C; ++c) acc[p * C + c] += d_out[(size_t(b) * T_ + t) * C + c];
        }
    for (size_t i = 0; i < acc.size(); ++i) d_wpe[i] += T(acc[i]);
}

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, float eps) {
    for (int n = 0; n < N; ++n) {
        const T* xr = x + size_t(n) * C;
        double ss = 0;
        for (int c = 0; c < C; ++c) ss += double(xr[c]) * xr[c];
        double r = 1.0 / std::sqrt(ss / C + eps);
        rstd[n] = T(r);
        for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = T(xr[c] * r * w[c]);
    }
}

template <typename T>
void rmsnorm_backward(T* d_x, T* d_w, const T* d_out, const T* x, const T* w, const T* rstd, int N,
                      int C) {
    for (int n = 0; n < N; ++n) {
        const T* xr = x + size_t(n) * C;
        const T* dy = d_out + size_t(n) * C;
        double r = rstd[n], dot = 0;
        for (int c = 0; c < C; ++c) dot += double(dy[c]) * w[c] * xr[c] * r;
        dot /= C;
        for (int c = 0; c < C; ++c) {
            double xhat = xr[c] * r;
            d_w[c] += T(dy[c] * xhat);
            d_x[size_t(n) * C + c] += T(r * (dy[c] * w[c] - xhat * dot));
        }
    }
}

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C,
                       float eps) {
    for (int n = 0; n < N; ++n) {
        const T* xr = x + size_t(n) * C;
        double mu = 0, var = 0;
        for (int c = 0; c < C; ++c) mu += xr[c];
        mu /= C;
        for (int c = 0; c < C; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        double r = 1.0 / std::sqrt(var / C + eps);
        mean[n] = T(mu);
        rstd[n] = T(r);
        for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = T((xr[c] - mu) * r * w[c] + b[c]);
    }
}

template <typename T>
void layernorm_backward(T* d_x, T* d_w, T* d_b, const T* d_out, const T* x, const T* w,
                        const T* mean, const T* rstd, int N, int C) {
    for (int n = 0; n < N; ++n) {
        const T* xr = x + size_t(n) * C;
        const T* dy = d_out + size_t(n) * C;
        double mu = mean[n], r = rstd[n], sum_g = 0, sum_gx = 0;
        for (int c = 0; c < C; ++c) {
            double g = double(dy[c]) * w[c];
            sum_g += g;
            sum_gx += g * (xr[c] - mu) * r;
        }
        sum_g /= C;
        sum_gx /= C;
        for (int c = 0; c < C; ++c) {
            double xhat = (xr[c] - mu) * r;
            d_b[c] += dy[c];
            d_w[c] += T(dy[c] * xhat);
            d_x[size_t(n) * C + c] += T(r * (dy[c] * w[c] - sum_g - xhat * sum_gx));
        }
    }
}

// Rotates the first 2·half dims of the q and k heads by the angle of position t - s (tables
// (T, half)); sign = +1 forward, -1 the transpose (backward).
template <typename T>
void rope_apply(T* qkv, const T* cos, const T* sin, int half, AttnDims d, int sign) {
    for (int b = 0; b < d.B; ++b)
        for (int t = 0; t < d.T; ++t) {
            T* row = qkv + (size_t(b) * d.T + t) * d.qkv_stride();
            size_t p = size_t(t - doc_begin(d, b, t));
            for (int h = 0; h < d.H + d.KV; ++h) {
                T* v = row + size_t(h) * d.D;
                for (int j = 0; j < half; ++j) {
                    double c = cos[p * half + j], s = sign * sin[p * half + j];
                    double x0 = v[j], x1 = v[j + half];
                    v[j] = T(x0 * c - x1 * s);
                    v[j + half] = T(x1 * c + x0 * s);
                }
            }
        }
}

// Query i sees keys j in [s, i], s = key_begin(d, b, i) (0 without packing or window).
template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, AttnDims d, float scale) {
    int S = d.qkv_stride(), group = d.H / d.KV;
    std::vector<double> s(size_t(d.T));
    for (int b = 0; b < d.B; ++b)
        for (int h = 0; h < d.H; ++h) {
            int kh = h / group;
            for (int i = 0; i < d.T; ++i) {
                const T* q = qkv + (size_t(b) * d.T + i) * S + size_t(h) * d.D;
                const int s0 = key_begin(d, b, i);
                double mx = -INFINITY;
                for (int j = s0; j <= i; ++j) {
                    const T* k = qkv + (size_t(b) * d.T + j) * S + size_t(d.H + kh) * d.D;
                    double acc = 0;
                    for (int e = 0; e < d.D; ++e) acc += double(q[e]) * k[e];
                    s[j] = acc * scale;
                    if (d.softcap > 0) s[j] = d.softcap * std::tanh(s[j] / d.softcap);
                    mx = std::max(mx, s[j]);
                }
                double sum = 0;
                for (int j = s0; j <= i; ++j) sum += std::exp(s[j] - mx);
                double l = mx + std::log(sum);
                lse[(size_t(b) * d.H + h) * d.T + i] = T(l);
                T* o = out + (size_t(b) * d.T + i) * d.H * d.D + size_t(h) * d.D;
                for (int e = 0; e < d.D; ++e) {
                    double acc = 0;
                    for (int j = s0; j <= i; ++j) {
                        const T* v =
                            qkv + (size_t(b) * d.T + j) * S + size_t(d.H + d.KV + kh) * d.D;
                        acc += std::exp(s[j] - l) * v[e];
                    }
                    o[e] = T(acc);
                }
            }
        }
}

template <typename T>
void attention_backward(T* d_qkv, const T* d_out, const T* out, const T* lse, const T* qkv,
                        AttnDims d, float scale) {
    int S = d.qkv_stride(), group = d.H / d.KV;
    std::fill(d_qkv, d_qkv + size_t(d.B) * d.T * S, T(0));
    for (int b = 0; b < d.B; ++b)
        for (int h = 0; h < d.H; ++h) {
            int kh = h / group;
            for (int i = 0; i < d.T; ++i) {
                size_t qrow = (size_t(b) * d.T + i) * S;
                const T* q = qkv + qrow + size_t(h) * d.D;
                const T* o = out + (size_t(b) * d.T + i) * d.H * d.D + size_t(h) * d.D;
                const T* dy = d_out + (size_t(b) * d.T + i) * d.H * d.D + size_t(h) * d.D;
                double l = lse[(size_t(b) * d.H + h) * d.T + i], di = 0;
                for (int e = 0; e < d.D; ++e) di += double(dy[e]) * o[e];
                for (int j = key_begin(d, b, i); j <= i; ++j) {
                    size_t krow = (size_t(b) * d.T + j) * S;
                    const T* k = qkv + krow + size_t(d.H + kh) * d.D;
                    const T* v = qkv + krow + size_t(d.H + d.KV + kh) * d.D;
                    double sc = 0, dp = 0;
                    for (int e = 0; e < d.D; ++e) {
                        sc += double(q[e]) * k[e];
                        dp += double(dy[e]) * v[e];
                    }
                    double p = std::exp(sc * scale - l);
                    double ds = p * (dp - di) * scale;
                    if (d.softcap > 0) {  // d(cap tanh(x / cap))/dx = 1 - tanh²
                        const double t = std::tanh(sc * scale / d.softcap);
                        p = std::exp(d.softcap * t - l);
                        ds = p * (dp - di) * (1.0 - t * t) * scale;
                    }
                    for (int e = 0; e < d.D; ++e) {
                        d_qkv[qrow + size_t(h) * d.D + e] += T(ds * k[e]);
                        d_qkv[krow + size_t(d.H + kh) * d.D + e] += T(ds * q[e]);
                        d_qkv[krow + size_t(d.H + d.KV + kh) * d.D + e] += T(p * dy[e]);
                    }
                }
            }
        }
}

template <typename T>
double sigmoid(T x) {
    return 1.0 / (1.0 + std::exp(-double(x)));
}

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F) {
    for (int n = 0; n < N; ++n)
        for (int f = 0; f < F; ++f) {
            double g = gu[size_t(n) * 2 * F + f], u = gu[size_t(n) * 2 * F + F + f];
            out[size_t(n) * F + f] = T(g * sigmoid(g) * u);
        }
}

template <typename T>
void swiglu_backward(T* d_gu, const T* d_out, const T* gu, int N, int F) {
    for (int n = 0; n < N; ++n)
        for (int f = 0; f < F; ++f) {
            double g = gu[size_t(n) * 2 * F + f], u = gu[size_t(n) * 2 * F + F + f];
            double dy = d_out[size_t(n) * F + f], sg = sigmoid(g);
            d_gu[size_t(n) * 2 * F + f] = T(dy * u * sg * (1.0 + g * (1.0 - sg)));
            d_gu[size_t(n) * 2 * F + F + f] = T(dy * g * sg);
        }
}

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2 / pi)

template <typename T>
void gelu_forward(T* out, const T* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        double v = x[i];
        out[i] = T(0.5 * v * (1.0 + std::tanh(kGeluK * (v + 0.044715 * v * v * v))));
    }
}

template <typename T>
void gelu_backward(T* d_x, const T* d_out, const T* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        double v = x[i], t = std::tanh(kGeluK * (v + 0.044715 * v * v * v));
        double dt = (1.0 - t * t) * kGeluK * (1.0 + 3.0 * 0.044715 * v * v);
        d_x[i] = T(d_out[i] * (0.5 * (1.0 + t) + 0.5 * v * dt));
    }
}

template <typename T>
void geglu_forward(T* out, const T* gu, int N, int F) {
    for (int n = 0; n < N; ++n)
        for (int f = 0; f < F; ++f) {
            double g = gu[size_t(n) * 2 * F + f], u = gu[size_t(n) * 2 * F + F + f];
            out[size_t(n) * F + f] =
                T(0.5 * g * (1.0 + std::tanh(kGeluK * (g + 0.044715 * g * g * g))) * u);
        }
}

template <typename T>
void geglu_backward(T* d_gu, const T* d_out, const T* gu, int N, int F) {
    for (int n = 0; n < N; ++n)
        for (int f = 0; f < F; ++f) {
            double g = gu[size_t(n) * 2 * F + f], u = gu[size_t(n) * 2 * F + F + f];
            double dy = d_out[size_t(n) * F + f];
            double t = std::tanh(kGeluK * (g + 0.044715 * g * g * g));
            double dt = (1.0 - t * t) * kGeluK * (1.0 + 3.0 * 0.044715 * g * g);
            d_gu[size_t(n) * 2 * F + f] = T(dy * u * (0.5 * (1.0 + t) + 0.5 * g * dt));
            d_gu[size_t(n) * 2 * F + F + f] = T(dy * 0.5 * g * (1.0 + t));
        }
}

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int N, int V) {
    for (int n = 0; n < N; ++n) {
        const T* z = logits + size_t(n) * V;
        if (targets[n] == kIgnoreIndex) {
            losses[n] = 0;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
        losses[n] = T(mx + std::log(sum) - z[targets[n]]);
    }
}

template <typename T>
void cross_entropy_forward_backward(T* logits, T* losses, const int32_t* targets, int N, int V,
                                    float d_scale) {
    cross_entropy_forward(losses, logits, targets, N, V);
    for (int n = 0; n < N; ++n) {
        T* z = logits + size_t(n) * V;
        if (targets[n] == kIgnoreIndex) {
            std::fill(z, z + V, T(0));
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
        for (int v = 0; v < V; ++v)
            z[v] = T(d_scale * (std::exp(z[v] - mx) / sum - (v == targets[n] ? 1.0 : 0.0)));
    }
}

// lse(N) over the row's V columns (-inf when V = 0); target_logit = z[t] for t in [0, V), else 0.
template <typename T>
void cross_entropy_stats(T* lse, T* target_logit, const T* logits, const int32_t* targets, int N,
                         int V) {
    for (int n = 0; n < N; ++n) {
        const T* z = logits + size_t(n) * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
        lse[n] = T(V > 0 ? mx + std::log(sum) : -INFINITY);
        const int t = targets[n];
        target_logit[n] = t >= 0 && t < V ? z[t] : T(0);
    }
}

// d = d_scale (e^(z - lse) - onehot(t)); ignored rows 0.
template <typename T>
void cross_entropy_backward(T* d, const T* logits, const T* lse, const int32_t* targets, int N,
                            int V, float d_scale) {
    for (int n = 0; n < N; ++n) {
        const T* z = logits + size_t(n) * V;
        T* dz = d + size_t(n) * V;
        const int t = targets[n];
        for (int v = 0; v < V; ++v)
            dz[v] = t == kIgnoreIndex
                        ? T(0)
                        : T(d_scale * (std::exp(double(z[v]) - lse[n]) - (v == t ? 1.0 : 0.0)));
    }
}

// Backend::adamw8bit_step over n elements in blocks of `block` (ref_adamw8bit.cpp).
void adamw8bit_step(float* p, const float* g, uint8_t* mc, uint8_t* vc, float* ma, float* va,
                    int64_t n, int64_t block, const AdamWStep& s);

// AdamW in the exact operation order of torch.optim.AdamW (single-tensor path), so 10-step
// goldens match to float rounding.
// g is read as g * grad_scale (clipping folded into the step).
template <typename T>
void adamw_step(T* p, const T* g, T* m, T* v, int64_t n, float lr, float beta1, float beta2,
                float eps, float wd, float bc1, float bc2, float grad_scale = 1.0f) {
    float step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2);
    for (int64_t i = 0; i < n; ++i) {
        const T gi = grad_scale == 1.0f ? g[i] : T(g[i] * grad_scale);
        p[i] = p[i] * (1.0f - lr * wd);
        m[i] = m[i] + (gi - m[i]) * (1.0f - beta1);
        v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
        T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] - step_size * (m[i] / denom);
    }
}

}  // namespace ete::ref
