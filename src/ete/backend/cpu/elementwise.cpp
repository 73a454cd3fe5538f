// ete/backend/cpu/elementwise.cpp — bias, embeddings, SwiGLU and GELU on the CPU.
//
// Row ops run an OpenMP static parallel-for over rows with a `#pragma omp simd` inner loop. Column
// reductions (bias and position-embedding backward) and the embedding scatter split the COLUMNS
// between threads instead: each output element is then summed by one thread in row order, so the
// result is the same for any thread count and bit-identical to ete::ref (same double accumulator,
// same order). Small problems stay on the calling thread (the `if` clauses) since a parallel
// region costs a few microseconds.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/simd_math.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a parallel region costs more
constexpr int kColBlock = 64;              // columns per task in column-split reductions

int64_t col_blocks(int64_t C) {
    return (C + kColBlock - 1) / kColBlock;
}

// acc(len) = sum over n < rows of src[n * ld + 0..len), in double, rows in order.
template <typename T>
inline void sum_rows(double* acc, const T* src, int64_t rows, int64_t ld, int len) {
    for (int j = 0; j < len; ++j) acc[j] = 0.0;
    for (int64_t n = 0; n < rows; ++n) {
        const T* s = src + n * ld;
#pragma omp simd
        for (int j = 0; j < len; ++j) acc[j] += load(s[j]);
    }
}

template <typename Y>
void bias_fwd(Y* y, const float* b, int64_t N, int64_t C, int64_t ldy) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        Y* yr = y + n * ldy;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(yr[c], load(yr[c]) + b[c]);
    }
}

template <typename Y>
void bias_bwd(float* d_b, const Y* d_y, int64_t N, int64_t C, int64_t ldy) {
    // Column blocks: d_b[c] += (double sum over n of d_y[n, c]), as ete::ref.
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t blk = 0; blk < col_blocks(C); ++blk) {
        int64_t c0 = blk * kColBlock;
        int len = int(std::min<int64_t>(kColBlock, C - c0));
        double acc[kColBlock];
        sum_rows(acc, d_y + c0, N, ldy, len);
        for (int j = 0; j < len; ++j) d_b[c0 + j] += float(acc[j]);
    }
}

// Rows of ids outside [first, first + V) are zero (another vocab-parallel rank holds them).
template <typename O, typename W>
void embedding_fwd(O* out, int64_t ldo, const int32_t* ids, const W* table, int64_t ldt,
                   int64_t first, int64_t V, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        O* o = out + n * ldo;
        const int64_t row = int64_t(ids[n]) - first;
        if (row < 0 || row >= V) {
            for (int64_t c = 0; c < C; ++c) store(o[c], 0.0f);
            continue;
        }
        const W* w = table + row * ldt;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(o[c], load(w[c]));
    }
}

template <typename D>
void embedding_bwd(float* d_table, int64_t ldt, const D* d_out, int64_t ldo, const int32_t* ids,
                   int64_t first, int64_t V, int64_t N, int64_t C) {
    // Repeated ids make a row-split racy; a column split is race-free and keeps ref's order.
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t blk = 0; blk < col_blocks(C); ++blk) {
        int64_t c0 = blk * kColBlock;
        int len = int(std::min<int64_t>(kColBlock, C - c0));
        for (int64_t n = 0; n < N; ++n) {
            const int64_t row = int64_t(ids[n]) - first;
            if (row < 0 || row >= V) continue;
            float* dst = d_table + row * ldt + c0;
            const D* src = d_out + n * ldo + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) dst[j] += load(src[j]);
        }
    }
}

template <typename O>
void pos_embedding_fwd(O* out, int64_t ldo, const float* wpe, int64_t ldw, const int32_t* doc,
                       int B, int T, int64_t C) {
    int64_t rows = int64_t(B) * T;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
        O* o = out + r * ldo;
        const int64_t t = r % T, p = doc ? t - doc[r] : t;
        const float* w = wpe + p * ldw;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(o[c], load(o[c]) + w[c]);
    }
}

// Packed rows: position p = t - doc_start is used by any subset of the rows. A counting sort lists
// the rows of each position in increasing row order; each (p, column block) task then sums its
// list in that order in double, as ete::ref does (bit-identical, thread-count independent).
template <typename D>
void pos_embedding_bwd_packed(float* d_wpe, int64_t ldw, const D* d_out, int64_t ldo,
                              const int32_t* doc, int B, int T, int64_t C) {
    const int64_t rows = int64_t(B) * T;
    std::vector<int64_t> first(size_t(T) + 1, 0), order(static_cast<size_t>(rows));  // by position
    for (int64_t r = 0; r < rows; ++r) ++first[size_t(r % T - doc[r]) + 1];
    for (int p = 0; p < T; ++p) first[size_t(p) + 1] += first[size_t(p)];
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t r = 0; r < rows; ++r) order[size_t(fill[size_t(r % T - doc[r])]++)] = r;

    const int64_t nblk = col_blocks(C), tasks = int64_t(T) * nblk;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
    for (int64_t task = 0; task < tasks; ++task) {
        const int64_t p = task / nblk, c0 = (task % nblk) * kColBlock;
        const int len = int(std::min<int64_t>(kColBlock, C - c0));
        double acc[kColBlock] = {};
        for (int64_t k = first[size_t(p)]; k < first[size_t(p) + 1]; ++k) {
            const D* s = d_out + order[size_t(k)] * ldo + c0;
#pragma omp simd
            for (int j = 0; j < len; ++j) acc[j] += load(s[j]);
        }
        float* dst = d_wpe + p * ldw + c0;
        for (int j = 0; j < len; ++j) dst[j] += float(acc[j]);
    }
}

template <typename D>
void pos_embedding_bwd(float* d_wpe, int64_t ldw, const D* d_out, int64_t ldo, const int32_t* doc,
                       int B, int T, int64_t C) {
    if (doc) return pos_embedding_bwd_packed(d_wpe, ldw, d_out, ldo, doc, B, T, C);
    // Each (t, column block) is owned by one task: d_wpe[t] += double sum over b, b in order.
    int64_t nblk = col_blocks(C), tasks = int64_t(T) * nblk;
#pragma omp parallel for schedule(static) if (int64_t(B) * T * C >= kParallelMin)
    for (int64_t task = 0; task < tasks; ++task) {
        int64_t t = task / nblk, c0 = (task % nblk) * kColBlock;
        int len = int(std::min<int64_t>(kColBlock, C - c0));
        double acc[kColBlock];
        sum_rows(acc, d_out + t * ldo + c0, B, int64_t(T) * ldo, len);
        float* dst = d_wpe + t * ldw + c0;
        for (int j = 0; j < len; ++j) dst[j] += float(acc[j]);
    }
}

template <typename A>
void swiglu_fwd(A* out, int64_t ldo, const A* gu, int64_t ldg, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* g = gu + n * ldg;  // (F) gate, then (F) up
        const A* u = g + F;
        A* o = out + n * ldo;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) {
            store(o[f], swiglu_value(load(g[f]), load(u[f])));
        }
    }
}

template <typename A>
void swiglu_bwd(A* d_gu, int64_t ldd, const A* d_out, int64_t ldo, const A* gu, int64_t ldg,
                int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* g = gu + n * ldg;
        const A* u = g + F;
        const A* dy = d_out + n * ldo;
        A* d_g = d_gu + n * ldd;
        A* d_u = d_g + F;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) {
            // silu'(g) = s * (1 + g * (1 - s)); 1 - s = e * s avoids cancellation for s near 1.
            const float gv = load(g[f]), uv = load(u[f]), dv = load(dy[f]);
            float e = exp_fast(-gv);
            float s = 1.0f / (1.0f + e);
            store(d_g[f], dv * uv * s * (1.0f + gv * (e * s)));
            store(d_u[f], dv * gv * s);
        }
    }
}

// gelu(x) = 0.5 x (1 + tanh(y)), y = k (x + 0.044715 x^3). With 0.5 (1 + tanh y) = sigmoid(2y)
// this is x * sigmoid(2y), which keeps full relative accuracy where 1 + tanh(y) would cancel.
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

[[gnu::always_inline]] inline float gelu_value(float v) {
    const float y2 = 2.0f * kGeluK * (v + kGeluC * v * v * v);
    return v * sigmoid_fast(y2);
}

// d/dx [x s(2y)] = s + x s (1 - s) d(2y)/dx, with 1 - s = e s (no cancellation).
[[gnu::always_inline]] inline float gelu_grad(float v) {
    const float y2 = 2.0f * kGeluK * (v + kGeluC * v * v * v);
    const float e = exp_fast(-y2);
    const float s = 1.0f / (1.0f + e);
    const float dy2 = 2.0f * kGeluK * (1.0f + 3.0f * kGeluC * v * v);  // d(2y)/dx
    return s + v * (e * s) * s * dy2;
}

template <typename A>
void gelu_fwd(A* out, int64_t ldo, const A* x, int64_t ldx, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* xr = x + n * ldx;
        A* o = out + n * ldo;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) store(o[i], gelu_value(load(xr[i])));
    }
}

template <typename A>
void gelu_bwd(A* d_x, int64_t ldd, const A* d_out, int64_t ldo, const A* x, int64_t ldx, int64_t N,
              int64_t C) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* xr = x + n * ldx;
        const A* dy = d_out + n * ldo;
        A* dx = d_x + n * ldd;
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) store(dx[i], load(dy[i]) * gelu_grad(load(xr[i])));
    }
}

// GeGLU (Gemma): out = gelu(gate) · up over gate | up rows, as swiglu_fwd.
template <typename A>
void geglu_fwd(A* out, int64_t ldo, const A* gu, int64_t ldg, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* g = gu + n * ldg;
        const A* u = g + F;
        A* o = out + n * ldo;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) store(o[f], gelu_value(load(g[f])) * load(u[f]));
    }
}

template <typename A>
void geglu_bwd(A* d_gu, int64_t ldd, const A* d_out, int64_t ldo, const A* gu, int64_t ldg,
               int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const A* g = gu + n * ldg;
        const A* u = g + F;
        const A* dy = d_out + n * ldo;
        A* d_g = d_gu + n * ldd;
        A* d_u = d_g + F;
#pragma omp simd
        for (int64_t f = 0; f < F; ++f) {
            const float gv = load(g[f]), dv = load(dy[f]);
            store(d_g[f], dv * load(u[f]) * gelu_grad(gv));
            store(d_u[f], dv * gelu_value(gv));
        }
    }
}

void check_rows(const CMat& a, const CMat& b, const char* op) {
    ETE_CHECK(a.rows == b.rows, "{}: {} rows against {}", op, a.rows, b.rows);
}

void check_same(const CMat& a, const CMat& b, const char* op) {
    ETE_CHECK(a.rows == b.rows && a.cols == b.cols, "{}: shapes ({}, {}) and ({}, {}) differ", op,
              a.rows, a.cols, b.rows, b.cols);
}

void check_f32(DType t, const char* op, const char* what) {
    ETE_CHECK(t == DType::F32, "{}: {} must be F32, not {}", op, what, dtype_name(t));
}

void check_ids(const CVec& ids, int64_t N, const char* op) {
    ETE_CHECK(ids.dtype == DType::I32 && ids.n == N, "{}: ids must be {} I32 values, got {} {}", op,
              N, ids.n, dtype_name(ids.dtype));
}

// Packed rows' doc_start as a host pointer, validated (an invalid one would make the kernels
// read outside their tensors), or null.
const int32_t* checked_doc(const CVec& doc, int B, int T, const char* op) {
    if (doc.empty()) return nullptr;
    ETE_CHECK(doc.dtype == DType::I32 && doc.n == int64_t(B) * T,
              "{}: doc_start must be {} I32 values, got {}", op, int64_t(B) * T, doc.n);
    const int32_t* s = static_cast<const int32_t*>(doc.data);
    check_doc_start(s, B, T);
    return s;
}

}  // namespace

void CpuBackend::bias_forward(Mat y, CVec b) {
    Scope h(*this, "bias_forward");
    ETE_CHECK(b.n == y.cols, "bias_forward: bias of {} for {} columns", b.n, y.cols);
    check_f32(b.dtype, "bias_forward", "the bias");
    y = h(y);
    b = h(b);
    with_float_type(y.dtype, "bias_forward", [&](auto t) {
        using Y = decltype(t);
        bias_fwd(elems<Y>(y), elems<float>(b), y.rows, y.cols, y.ld);
    });
}

void CpuBackend::bias_backward(Vec d_b, CMat d_y) {
    Scope h(*this, "bias_backward");
    ETE_CHECK(d_b.n == d_y.cols, "bias_backward: bias of {} for {} columns", d_b.n, d_y.cols);
    check_f32(d_b.dtype, "bias_backward", "the bias gradient");
    d_b = h(d_b);
    d_y = h(d_y);
    with_float_type(d_y.dtype, "bias_backward", [&](auto t) {
        using Y = decltype(t);
        bias_bwd(elems<float>(d_b), elems<Y>(d_y), d_y.rows, d_y.cols, d_y.ld);
    });
}

void CpuBackend::embedding_forward(Mat out, CVec ids, CMat table, int64_t first_id) {
    Scope h(*this, "embedding_forward");
    check_ids(ids, out.rows, "embedding_forward");
    ETE_CHECK(table.cols == out.cols, "embedding_forward: table width {} for {} columns",
              table.cols, out.cols);
    out = h(out);
    ids = h(ids);
    table = h(table);
    with_float_type(out.dtype, "embedding_forward", [&](auto o) {
        with_float_type(table.dtype, "embedding_forward", [&](auto w) {
            using O = decltype(o);
            using W = decltype(w);
            embedding_fwd(elems<O>(out), out.ld, elems<int32_t>(ids), elems<W>(table), table.ld,
                          first_id, table.rows, out.rows, out.cols);
        });
    });
}

void CpuBackend::embedding_backward(Mat d_table, CMat d_out, CVec ids, int64_t first_id) {
    Scope h(*this, "embedding_backward");
    check_ids(ids, d_out.rows, "embedding_backward");
    check_f32(d_table.dtype, "embedding_backward", "the table gradient");
    ETE_CHECK(d_table.cols == d_out.cols, "embedding_backward: table width {} for {} columns",
              d_table.cols, d_out.cols);
    d_table = h(d_table);
    d_out = h(d_out);
    ids = h(ids);
    with_float_type(d_out.dtype, "embedding_backward", [&](auto t) {
        using D = decltype(t);
        embedding_bwd(elems<float>(d_table), d_table.ld, elems<D>(d_out), d_out.ld,
                      elems<int32_t>(ids), first_id, d_table.rows, d_out.rows, d_out.cols);
    });
}

void CpuBackend::pos_embedding_forward(Mat out, CMat wpe, CVec doc_start, int B, int T) {
    Scope h(*this, "pos_embedding_forward");
    ETE_CHECK(out.rows == int64_t(B) * T && wpe.rows >= T && wpe.cols == out.cols,
              "pos_embedding_forward: out ({}, {}), wpe ({}, {}) for B={} T={}", out.rows, out.cols,
              wpe.rows, wpe.cols, B, T);
    check_f32(wpe.dtype, "pos_embedding_forward", "wpe");
    out = h(out);
    wpe = h(wpe);
    const int32_t* doc = checked_doc(h(doc_start), B, T, "pos_embedding_forward");
    with_float_type(out.dtype, "pos_embedding_forward", [&](auto t) {
        using O = decltype(t);
        pos_embedding_fwd(elems<O>(out), out.ld, elems<float>(wpe), wpe.ld, doc, B, T, out.cols);
    });
}

void CpuBackend::pos_embedding_backward(Mat d_wpe, CMat d_out, CVec doc_start, int B, int T) {
    Scope h(*this, "pos_embedding_backward");
    ETE_CHECK(d_out.rows == int64_t(B) * T && d_wpe.rows >= T && d_wpe.cols == d_out.cols,
              "pos_embedding_backward: d_out ({}, {}), d_wpe ({}, {}) for B={} T={}", d_out.rows,
              d_out.cols, d_wpe.rows, d_wpe.cols, B, T);
    check_f32(d_wpe.dtype, "pos_embedding_backward", "d_wpe");
    d_wpe = h(d_wpe);
    d_out = h(d_out);
    const int32_t* doc = checked_doc(h(doc_start), B, T, "pos_embedding_backward");
    with_float_type(d_out.dtype, "pos_embedding_backward", [&](auto t) {
        using D = decltype(t);
        pos_embedding_bwd(elems<float>(d_wpe), d_wpe.ld, elems<D>(d_out), d_out.ld, doc, B, T,
                          d_out.cols);
    });
}

void CpuBackend::swiglu_forward(Mat out, CMat gate_up) {
    glu_forward(out, gate_up, false);
}

void CpuBackend::geglu_forward(Mat out, CMat gate_up) {
    glu_forward(out, gate_up, true);
}

void CpuBackend::swiglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) {
    glu_backward(d_gate_up, d_out, gate_up, false);
}

void CpuBackend::geglu_backward(Mat d_gate_up, CMat d_out, CMat gate_up) {
    glu_backward(d_gate_up, d_out, gate_up, true);
}

void CpuBackend::glu_forward(Mat out, CMat gate_up, bool gelu) {
    const char* op = gelu ? "geglu_forward" : "swiglu_forward";
    Scope h(*this, op);
    check_rows(out, gate_up, op);
    ETE_CHECK(gate_up.cols == 2 * out.cols && gate_up.dtype == out.dtype,
              "{}: gate_up ({}, {}) {} for out ({}, {}) {}", op, gate_up.rows, gate_up.cols,
              dtype_name(gate_up.dtype), out.rows, out.cols, dtype_name(out.dtype));
    out = h(out);
    gate_up = h(gate_up);
    with_float_type(out.dtype, op, [&](auto t) {
        using A = decltype(t);
        (gelu ? geglu_fwd<A> : swiglu_fwd<A>)(elems<A>(out), out.ld, elems<A>(gate_up), gate_up.ld,
                                              out.rows, out.cols);
    });
}

void CpuBackend::glu_backward(Mat d_gate_up, CMat d_out, CMat gate_up, bool gelu) {
    const char* op = gelu ? "geglu_backward" : "swiglu_backward";
    Scope h(*this, op);
    check_same(d_gate_up, gate_up, op);
    check_rows(d_out, gate_up, op);
    ETE_CHECK(gate_up.cols == 2 * d_out.cols && gate_up.dtype == d_out.dtype &&
                  d_gate_up.dtype == d_out.dtype,
              "{}: gate_up ({}, {}) for d_out ({}, {}), one dtype", op, gate_up.rows, gate_up.cols,
              d_out.rows, d_out.cols);
    d_gate_up = h(d_gate_up);
    d_out = h(d_out);
    gate_up = h(gate_up);
    with_float_type(d_out.dtype, op, [&](auto t) {
        using A = decltype(t);
        (gelu ? geglu_bwd<A> : swiglu_bwd<A>)(elems<A>(d_gate_up), d_gate_up.ld, elems<A>(d_out),
                                              d_out.ld, elems<A>(gate_up), gate_up.ld, d_out.rows,
                                              d_out.cols);
    });
}

void CpuBackend::gelu_forward(Mat out, CMat x) {
    Scope h(*this, "gelu_forward");
    check_same(out, x, "gelu_forward");
    ETE_CHECK(out.dtype == x.dtype, "gelu_forward: out and x must share one dtype");
    out = h(out);
    x = h(x);
    with_float_type(x.dtype, "gelu_forward", [&](auto t) {
        using A = decltype(t);
        gelu_fwd(elems<A>(out), out.ld, elems<A>(x), x.ld, x.rows, x.cols);
    });
}

void CpuBackend::gelu_backward(Mat d_x, CMat d_out, CMat x) {
    Scope h(*this, "gelu_backward");
    check_same(d_x, x, "gelu_backward");
    check_same(d_out, x, "gelu_backward");
    ETE_CHECK(d_x.dtype == x.dtype && d_out.dtype == x.dtype,
              "gelu_backward: d_x, d_out and x must share one dtype");
    d_x = h(d_x);
    d_out = h(d_out);
    x = h(x);
    with_float_type(x.dtype, "gelu_backward", [&](auto t) {
        using A = decltype(t);
        gelu_bwd(elems<A>(d_x), d_x.ld, elems<A>(d_out), d_out.ld, elems<A>(x), x.ld, x.rows,
                 x.cols);
    });
}

}  // namespace ete::cpu
