// tests/backend/attention_bounds.h — the error estimates of RoPE and attention (the kernels of
// cpu/attention.cpp, cuda/rope.cu and cuda/attention.cu against cpu/ref/ref_kernels.h), in the
// terms of kernel_bounds.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_bounds.h"

namespace ete::backend_test {

// ---- RoPE: cpu/attention.cpp rope_apply, cuda/rope.cu, cpu/ref/ref_kernels.h ----

// The document start of row b's position t (0 without packing); d.doc_start is host memory here.
inline int doc_start_of(const AttnDims& d, int b, int t) {
    const auto* s = static_cast<const int32_t*>(d.doc_start.data);
    return s ? s[size_t(b) * d.T + t] : 0;
}

// The first key query t of row b sees: its document's start, or the sliding window's.
inline int first_key_of(const AttnDims& d, int b, int t) {
    return d.first_key(doc_start_of(d, b, t), t);
}

// rope_forward (sign 1) or rope_backward (-1) of x (B*T, S) as every backend computes it, in
// place on values with their errors: each (x0, x1) pair of a q or k head becomes
// (x0 c - x1 s', x1 c + x0 s') in fp32, s' = sign * sin, at position t - doc_start; cos and sin
// are (P, D/2) fp32 tables. The value heads are untouched.
inline void rope_ev(std::vector<Ev>& x, const DVec& cos, const DVec& sin, const AttnDims& d,
                    int sign, double unit = kUnitF32) {
    const int half = d.D / 2, S = d.qkv_stride();
    for (int b = 0; b < d.B; ++b)
        for (int t = 0; t < d.T; ++t) {
            const size_t row = (size_t(b) * d.T + t) * S, p = size_t(t - doc_start_of(d, b, t));
            for (int h = 0; h < d.H + d.KV; ++h)
                for (int j = 0; j < half; ++j) {
                    Ev& x0 = x[row + size_t(h * d.D + j)];
                    Ev& x1 = x[row + size_t(h * d.D + j + half)];
                    const Ev c{cos[p * half + j], 0, unit}, s{sign * sin[p * half + j], 0, unit};
                    const Ev y0 = x0 * c - x1 * s, y1 = x1 * c + x0 * s;
                    x0 = y0;
                    x1 = y1;
                }
        }
}

// The bound of a RoPE output of the exact input x against the reference's (which rotates in
// double and rounds once into fp32).
inline DVec rope_bound(const DVec& x, const DVec& cos, const DVec& sin, const AttnDims& d,
                       int sign) {
    std::vector<Ev> k(x.size()), r(x.size());
    for (size_t i = 0; i < x.size(); ++i) k[i] = f32(x[i]), r[i] = f64(x[i]);
    rope_ev(k, cos, sin, d, sign);
    rope_ev(r, cos, sin, d, sign, kUnitF64);
    DVec b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = k[i].e + (r[i].e > 0 ? rounded(r[i]).e : 0.0);
    return b;
}

// ---- attention: cpu/attention.cpp, cuda/attention.cu, cpu/ref/ref_kernels.h ----
//
// From magnitudes rather than per-operation values (the products are too many). For query i of
// head h and key j of its document: s = scale q.k, A = Σ_e |q_e k_e|, S = max_j |s|. A computed
// score is off by γ_{D+3} scale A (the CPU pre-scales q by the fp32 scale log2(e), 2 roundings,
// then D products and sums; CUDA: γ_{D+1}, its product with scale). Each softmax weight then
// carries that relative error, its exponent's rounding (u |s - max| <= 2u S), its exponential's
// and, in the forward, the rescalings of earlier partial sums each time the running max rises:
// the CPU once per key tile of 64 (n_t tiles: exp2 9u and u |Δmax| each, Σ |Δmax| <= 2S), CUDA
// once per key (expf 4u). A sum over T keys or queries adds γ_T. The reference sums in double
// but, on fp32 views, adds each backward term into its fp32 d_qkv: γ of its running sums too.

struct AttnFwdBound {
    DVec out, lse;  // (B*T, H*D), (B*H*T)
};

// attention_forward of qkv (B*T, S): out and lse against the reference's.
// Soft-capping (AttnDims::softcap): a score s becomes cap · tanh(s / cap). The cap contracts a
// score's error (its derivative 1 - t² <= 1) and adds its own: the division, the tanh (the CPU's
// tanh_fast, kTanhFastRel; CUDA's tanhf, 2 ulp), the product and cap · log2e formed in fp32 (the
// CPU's log2 units) — at most 4u + the tanh's of the capped value.
inline double capped_score(double s, float cap) {
    return cap > 0 ? cap * std::tanh(s / cap) : s;
}
inline double cap_error(double capped, float cap, double tanh_rel) {
    return cap > 0 ? (4 * kUnitF32 + tanh_rel) * std::fabs(capped) : 0.0;
}

inline AttnFwdBound attention_forward_bound(const DVec& qkv, const AttnDims& d, float scale,
                                            Impl impl) {
    const int S = d.qkv_stride(), HD = d.H * d.D, G = d.H / d.KV, D = d.D;
    const double u = kUnitF32, sc = scale;
    const double n_t = d.T / 64 + 2;  // the key tiles a CPU query tile visits, at most
    AttnFwdBound b{DVec(size_t(d.B) * d.T * HD), DVec(size_t(d.B) * d.H * d.T)};
    DVec s(size_t(d.T)), A(size_t(d.T)), p(size_t(d.T)), rc(size_t(d.T)), rg(size_t(d.T));
    const size_t nd = static_cast<size_t>(D);
    DVec o(nd), pv(nd), ec(nd), eg(nd);
    for (int bb = 0; bb < d.B; ++bb)
        for (int h = 0; h < d.H; ++h)
            for (int i = 0; i < d.T; ++i) {
                const int j0 = first_key_of(d, bb, i), nk = i - j0 + 1;
                const double* q = qkv.data() + (size_t(bb) * d.T + i) * S + size_t(h) * D;
                double M = -INFINITY, Smax = 0, Z = 0;
                for (int j = j0; j <= i; ++j) {
                    const double* k = qkv.data() + (size_t(bb) * d.T + j) * S + (d.H + h / G) * D;
                    double dot = 0, abs = 0;
                    for (int e = 0; e < D; ++e) dot += q[e] * k[e], abs += std::fabs(q[e] * k[e]);
                    s[size_t(j)] = capped_score(sc * dot, d.softcap);
                    A[size_t(j)] = abs;
                    M = std::max(M, s[size_t(j)]);
                    Smax = std::max(Smax, std::fabs(s[size_t(j)]));
                }
                const double acc_c = gamma_worst(d.T + 2 * n_t), acc_g = gamma_worst(2 * nk + 1);
                double wc = 0, wg = 0;  // the weights' relative errors, weighted by p
                for (int j = j0; j <= i; ++j) Z += std::exp(s[size_t(j)] - M);
                for (int j = j0; j <= i; ++j) {
                    const size_t jj = size_t(j);
                    p[jj] = std::exp(s[jj] - M) / Z;
                    rc[jj] = gamma_worst(D + 3) * sc * A[jj] + 4 * u * Smax + (n_t + 1) * kExp2Rel +
                             acc_c + cap_error(s[jj], d.softcap, kTanhFastRel);
                    rg[jj] = gamma_worst(D + 1) * sc * A[jj] + 4 * u * Smax + (nk + 1) * kUlp2Rel +
                             acc_g + cap_error(s[jj], d.softcap, kUlp2Rel);
                    wc += p[jj] * rc[jj];
                    wg += p[jj] * rg[jj];
                }
                std::fill(o.begin(), o.end(), 0.0), std::fill(pv.begin(), pv.end(), 0.0);
                std::fill(ec.begin(), ec.end(), 0.0), std::fill(eg.begin(), eg.end(), 0.0);
                for (int j = j0; j <= i; ++j) {
                    const double* v =
                        qkv.data() + (size_t(bb) * d.T + j) * S + (d.H + d.KV + h / G) * D;
                    const double pj = p[size_t(j)];
                    for (int e = 0; e < D; ++e) {
                        const double a = pj * std::fabs(v[e]);
                        o[size_t(e)] += pj * v[e];
                        pv[size_t(e)] += a;
                        ec[size_t(e)] += a * rc[size_t(j)];
                        eg[size_t(e)] += a * rg[size_t(j)];
                    }
                }
                // out = o / l: the CPU multiplies by 1/l (2 roundings), CUDA divides (1).
                const size_t orow = (size_t(bb) * d.T + i) * HD + size_t(h) * D;
                for (int e = 0; e < D; ++e) {
                    const size_t ee = size_t(e);
                    const double oa = std::fabs(o[ee]);
                    const double cpu = ec[ee] + oa * (wc + 2 * u), cuda = eg[ee] + oa * (wg + u);
                    const double ref = u * oa + gamma_worst(nk + D, kUnitF64) * pv[ee];
                    b.out[orow + ee] = ref + (impl == Impl::kAny ? std::max(cpu, cuda) : cpu);
                }
                // lse = max + log l: m cancels to first order; log2f/logf (2u of |log l|), then
                // the CPU's addition and product by the fp32 ln 2 (3u), CUDA's addition (u).
                const double lse = M + std::log(Z), lz = std::log(Z);
                const double cpu = wc + 2 * u * lz + 3 * u * std::fabs(lse);
                const double cuda = wg + 2 * u * lz + u * std::fabs(lse);
                const double ref = u * std::fabs(lse) + gamma_worst(nk + D, kUnitF64) * (Smax + lz);
                b.lse[(size_t(bb) * d.H + h) * d.T + i] =
                    ref + (impl == Impl::kAny ? std::max(cpu, cuda) : cpu);
            }
    return b;
}

struct AttnBwdBound {
    DVec kernel, ref;  // (B*T, S): the kernel's error and the reference's, per element of d_qkv
    DVec total() const {
        DVec t(kernel.size());
        for (size_t i = 0; i < t.size(); ++i) t[i] = kernel[i] + ref[i];
        return t;
    }
};

// attention_backward of qkv (B*T, S) and d_out (B*T, H*D) from the given out (B*T, H*D) and lse
// (B*H*T), which both sides read. out_err and lse_err, when given, are how far the out and lse
// the kernel reads are from those the reference reads (its own forward's, against the
// reference's). dS = p (dP - D_i), dP = dO.v and D_i = dO.O each D terms; dQ sums over the T
// keys, dK and dV over the G query heads and T queries; the CPU scales q by the rounded
// scale log2(e) (3u) and dK by the fp32 ln 2 and dQ by scale at the end.
inline AttnBwdBound attention_backward_bound(const DVec& qkv, const DVec& d_out, const DVec& out,
                                             const DVec& lse, const AttnDims& d, float scale,
                                             Impl impl, const DVec* out_err = nullptr,
                                             const DVec* lse_err = nullptr) {
    const int S = d.qkv_stride(), HD = d.H * d.D, G = d.H / d.KV, D = d.D, T = d.T;
    const double u = kUnitF32, sc = scale, gd = gamma_worst(D);
    const double gq = gamma_worst(T + 1), gk = gamma_worst(G * T + 1);
    const size_t n = size_t(d.B) * T * S;
    DVec val(n, 0.0), cpu(n, 0.0), cuda(n, 0.0), ref(n, 0.0);
    for (int bb = 0; bb < d.B; ++bb)
        for (int h = 0; h < d.H; ++h) {
            const size_t kc = size_t(d.H + h / G) * D, vc = size_t(d.H + d.KV + h / G) * D;
            for (int i = 0; i < T; ++i) {
                const size_t qrow = (size_t(bb) * T + i) * S, orow = (size_t(bb) * T + i) * HD;
                const double* q = qkv.data() + qrow + size_t(h) * D;
                const double* dy = d_out.data() + orow + size_t(h) * D;
                const double* o = out.data() + orow + size_t(h) * D;
                const size_t li = (size_t(bb) * d.H + h) * T + i;
                const double l = lse[li], le = lse_err ? (*lse_err)[li] : 0.0;
                double Di = 0, Ci = 0, eD = 0;
                for (int e = 0; e < D; ++e) {
                    Di += dy[e] * o[e], Ci += std::fabs(dy[e] * o[e]);
                    if (out_err) eD += std::fabs(dy[e]) * (*out_err)[orow + size_t(h) * D + e];
                }
                for (int j = first_key_of(d, bb, i); j <= i; ++j) {
                    const size_t krow = (size_t(bb) * T + j) * S;
                    const double* k = qkv.data() + krow + kc;
                    const double* v = qkv.data() + krow + vc;
                    double dot = 0, A = 0, dP = 0, B = 0;
                    for (int e = 0; e < D; ++e) {
                        dot += q[e] * k[e], A += std::fabs(q[e] * k[e]);
                        dP += dy[e] * v[e], B += std::fabs(dy[e] * v[e]);
                    }
                    // Capped (softcap): the capped score's error as in the forward, and
                    // dS = dS_capped · f with f = 1 - t². CUDA forms f as 1 - t·t: its error
                    // comes from t's (tanhf and the raw score's, through t' = f / cap) and
                    // from 1 - t·t and the product (3u). The CPU's tanh_fast gives f itself
                    // (kTanhFastRel), moved by the raw score's error and the division's
                    // through f' = 2 |t| f / cap.
                    const double s = capped_score(sc * dot, d.softcap), p = std::exp(s - l);
                    const double cap_c = cap_error(s, d.softcap, kTanhFastRel);
                    const double cap_g = cap_error(s, d.softcap, kUlp2Rel);
                    double f = 1, fe_c = 0, fe_g = 0;
                    if (d.softcap > 0) {
                        const double t = s / d.softcap, x_err = gamma_worst(D + 3) * sc * A;
                        f = 1 - t * t;
                        fe_g = 2 * std::fabs(t) *
                                   ((kUlp2Rel + 2 * u) * std::fabs(t) + f * x_err / d.softcap) +
                               3 * u;
                        fe_c = kTanhFastRel * f +
                               2 * std::fabs(t) * f * (x_err + 2 * u * std::fabs(sc * dot)) /
                                   d.softcap +
                               3 * u;
                    }
                    const double dSc = p * (dP - Di), dS = dSc * f;
                    const double rho_c = gamma_worst(D + 3) * sc * A + 2 * u * std::fabs(l) +
                                         u * std::fabs(s - l) + kExp2Rel + le + cap_c;
                    const double rho_g =
                        gamma_worst(D + 1) * sc * A + u * std::fabs(s - l) + kUlp2Rel + le + cap_g;
                    const double base = p * (gd * (B + Ci) + eD);
                    const double eS_c = f * (base + p * (rho_c + 3 * u) * std::fabs(dP - Di)) +
                                        fe_c * std::fabs(dSc);
                    const double eS_g = f * (base + p * (rho_g + 3 * u) * std::fabs(dP - Di)) +
                                        fe_g * std::fabs(dSc);
                    const double eS_r = p * gamma_worst(2 * D + 8, kUnitF64) * (B + Ci) +
                                        (d.softcap > 0 ? 8 * kUnitF64 * std::fabs(dSc) : 0.0);
                    const double aS = std::fabs(dS);
                    for (int e = 0; e < D; ++e) {
                        const size_t iq = qrow + size_t(h) * D + e, ik = krow + kc + e;
                        const size_t iv = krow + vc + e;
                        const double ak = std::fabs(k[e]), aq = std::fabs(q[e]);
                        const double ay = std::fabs(dy[e]);
                        val[iq] += sc * dS * k[e];
                        val[ik] += sc * dS * q[e];
                        val[iv] += p * dy[e];
                        cpu[iq] += sc * ak * (eS_c + aS * gq);
                        cpu[ik] += sc * aq * (eS_c + aS * (gk + 3 * u));
                        cpu[iv] += p * ay * (rho_c + gk);
                        ref[iq] += sc * ak * (eS_r + aS * gq);
                        ref[ik] += sc * aq * (eS_r + aS * gk);
                        ref[iv] += p * ay * (gk + gamma_worst(2 * D + 8, kUnitF64));
                        if (impl == Impl::kAny) {
                            cuda[iq] += sc * ak * (eS_g + aS * gq);
                            cuda[ik] += sc * aq * (eS_g + aS * gk);
                            cuda[iv] += p * ay * (rho_g + gk);
                        }
                    }
                }
            }
        }
    AttnBwdBound b{DVec(n), ref};
    for (size_t i = 0; i < n; ++i) {
        const size_t col = i % size_t(S);
        // the CPU's final scalings: dQ by scale (u), dK by the fp32 ln 2 (2u)
        const double fin = col < size_t(HD) ? u : col < size_t(HD + d.KV * D) ? 2 * u : 0.0;
        const double c = cpu[i] + fin * std::fabs(val[i]);
        b.kernel[i] = impl == Impl::kAny ? std::max(c, cuda[i]) : c;
        b.ref[i] += u * std::fabs(val[i]);  // the reference's last rounding into fp32
    }
    return b;
}

}  // namespace ete::backend_test
