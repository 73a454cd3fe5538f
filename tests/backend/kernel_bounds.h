// tests/backend/kernel_bounds.h — the error estimates of the backend ops' tests: each kernel's
// formula evaluated in double on the exact inputs with a running error bound beside every
// intermediate value (the method is described below), for the norms, activations, the
// cross-entropy and AdamW (RoPE and attention: attention_bounds.h), on the CPU kernels and, for
// the conformance suite, the CUDA ones too.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend_test_util.h"
#include "numerics.h"

namespace ete::backend_test {

// ---- error estimates (tests/numerics.h) ----
//
// Every per-element bound of these tests is the error estimate of the computation it checks, not
// a measurement. The kernel's own formula is evaluated on the exact inputs, in double, with a
// first-order bound carried beside each intermediate value (running error analysis, Higham,
// "Accuracy and Stability of Numerical Algorithms", §3.3, with his model (2.8)): an operation
// that rounds into unit u adds u·|its result| (plus η = 2^-150, fp32's subnormal half-gap) to the
// errors it propagates. A sum of n terms adds γ_{n-1}·Σ|terms| (numerics.h gamma_worst): any
// order, so one bound covers every instruction set, thread count and BLAS kernel. The
// reference's own error is estimated the same way (mostly its one rounding of each output into
// fp32) and added: |got - want| <= e(kernel) + e(reference).

using testing::gamma_worst;
using testing::kUnitF32;
inline constexpr double kUnitF64 = 0x1p-53;  // double's unit roundoff

// exp_fast (cpu/simd_math.h) is within 2 ulp of the correctly rounded e^x over the normal range
// (SimdMath.ExpFastIsWithinTwoUlpOfCorrectlyRoundedExp sweeps every float exponent): 2.5 ulp of
// e^x, and an ulp is at most 2u of the value.
inline constexpr double kExpFastRel = 5 * kUnitF32;
// The attention's exp2_scalar (cpu/attention_tiles.h), which no test pins: its degree-6 Taylor
// polynomial truncates (ln2 / 2)^7 / 7! * sqrt(2) = 4.0u below 2^f = 0.71, its fp32 coefficients
// and Horner steps round < 5u more (measured over every float in [-3, 3): 4.1u).
inline constexpr double kExp2Rel = 9 * kUnitF32;
// CUDA's expf and tanhf (<= 2 ulp) and logf (<= 1 ulp): the CUDA C++ Programming Guide's table
// of single-precision functions; glibc's log2f (<= 1 ulp) likewise.
inline constexpr double kUlp2Rel = 4 * kUnitF32, kUlp1Rel = 2 * kUnitF32;
// The CPU's tanh_fast (cpu/simd_math.h): tanh and its slope 1 - tanh² each within 8 ulp
// (the SimdMath sweep checks it).
inline constexpr double kTanhFastRel = 16 * kUnitF32;
// glibc's double exp, log and tanh (< 1 ulp).
inline constexpr double kLibmRel = 2 * kUnitF64;

// Which kernels a bound covers: this build's CPU kernels (either instruction-set path: the same
// operations, sums in any order), or any backend the conformance suite runs: the CPU's, or
// CUDA's (cuda/*.cu: fp32 row sums, expf, tanhf, logf).
enum class Impl { kCpu, kAny };

// A value a kernel computes: exact value v (from the exact inputs), a first-order bound e on the
// computed value's error, and the unit u of the arithmetic it is in: fp32, or double once a
// double operand joins (C++'s promotion), until `rounded` stores it into fp32.
struct Ev {
    double v = 0, e = 0, u = kUnitF32;
};
inline Ev f32(double x) {  // an exact operand of fp32 arithmetic
    return {x, 0, kUnitF32};
}
inline Ev f64(double x) {  // an exact operand of double arithmetic
    return {x, 0, kUnitF64};
}
// A constant held rounded (sqrt(2/pi) as a float): `roundings` roundings of unit u off its value.
inline Ev rounded_const(double x, int roundings = 1, double u = kUnitF32) {
    return {x, roundings * u * std::fabs(x), u};
}
inline Ev as_f64(const Ev& a) {  // double(x): exact, later operations in double
    return {a.v, a.e, kUnitF64};
}
inline double eta_of(double u) {
    return u == kUnitF32 ? 0x1p-150 : 0.0;
}
inline Ev with_rounding(double r, double e, double u) {
    return {r, e + u * std::fabs(r) + eta_of(u), u};
}
inline Ev rounded(const Ev& a) {  // float(x)
    return with_rounding(a.v, a.e, kUnitF32);
}
// Stored into dtype t (one rounding of half its eps) and read back into fp32 arithmetic.
inline Ev stored(const Ev& a, DType t) {
    if (t == DType::F32) return rounded(a);
    return {a.v, a.e + eps_of(t) / 2 * std::fabs(a.v) + tiny_of(t) / 2, kUnitF32};
}
inline Ev operator+(const Ev& a, const Ev& b) {
    return with_rounding(a.v + b.v, a.e + b.e, std::min(a.u, b.u));
}
inline Ev operator-(const Ev& a, const Ev& b) {
    return with_rounding(a.v - b.v, a.e + b.e, std::min(a.u, b.u));
}
inline Ev operator-(const Ev& a) {
    return {-a.v, a.e, a.u};
}
inline Ev operator*(const Ev& a, const Ev& b) {
    return with_rounding(a.v * b.v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e,
                         std::min(a.u, b.u));
}
inline Ev operator/(const Ev& a, const Ev& b) {
    const double r = a.v / b.v;
    return with_rounding(r, (a.e + std::fabs(r) * b.e) / std::fabs(b.v), std::min(a.u, b.u));
}
// f(a) by an implementation within rel·|f| + abs of the exact f; a's error carried by |f'(a)|.
inline Ev apply(const Ev& a, double f, double df, double rel, double abs = 0) {
    return {f, std::fabs(df) * a.e + rel * std::fabs(f) + abs, a.u};
}
// e^a: below -87 an fp32 exponential leaves the normal range (exp_fast flushes to 0, expf goes
// subnormal), an error of at most e^a itself.
inline Ev exp_of(const Ev& a, double rel) {
    const double f = std::exp(a.v);
    return apply(a, f, f, rel, a.u == kUnitF32 && a.v < -87 ? f : 0.0);
}
inline Ev log_of(const Ev& a, double rel) {
    return apply(a, std::log(a.v), 1 / a.v, rel);
}
inline Ev tanh_of(const Ev& a, double rel) {
    const double f = std::tanh(a.v);
    return apply(a, f, 1 - f * f, rel);
}
// A correctly rounded square root. First order fails at 0, where sqrt(e) bounds the step.
inline Ev sqrt_of(const Ev& a) {
    const double f = std::sqrt(a.v);
    const double carried = f > 0 ? std::min(a.e / (2 * f), std::sqrt(a.e)) : std::sqrt(a.e);
    return with_rounding(f, carried, a.u);
}
// 1 / (1 + e^-x) with an exponential of relative error `exp_rel`. Below x = -87 (fp32) e^-x
// leaves the float range (exp_fast clamps it to e^88, expf overflows to inf): the computed and
// the exact sigmoid are both below e^-87, so they differ by less than e^-86.
inline Ev sigmoid_of(const Ev& x, double exp_rel) {
    if (x.u == kUnitF32 && x.v < -87) return {1 / (1 + std::exp(-x.v)), std::exp(-86.0), x.u};
    return Ev{1, 0, x.u} / (Ev{1, 0, x.u} + exp_of(-x, exp_rel));
}

// A sum of terms, in any order, in arithmetic of unit u: the terms' errors plus
// gamma_{n-1}(u)·Σ|terms|.
struct EvSum {
    double v = 0, abs = 0, e = 0;
    int64_t n = 0;
    void add(const Ev& t) {
        v += t.v;
        abs += std::fabs(t.v);
        e += t.e;
        ++n;
    }
    Ev total(double u) const {
        return {v, e + gamma_worst(double(std::max<int64_t>(n - 1, 0)), u) * abs, u};
    }
};

// The bound of one output: the reference's error plus the worse of the kernels' (impl: the CPU
// kernel's alone, or also CUDA's).
inline double bound_of(const Ev& ref, const Ev& cpu, const Ev& cuda, Impl impl) {
    return ref.e + (impl == Impl::kAny ? std::max(cpu.e, cuda.e) : cpu.e);
}

// ---- norms: each kernel's formula (cpu/norm.cpp, cuda/norm.cu, cpu/ref/ref_kernels.h) ----

// Bounds of a norm op's outputs against the reference's, element by element.
struct NormBound {
    DVec out;         // (N, C): out, or d_x for a backward
    DVec mean, rstd;  // (N) forward statistics
    DVec d_w, d_b;    // (C) weight gradients
};

// rmsnorm_forward of x (N, C) and w (C). The CPU sums x^2 in double and rounds 1/rms to fp32
// before it scales x; CUDA sums in fp32; the reference works in double and rounds each output.
inline NormBound rmsnorm_forward_bound(const DVec& x, const DVec& w, int64_t N, int64_t C,
                                       float eps, Impl impl) {
    NormBound b{DVec(size_t(N * C)), {}, DVec(size_t(N)), {}, {}};
    for (int64_t n = 0; n < N; ++n) {
        const double* xr = x.data() + n * C;
        EvSum ss64, ss32;
        for (int64_t c = 0; c < C; ++c) {
            ss64.add(f64(xr[c]) * f64(xr[c]));
            ss32.add(f32(xr[c]) * f32(xr[c]));
        }
        const Ev r_ref = f64(1) / sqrt_of(ss64.total(kUnitF64) / f64(double(C)) + f64(eps));
        const Ev r_cpu = rounded(r_ref);  // the same double statistics, rounded
        const Ev r_cuda = f32(1) / sqrt_of(ss32.total(kUnitF32) / f32(double(C)) + f32(eps));
        b.rstd[size_t(n)] = bound_of(rounded(r_ref), r_cpu, r_cuda, impl);
        for (int64_t c = 0; c < C; ++c) {
            const Ev xv = f32(xr[c]), wv = f32(w[size_t(c)]);
            b.out[size_t(n * C + c)] = bound_of(rounded(as_f64(xv) * r_ref * as_f64(wv)),
                                                xv * r_cpu * wv, xv * r_cuda * wv, impl);
        }
    }
    return b;
}

// rmsnorm_backward: d_x += r (dy w - xhat k) with k = mean(dy w xhat), d_w += Σ_rows dy xhat, from
// the given rstd r (N), onto d_x0 (N, C) and d_w0 (C; empty: frozen). The CPU forms k in double
// and the rest in fp32; CUDA all in fp32; the reference in double, each row's term rounded once
// into the fp32 d_x and d_w (a running fp32 sum over the rows).
inline NormBound rmsnorm_backward_bound(const DVec& x, const DVec& w, const DVec& rstd,
                                        const DVec& dy, const DVec& d_x0, const DVec& d_w0,
                                        int64_t N, int64_t C, Impl impl) {
    NormBound b{DVec(size_t(N * C)), {}, {}, DVec(d_w0.size()), {}};
    const size_t nc = static_cast<size_t>(C);
    std::vector<EvSum> w_ref(nc), w_cpu(nc), w_cuda(nc);
    for (int64_t n = 0; n < N; ++n) {
        const size_t row = size_t(n * C);
        const Ev r = f32(rstd[size_t(n)]);
        EvSum dot64, dot_ref, dot32;
        for (int64_t c = 0; c < C; ++c) {
            const Ev g = f32(dy[row + c]), wv = f32(w[size_t(c)]), xv = f32(x[row + c]);
            dot64.add(as_f64(g) * as_f64(wv) * as_f64(xv));
            dot_ref.add(as_f64(g) * as_f64(wv) * as_f64(xv) * as_f64(r));
            dot32.add(g * wv * xv * r);
        }
        const Ev k_cpu = rounded(dot64.total(kUnitF64) * as_f64(r) / f64(double(C)));
        const Ev k_ref = dot_ref.total(kUnitF64) / f64(double(C));
        const Ev k_cuda = dot32.total(kUnitF32) / f32(double(C));
        for (int64_t c = 0; c < C; ++c) {
            const Ev g = f32(dy[row + c]), wv = f32(w[size_t(c)]), xv = f32(x[row + c]);
            const Ev dx0 = f32(d_x0[row + c]), xhat = xv * r, xhat64 = as_f64(xv) * as_f64(r);
            // (the reference's dy * w is a product of two floats: fp32)
            const Ev ref = dx0 + rounded(as_f64(r) * (as_f64(g * wv) - xhat64 * k_ref));
            b.out[row + c] = bound_of(ref, dx0 + r * (g * wv - xhat * k_cpu),
                                      dx0 + r * (g * wv - xhat * k_cuda), impl);
            if (d_w0.empty()) continue;
            w_ref[size_t(c)].add(rounded(as_f64(g) * xhat64));
            w_cpu[size_t(c)].add(g * xhat);
            w_cuda[size_t(c)].add(g * xhat);
        }
    }
    for (size_t c = 0; c < d_w0.size(); ++c) {
        const Ev w0 = f32(d_w0[c]);
        w_ref[c].add(w0);  // the reference's running sum starts from d_w0
        b.d_w[c] = bound_of(w_ref[c].total(kUnitF32), w0 + rounded(w_cpu[c].total(kUnitF32)),
                            w0 + w_cuda[c].total(kUnitF32), impl);
    }
    return b;
}

// layernorm_forward of x (N, C), w, b (C): mean and variance (two passes) in double on the CPU,
// rounded to fp32 before the affine map; in fp32 on CUDA; in double in the reference. The mean's
// error moves Σ(x - mean)^2 only to second order (Σ(x - mean) = 0), so the variance's terms
// carry the subtraction's rounding alone.
inline NormBound layernorm_forward_bound(const DVec& x, const DVec& w, const DVec& bias, int64_t N,
                                         int64_t C, float eps, Impl impl) {
    NormBound b{DVec(size_t(N * C)), DVec(size_t(N)), DVec(size_t(N)), {}, {}};
    for (int64_t n = 0; n < N; ++n) {
        const double* xr = x.data() + n * C;
        EvSum s64, s32;
        for (int64_t c = 0; c < C; ++c) s64.add(f64(xr[c])), s32.add(f32(xr[c]));
        const Ev mu64 = s64.total(kUnitF64) / f64(double(C));
        const Ev mu32 = s32.total(kUnitF32) / f32(double(C));
        EvSum v64, v32;
        for (int64_t c = 0; c < C; ++c) {
            const Ev d64 = f64(xr[c]) - f64(mu64.v), d32 = f32(xr[c]) - f32(mu32.v);
            v64.add(d64 * d64);
            v32.add(d32 * d32);
        }
        const Ev r64 = f64(1) / sqrt_of(v64.total(kUnitF64) / f64(double(C)) + f64(eps));
        const Ev r32 = f32(1) / sqrt_of(v32.total(kUnitF32) / f32(double(C)) + f32(eps));
        const Ev mu_cpu = rounded(mu64), r_cpu = rounded(r64);
        b.mean[size_t(n)] = bound_of(rounded(mu64), mu_cpu, mu32, impl);
        b.rstd[size_t(n)] = bound_of(rounded(r64), r_cpu, r32, impl);
        for (int64_t c = 0; c < C; ++c) {
            const Ev xv = f32(xr[c]), wv = f32(w[size_t(c)]), bv = f32(bias[size_t(c)]);
            const Ev ref = rounded((as_f64(xv) - mu64) * r64 * as_f64(wv) + as_f64(bv));
            b.out[size_t(n * C + c)] =
                bound_of(ref, (xv - mu_cpu) * r_cpu * wv + bv, (xv - mu32) * r32 * wv + bv, impl);
        }
    }
    return b;
}

// layernorm_backward: g = dy w, d_x += r (g - mean(g) - xhat mean(g xhat)), d_w += Σ dy xhat,
// d_b += Σ dy, from the given mean and rstd (N), onto d_x0, d_w0, d_b0 (empty: frozen). The CPU
// forms the row means in double from fp32 terms, the rest in fp32; CUDA all in fp32; the
// reference in double, rounding each row's term into the fp32 outputs.
inline NormBound layernorm_backward_bound(const DVec& x, const DVec& w, const DVec& mean,
                                          const DVec& rstd, const DVec& dy, const DVec& d_x0,
                                          const DVec& d_w0, const DVec& d_b0, int64_t N, int64_t C,
                                          Impl impl) {
    NormBound b{DVec(size_t(N * C)), {}, {}, DVec(d_w0.size()), DVec(d_b0.size())};
    const size_t nc = static_cast<size_t>(C);
    std::vector<EvSum> w_ref(nc), w_cpu(nc), w_cuda(nc), b_ref(nc), b_k(nc);
    for (int64_t n = 0; n < N; ++n) {
        const size_t row = size_t(n * C);
        const Ev mu = f32(mean[size_t(n)]), r = f32(rstd[size_t(n)]);
        EvSum sg_cpu, sgx_cpu, sg_ref, sgx_ref, sg_cuda, sgx_cuda;
        for (int64_t c = 0; c < C; ++c) {
            const Ev dyv = f32(dy[row + c]), wv = f32(w[size_t(c)]), xv = f32(x[row + c]);
            const Ev g = dyv * wv, g64 = as_f64(dyv) * as_f64(wv);
            sg_cpu.add(as_f64(g));
            sgx_cpu.add(as_f64(g) * ((xv - mu) * r));
            sg_ref.add(g64);
            sgx_ref.add(g64 * (as_f64(xv) - as_f64(mu)) * as_f64(r));
            sg_cuda.add(g);
            sgx_cuda.add(g * (xv - mu) * r);
        }
        const Ev mg_cpu = rounded(sg_cpu.total(kUnitF64) / f64(double(C)));
        const Ev mgx_cpu = rounded(sgx_cpu.total(kUnitF64) / f64(double(C)));
        const Ev mg_ref = sg_ref.total(kUnitF64) / f64(double(C));
        const Ev mgx_ref = sgx_ref.total(kUnitF64) / f64(double(C));
        const Ev mg_cuda = sg_cuda.total(kUnitF32) / f32(double(C));
        const Ev mgx_cuda = sgx_cuda.total(kUnitF32) / f32(double(C));
        for (int64_t c = 0; c < C; ++c) {
            const Ev dyv = f32(dy[row + c]), wv = f32(w[size_t(c)]), xv = f32(x[row + c]);
            const Ev dx0 = f32(d_x0[row + c]), xhat = (xv - mu) * r;
            const Ev xhat64 = (as_f64(xv) - as_f64(mu)) * as_f64(r);
            const Ev ref =
                dx0 + rounded(as_f64(r) * (as_f64(dyv * wv) - mg_ref - xhat64 * mgx_ref));
            b.out[row + c] = bound_of(ref, dx0 + r * (dyv * wv - mg_cpu - xhat * mgx_cpu),
                                      dx0 + r * (dyv * wv - mg_cuda - xhat * mgx_cuda), impl);
            w_ref[size_t(c)].add(rounded(as_f64(dyv) * xhat64));
            w_cpu[size_t(c)].add(dyv * xhat);
            w_cuda[size_t(c)].add(dyv * xhat);
            b_ref[size_t(c)].add(dyv);
            b_k[size_t(c)].add(dyv);
        }
    }
    for (size_t c = 0; c < d_w0.size(); ++c) {
        const Ev w0 = f32(d_w0[c]);
        w_ref[c].add(w0);
        b.d_w[c] = bound_of(w_ref[c].total(kUnitF32), w0 + rounded(w_cpu[c].total(kUnitF32)),
                            w0 + w_cuda[c].total(kUnitF32), impl);
    }
    for (size_t c = 0; c < d_b0.size(); ++c) {
        const Ev b0 = f32(d_b0[c]);
        b_ref[c].add(b0);
        b.d_b[c] = bound_of(b_ref[c].total(kUnitF32), b0 + rounded(b_k[c].total(kUnitF32)),
                            b0 + b_k[c].total(kUnitF32), impl);
    }
    return b;
}

// ---- activations: cpu/elementwise.cpp (exp_fast), cuda/elementwise.cu, cpu/ref/ref_kernels.h ----

struct ActBound {
    DVec out, d_in;
};

// swiglu over gu (N, 2F) = (gate, up) and d_out (N, F): out = g sigmoid(g) u, d_gate =
// dy u s (1 + g (1 - s)), d_up = dy g s. The CPU writes 1 - s as e s (e = exp_fast(-g)); CUDA
// subtracts; the reference works in double. Below g = -87 the fp32 sigmoid is off by < e^-86
// (sigmoid_of), and the CPU's e s is then exactly as accurate as elsewhere.
inline ActBound swiglu_bound(const DVec& gu, const DVec& dy, int64_t N, int64_t F, Impl impl) {
    ActBound b{DVec(size_t(N * F)), DVec(size_t(N * 2 * F))};
    for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) {
            const double gd = gu[size_t(n * 2 * F + f)], ud = gu[size_t(n * 2 * F + F + f)];
            const double dd = dy[size_t(n * F + f)];
            const Ev g = f32(gd), u = f32(ud), d = f32(dd), one = f32(1);
            const Ev g64 = f64(gd), u64 = f64(ud), d64 = f64(dd), one64 = f64(1);
            const Ev s_ref = sigmoid_of(g64, kLibmRel), s_cuda = sigmoid_of(g, kUlp2Rel);
            b.out[size_t(n * F + f)] =
                bound_of(rounded(g64 * s_ref * u64), g * sigmoid_of(g, kExpFastRel) * u,
                         g * s_cuda * u, impl);
            Ev dg_cpu, du_cpu;
            if (gd < -87) {  // e = exp_fast(-g) clamped to e^88: s off by < e^-86, e s by less
                const double s = 1 / (1 + std::exp(-gd)), tail = std::exp(-86.0);
                dg_cpu = {dd * ud * s * (1 + gd * (1 - s)),
                          std::fabs(dd * ud) * (2 + std::fabs(gd)) * tail};
                du_cpu = {dd * gd * s, std::fabs(dd * gd) * tail};
            } else {
                const Ev e = exp_of(-g, kExpFastRel), s = one / (one + e);
                dg_cpu = d * u * s * (one + g * (e * s));
                du_cpu = d * g * s;
            }
            const size_t i = size_t(n * 2 * F + f);
            b.d_in[i] = bound_of(rounded(d64 * u64 * s_ref * (one64 + g64 * (one64 - s_ref))),
                                 dg_cpu, d * u * s_cuda * (one + g * (one - s_cuda)), impl);
            b.d_in[i + size_t(F)] =
                bound_of(rounded(d64 * g64 * s_ref), du_cpu, d * g * s_cuda, impl);
        }
    return b;
}

// gelu (tanh form, y = k (x + c x^3)): the CPU computes x sigmoid(2y) and its derivative
// s + x e s^2 d(2y)/dx with exp_fast (e = e^-2y, no cancellation); CUDA 0.5 x (1 + tanh y), whose
// 1 + tanh y cancels for y << 0; the reference the tanh form in double. The fp32 constants
// sqrt(2/pi) and 0.044715 are one rounding off theirs, 3 * 0.044715f two.
inline ActBound gelu_bound(const DVec& x, const DVec& dy, Impl impl) {
    constexpr double kK = 0.7978845608028654, kC = 0.044715;
    const Ev k2 = rounded_const(2 * kK), k = rounded_const(kK), c = rounded_const(kC);
    const Ev c3 = rounded_const(3 * kC, 2), one = f32(1), half = f32(0.5);
    const Ev k64 = rounded_const(kK, 1, kUnitF64), c64 = rounded_const(kC, 1, kUnitF64);
    const Ev c3_64 = rounded_const(3 * kC, 2, kUnitF64), one64 = f64(1), half64 = f64(0.5);
    ActBound b{DVec(x.size()), DVec(x.size())};
    for (size_t i = 0; i < x.size(); ++i) {
        const Ev v = f32(x[i]), d = f32(dy[i]), v64 = f64(x[i]), d64 = f64(dy[i]);
        // reference
        const Ev t64 = tanh_of(k64 * (v64 + c64 * v64 * v64 * v64), kLibmRel);
        const Ev dt64 = (one64 - t64 * t64) * k64 * (one64 + c3_64 * v64 * v64);
        const Ev out_ref = rounded(half64 * v64 * (one64 + t64));
        const Ev dx_ref = rounded(d64 * (half64 * (one64 + t64) + half64 * v64 * dt64));
        // cpu
        const Ev y2 = k2 * (v + c * v * v * v), dy2 = k2 * (one + c3 * v * v);
        const Ev out_cpu = v * sigmoid_of(y2, kExpFastRel);
        Ev dx_cpu;
        if (y2.v < -87) {  // e^-y2 leaves the float range: s and x e s^2 y2' both < e^-86
            dx_cpu = {dx_ref.v, std::fabs(dy[i]) * (1 + std::fabs(x[i]) * dy2.v) * std::exp(-86.0)};
        } else {
            const Ev e = exp_of(-y2, kExpFastRel), s = one / (one + e);
            dx_cpu = d * (s + v * (e * s) * s * dy2);
        }
        // cuda
        const Ev t = tanh_of(k * (v + c * v * v * v), kUlp2Rel);
        const Ev dt = (one - t * t) * k * (one + c3 * v * v);
        const Ev out_cuda = half * v * (one + t);
        const Ev dx_cuda = d * (half * (one + t) + half * v * dt);
        b.out[i] = bound_of(out_ref, out_cpu, out_cuda, impl);
        b.d_in[i] = bound_of(dx_ref, dx_cpu, dx_cuda, impl);
    }
    return b;
}

// geglu over gu (N, 2F) = (gate, up) and d_out (N, F): out = gelu(g) u, d_gate = dy u gelu'(g),
// d_up = dy gelu(g), each implementation's GELU and GELU' as gelu_bound models them (the CPU's
// sigmoid form with exp_fast, CUDA's tanhf, the reference's double tanh), times u and dy in that
// implementation's order. Below y2 = -87 the CPU's terms are off by < e^-86 (as gelu_bound).
inline ActBound geglu_bound(const DVec& gu, const DVec& dy, int64_t N, int64_t F, Impl impl) {
    constexpr double kK = 0.7978845608028654, kC = 0.044715;
    const Ev k2 = rounded_const(2 * kK), k = rounded_const(kK), c = rounded_const(kC);
    const Ev c3 = rounded_const(3 * kC, 2), one = f32(1), half = f32(0.5);
    const Ev k64 = rounded_const(kK, 1, kUnitF64), c64 = rounded_const(kC, 1, kUnitF64);
    const Ev c3_64 = rounded_const(3 * kC, 2, kUnitF64), one64 = f64(1), half64 = f64(0.5);
    ActBound b{DVec(size_t(N * F)), DVec(size_t(N * 2 * F))};
    for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) {
            const double gd = gu[size_t(n * 2 * F + f)], ud = gu[size_t(n * 2 * F + F + f)];
            const double dd = dy[size_t(n * F + f)];
            const Ev g = f32(gd), u = f32(ud), d = f32(dd), g64 = f64(gd), u64 = f64(ud),
                     d64 = f64(dd);
            // reference
            const Ev t64 = tanh_of(k64 * (g64 + c64 * g64 * g64 * g64), kLibmRel);
            const Ev dt64 = (one64 - t64 * t64) * k64 * (one64 + c3_64 * g64 * g64);
            const Ev out_ref = rounded(half64 * g64 * (one64 + t64) * u64);
            const Ev dg_ref = rounded(d64 * u64 * (half64 * (one64 + t64) + half64 * g64 * dt64));
            const Ev du_ref = rounded(d64 * half64 * g64 * (one64 + t64));
            // cpu
            const Ev y2 = k2 * (g + c * g * g * g), dy2 = k2 * (one + c3 * g * g);
            const Ev val_cpu = g * sigmoid_of(y2, kExpFastRel);
            Ev grad_cpu;
            if (y2.v < -87) {
                const double t = std::tanh(kK * (gd + kC * gd * gd * gd));
                const double dt = (1 - t * t) * kK * (1 + 3 * kC * gd * gd);
                grad_cpu = {0.5 * (1 + t) + 0.5 * gd * dt,
                            (1 + std::fabs(gd) * dy2.v) * std::exp(-86.0)};
            } else {
                const Ev e = exp_of(-y2, kExpFastRel), s = one / (one + e);
                grad_cpu = s + g * (e * s) * s * dy2;
            }
            // cuda
            const Ev t = tanh_of(k * (g + c * g * g * g), kUlp2Rel);
            const Ev dt = (one - t * t) * k * (one + c3 * g * g);
            const size_t i = size_t(n * 2 * F + f);
            b.out[size_t(n * F + f)] =
                bound_of(out_ref, val_cpu * u, half * g * (one + t) * u, impl);
            b.d_in[i] = bound_of(dg_ref, d * u * grad_cpu,
                                 d * u * (half * (one + t) + half * g * dt), impl);
            b.d_in[i + size_t(F)] = bound_of(du_ref, d * val_cpu, d * half * g * (one + t), impl);
        }
    return b;
}

// ---- cross-entropy: cpu/loss.cpp, cuda/loss.cu, cpu/ref/ref_kernels.h ----

// loss.cpp's chunks: a row is walked in chunks of max(512, ceil(V / 64) rounded up to 16) logits,
// the running max m raised to each chunk's max before the chunk's e^(z - m) are summed in fp32;
// the chunk sums are rescaled to the final max and added in double.
inline int ce_chunk_len(int V) {
    const int per = (V + 63) / 64;
    return std::max(512, (per + 15) / 16 * 16);
}

// One row's softmax as each backend forms it: the exact max M, Σ e^(z - M) (S), and the CPU's
// exp_fast(z - m) of each logit with the factor e^(m - M) its chunk is rescaled by.
struct CeRow {
    double M = -INFINITY;
    Ev s_ref, s_cpu, s_cuda;
    std::vector<Ev> e_cpu, scale_cpu;
};

inline CeRow ce_row(const double* z, int V) {
    CeRow r;
    for (int v = 0; v < V; ++v) r.M = std::max(r.M, z[v]);
    const int len = ce_chunk_len(V), chunks = (V + len - 1) / len;
    EvSum s_ref, s_cpu, s_cuda;
    double m = -INFINITY;
    for (int c0 = 0; c0 < V; c0 += len) {
        const int end = std::min(V, c0 + len);
        for (int v = c0; v < end; ++v) m = std::max(m, z[v]);
        // the rescales of the double sum: one libm exp and one product per later raise
        const double f = std::exp(m - r.M);
        const Ev factor{f, chunks * 3 * kUnitF64 * f, kUnitF64};
        EvSum chunk;
        for (int v = c0; v < end; ++v) {
            r.e_cpu.push_back(exp_of(f32(z[v]) - f32(m), kExpFastRel));
            r.scale_cpu.push_back(factor);
            chunk.add(r.e_cpu.back());
            s_ref.add(exp_of(f64(z[v]) - f64(r.M), kLibmRel));
            s_cuda.add(exp_of(f32(z[v]) - f32(r.M), kUlp2Rel));
        }
        s_cpu.add(as_f64(chunk.total(kUnitF32)) * factor);
    }
    r.s_ref = s_ref.total(kUnitF64);
    r.s_cpu = s_cpu.total(kUnitF64);
    r.s_cuda = s_cuda.total(kUnitF32);
    return r;
}

struct CeBound {
    DVec loss, grad;  // (N), (N, V) before any 16-bit rounding of the gradient
};

// cross_entropy_forward_backward (and the forward alone): loss = M + log S - z_t and
// d = d_scale (e^(z - M) / S - onehot(t)). Ignored rows are exact zeros.
inline CeBound cross_entropy_bound(const DVec& z, const std::vector<int32_t>& targets, int N, int V,
                                   double d_scale, Impl impl) {
    CeBound b{DVec(size_t(N)), DVec(size_t(N) * V)};
    const Ev ds = f32(d_scale), ds64 = f64(d_scale);
    for (int n = 0; n < N; ++n) {
        const int t = targets[size_t(n)];
        if (t == kIgnoreIndex) continue;
        const double* zr = z.data() + size_t(n) * V;
        const CeRow r = ce_row(zr, V);
        const Ev M = f64(r.M), zt = f64(zr[t]);
        const Ev log_ref = log_of(r.s_ref, kLibmRel), log_cpu = log_of(r.s_cpu, kLibmRel);
        b.loss[size_t(n)] = bound_of(rounded(M + log_ref - zt), rounded(M + log_cpu - zt),
                                     f32(r.M) + log_of(r.s_cuda, kUlp1Rel) - f32(zr[t]), impl);
        for (int v = 0; v < V; ++v) {
            const Ev one_hot = f32(v == t ? 1.0 : 0.0);
            const Ev ref = rounded(ds64 * (exp_of(f64(zr[v]) - M, kLibmRel) / r.s_ref - one_hot));
            const Ev f = rounded(ds64 * r.scale_cpu[size_t(v)] / r.s_cpu);
            Ev cpu = r.e_cpu[size_t(v)] * f;
            if (v == t) cpu = cpu - ds;
            const Ev p_cuda = exp_of(f32(zr[v]) - f32(r.M), kUlp2Rel) / r.s_cuda;
            b.grad[size_t(n) * V + v] = bound_of(ref, cpu, ds * (p_cuda - one_hot), impl);
        }
    }
    return b;
}

// cross_entropy_stats's lse = M + log S of each row's V columns (V = 0: -inf, exact).
inline DVec ce_lse_bound(const DVec& z, int N, int V, Impl impl) {
    DVec b(size_t(N), 0.0);
    for (int n = 0; n < N && V > 0; ++n) {
        const CeRow r = ce_row(z.data() + size_t(n) * V, V);
        const Ev M = f64(r.M);
        b[size_t(n)] =
            bound_of(rounded(M + log_of(r.s_ref, kLibmRel)), rounded(M + log_of(r.s_cpu, kLibmRel)),
                     f32(r.M) + log_of(r.s_cuda, kUlp1Rel), impl);
    }
    return b;
}

// cross_entropy_backward from a given fp32 lse (N): d = d_scale (e^(z - lse) - onehot(t)), the
// CPU's with exp_fast of the fp32 difference z - lse; targets outside [0, V) have no one-hot.
inline DVec ce_backward_bound(const DVec& z, const DVec& lse, const std::vector<int32_t>& targets,
                              int N, int V, double d_scale, Impl impl) {
    DVec b(size_t(N) * V, 0.0);
    const Ev ds = f32(d_scale), ds64 = f64(d_scale);
    for (int n = 0; n < N; ++n) {
        const int t = targets[size_t(n)];
        if (t == kIgnoreIndex) continue;
        const Ev l = f32(lse[size_t(n)]);
        for (int v = 0; v < V; ++v) {
            const double zv = z[size_t(n) * V + v];
            const Ev one_hot = f32(v == t ? 1.0 : 0.0);
            const Ev e_cpu = exp_of(f32(zv) - l, kExpFastRel);
            const Ev cpu = v == t ? ds * (e_cpu - one_hot) : ds * e_cpu;
            const Ev cuda = ds * (exp_of(f32(zv) - l, kUlp2Rel) - one_hot);
            const Ev ref = rounded(ds64 * (exp_of(f64(zv) - as_f64(l), kLibmRel) - one_hot));
            b[size_t(n) * V + v] = bound_of(ref, cpu, cuda, impl);
        }
    }
    return b;
}

// ---- AdamW: ref::adamw_step's operations (cpu/optim.cpp, cuda/optim.cu) ----

// p, m and v of one parameter as values with their errors, stepped as ref::adamw_step's
// expressions round every operation; a fused multiply-add rounds once where they round twice,
// so the bound holds for any contraction (the CPU's fmas, CUDA's none, an unfused -O0
// reference). The float constants lr / bc1, sqrt(bc2) and 1 - lr wd are formed on each side.
struct AdamEv {
    Ev p, m, v;
};

inline void adamw_step_ev(std::vector<AdamEv>& st, const FVec& g, const AdamWStep& s) {
    const Ev one = f32(1), step = f32(s.lr) / f32(s.bc1), bc2_sqrt = sqrt_of(f32(s.bc2));
    const Ev decay = one - f32(s.lr) * f32(s.weight_decay);
    const Ev one_b1 = one - f32(s.beta1), one_b2 = one - f32(s.beta2);
    for (size_t i = 0; i < st.size(); ++i) {
        const Ev gi = s.grad_scale == 1.0f ? f32(g[i]) : f32(g[i]) * f32(s.grad_scale);
        AdamEv& a = st[i];
        a.p = a.p * decay;
        a.m = a.m + (gi - a.m) * one_b1;
        a.v = a.v * f32(s.beta2) + one_b2 * gi * gi;
        const Ev denom = sqrt_of(a.v) / bc2_sqrt + f32(s.eps);
        a.p = a.p - step * (a.m / denom);
    }
}

}  // namespace ete::backend_test
