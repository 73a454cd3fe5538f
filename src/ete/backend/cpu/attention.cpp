// ete/backend/cpu/attention.cpp — optimized CPU RoPE and causal GQA flash attention.
//
// FlashAttention-2 style: queries and keys are cut into tiles; the forward keeps an online softmax
// per query (running max m and sum l) so no (T, T) score matrix exists, and the backward
// recomputes probabilities from the saved lse with D_i = dO_i . O_i. Key tiles entirely above
// the diagonal are never visited.
//
// Packed rows (AttnDims::doc_start) and sliding windows (AttnDims::window): query i sees keys
// [s_i, i], s_i its document's start raised to i - window + 1 (key_starts). s is nondecreasing
// along a row, so a forward query tile starts at the first key of its first query, and a backward
// key tile stops after the last query that sees its last key: tiles no query of which sees a key
// of are skipped. Tiles that straddle some s_i take a third mask (causal and s_i <= j); tiles
// that do not run exactly the plain causal code, and s == null is the plain causal path itself.
//
// Score tiles are stored transposed, S^T (keys, queries): queries run along the vector lanes, so
// the softmax over keys is a lane-wise max/sum down the rows (no horizontal reductions), and the
// key operand is a scalar broadcast (no transposed copy of K). Scores are in log2 units: the
// query is pre-scaled by scale * log2(e), so exp(s) = 2^(s') and exponentials are exp2.
//
// Parallelism (OpenMP, static schedule; every output element is produced by exactly one work item
// in a fixed order, so results do not depend on the thread count):
//   forward:  one item per (b, h) query head.
//   backward: one item per (b, kv head); it loops over the H/KV query heads of its group, so the
//             dK/dV of a kv head and the dQ of its query heads are written by that item alone.
// The backward loops keys outside queries (dK/dV of a key tile stay hot while every later query
// chunk passes by; dQ accumulates in a per-head buffer), and needs queries and output gradients
// both as rows and transposed.
// Scratch is a thread_local buffer that only grows: no allocation per call in steady state.
// Micro-kernels (matrix tile, transpose, exp2) live in attention_tiles.h.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include "ete/backend/cpu/attention_tiles.h"
#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/backend/cpu/simd_math.h"
#include "ete/core/error.h"

namespace ete::cpu {
namespace {

using attn::exp2_scalar;
using attn::gemm_tile;
using attn::Init;
using attn::kLanes;
using attn::round_up;

constexpr float kLog2e = std::numbers::log2e_v<float>;
constexpr float kLn2 = std::numbers::ln2_v<float>;

// Tile sizes. Query counts are lane multiples (the vector dimension of score tiles); the forward
// key tile is a multiple of its query tile so, unpacked, every key tile holds a live key for every
// query (packed rows can have all-masked rows in a tile: the running max starts finite for them).
constexpr int kFwdQ = 32;   // queries per forward tile
constexpr int kFwdK = 64;   // keys per forward tile
constexpr int kBwdK = 32;   // keys per backward tile (rows of the dK/dV accumulators)
constexpr int kBwdQ = 128;  // queries per backward chunk (the inner length of dK/dV updates)
static_assert(kFwdQ % kLanes == 0 && kFwdK % kFwdQ == 0 && kBwdK % kLanes == 0 &&
              kBwdQ % kLanes == 0);

// Validates the dims (and doc_start, whose host address d carries) and returns doc_start as a
// host pointer, or null.
const int32_t* check_dims(const char* op, const AttnDims& d) {
    ETE_CHECK(d.B >= 0 && d.T >= 0 && d.H > 0 && d.KV > 0 && d.D > 0,
              "{}: dims B={} T={} H={} KV={} D={} must be positive", op, d.B, d.T, d.H, d.KV, d.D);
    ETE_CHECK(d.H % d.KV == 0, "{}: query heads H={} must be a multiple of kv heads KV={}", op, d.H,
              d.KV);
    ETE_CHECK(d.D % 2 == 0, "{}: head dim D={} must be even (RoPE pairs j with j + D/2)", op, d.D);
    ETE_CHECK(d.window >= 0, "{}: window {} must be >= 0", op, d.window);
    ETE_CHECK(d.softcap >= 0 && std::isfinite(d.softcap), "{}: softcap {} must be finite and >= 0",
              op, d.softcap);
    if (d.doc_start.empty()) return nullptr;
    ETE_CHECK(d.doc_start.dtype == DType::I32 && d.doc_start.n == int64_t(d.B) * d.T,
              "{}: doc_start must be {} I32 values, got {}", op, int64_t(d.B) * d.T, d.doc_start.n);
    const int32_t* s = static_cast<const int32_t*>(d.doc_start.data);
    check_doc_start(s, d.B, d.T);
    return s;
}

// The first key of every query, (B*T), in a per-thread buffer that only grows: doc (the checked
// doc_start, or null) raised to the sliding window's start; doc itself when there is no window
// (null: every query's keys start at 0).
const int32_t* key_starts(const int32_t* doc, const AttnDims& d) {
    if (d.window <= 0 || d.window >= d.T) return doc;
    thread_local std::vector<int32_t> s;
    s.resize(size_t(d.B) * d.T);
    for (int b = 0; b < d.B; ++b)
        for (int t = 0; t < d.T; ++t) {
            const size_t n = size_t(b) * d.T + t;
            s[n] = d.first_key(doc ? doc[n] : 0, t);
        }
    return s.data();
}

// A (rows, cols) view of an attention operand must match the batch: rows B*T, cols `want`.
void check_operand(const char* op, const char* what, const CMat& m, const AttnDims& d,
                   int64_t want) {
    ETE_CHECK(m.rows == int64_t(d.B) * d.T && m.cols == want,
              "{}: {} is ({}, {}), expected ({}, {})", op, what, m.rows, m.cols, int64_t(d.B) * d.T,
              want);
}

// Which (key c, query r) pairs of a score tile are live: kNone all; kCausal r >= first, with
// first = shift + c (the key is not after the query); kDoc also c >= lo[r], lo[r] being the query's
// document start relative to the tile's first key.
enum class Mask { kNone, kCausal, kDoc };

template <Mask kMask>
inline bool live(int r, int c, int first, const int* lo) {
    if constexpr (kMask == Mask::kNone) return true;
    if constexpr (kMask == Mask::kCausal) return r >= first;
    return r >= first && c >= lo[r];
}

// lo[r] = s(q0 + r) - j0 for the n live queries from q0 (s relative to key j0), 0 for the rest.
void doc_offsets(int* lo, int cap, const int32_t* s, int q0, int n, int j0) {
    for (int r = 0; r < cap; ++r) lo[r] = r < n ? s[q0 + r] - j0 : 0;
}

// A bump allocator over a per-thread buffer that only grows. Views are 64-byte aligned so the
// micro-kernels can use aligned vector loads; reserve() restarts it for each work item.
class Scratch {
  public:
    static size_t padded(size_t floats) { return (floats + kAlign - 1) / kAlign * kAlign; }
    void reserve(size_t floats) {
        if (buf_.size() < floats + kAlign) buf_.resize(floats + kAlign);
        auto addr = reinterpret_cast<uintptr_t>(buf_.data());
        next_ = buf_.data() + (kAlign - (addr / sizeof(float)) % kAlign) % kAlign;
    }
    float* take(size_t floats) {
        float* p = next_;
        next_ += padded(floats);
        ETE_ASSERT(next_ <= buf_.data() + buf_.size());
        return p;
    }

  private:
    static constexpr size_t kAlign = 16;  // floats per 64 bytes
    std::vector<float> buf_;
    float* next_ = nullptr;
};

Scratch& thread_scratch() {
    thread_local Scratch s;
    return s;
}

// dst rows = mul * src rows, the first D columns only (both sides strided); element types of
// either side widen to float and round once on store.
template <typename Dst, typename Src>
void copy_rows(Dst* dst, size_t dst_ld, const Src* src, size_t src_ld, int rows, int D, float mul) {
    for (int r = 0; r < rows; ++r) {
        const Src* s = src + size_t(r) * src_ld;
        Dst* o = dst + size_t(r) * dst_ld;
#pragma omp simd
        for (int e = 0; e < D; ++e) store(o[e], load(s[e]) * mul);
    }
}

// dst(rows, Dp) = mul * src rows (row stride src_ld, D wide), zero in columns D..Dp.
template <typename Src>
void pack_rows(float* dst, int Dp, const Src* src, size_t src_ld, int rows, int D, float mul) {
    copy_rows(dst, size_t(Dp), src, src_ld, rows, D, mul);
    for (int r = 0; r < rows; ++r)
        std::fill(dst + size_t(r) * Dp + D, dst + size_t(r + 1) * Dp, 0.0f);
}

// Soft-capping (AttnDims::softcap) of a score tile in log2 units, rows of `cols` (stride ld):
// s' = s · log2e becomes cap2 · tanh(s' / cap2) with cap2 = cap · log2e, which is
// cap · tanh(s / cap) in log2 units. d_cap (same layout) or null: 1 - tanh², the derivative
// (tanh_fast, vectorised: simd_math.h).
void cap_tile(float* st, int rows, int cols, int ld, float cap2, float* d_cap) {
    for (int c = 0; c < rows; ++c)
        softcap_row(st + size_t(c) * ld, d_cap ? d_cap + size_t(c) * ld : nullptr, cols, cap2);
}

// One online-softmax step over a score tile st(nk, kFwdQ) (rows = keys j0 + c, columns = queries
// i0 + r, shift = j0 - i0). Key c is live for query r as live<kMask> says (kNone when the whole
// tile is live). Updates the running max m and sum l, overwrites st with 2^(s - m_new) (0 where
// masked) and sets alpha to 2^(m_old - m_new), the factor that rescales the output so far.
template <Mask kMask>
void softmax_step(float* st, int nk, int shift, const int* lo, float* m, float* l, float* alpha) {
    float mx[kFwdQ], sum[kFwdQ];
    std::fill(mx, mx + kFwdQ, -INFINITY);
    std::fill(sum, sum + kFwdQ, 0.0f);
    for (int c = 0; c < nk; ++c) {
        const float* row = st + c * kFwdQ;
        const int first = shift + c;
#pragma omp simd
        for (int r = 0; r < kFwdQ; ++r)
            mx[r] = std::max(mx[r], live<kMask>(r, c, first, lo) ? row[r] : -INFINITY);
    }
#pragma omp simd
    for (int r = 0; r < kFwdQ; ++r) {
        const float m_new = std::max(m[r], mx[r]);
        alpha[r] = exp2_scalar(m[r] - m_new);
        m[r] = m_new;
    }
    for (int c = 0; c < nk; ++c) {
        float* row = st + c * kFwdQ;
        const int first = shift + c;
#pragma omp simd
        for (int r = 0; r < kFwdQ; ++r) {
            const float p = exp2_scalar(row[r] - m[r]);
            row[r] = live<kMask>(r, c, first, lo) ? p : 0.0f;
            sum[r] += row[r];
        }
    }
#pragma omp simd
    for (int r = 0; r < kFwdQ; ++r) l[r] = l[r] * alpha[r] + sum[r];
}

// Forward scratch of one (b, h) work item: the head's packed operands and one tile of state.
struct HeadBuffers {
    int Dp, Tp;
    float* qt;  // (D, Tp) queries * scale*log2e, transposed, zero past T
    float* ks;  // (T, Dp) keys
    float* vs;  // (T, Dp) values
    float* st;  // (kFwdK, kFwdQ) score / probability tile, keys by queries
    float* o;   // (kFwdQ, Dp) unnormalised output of the query tile
    float m[kFwdQ] = {}, l[kFwdQ] = {}, alpha[kFwdQ] = {};  // running max (log2), sum, rescale
    int lo[kFwdQ] = {};  // packed rows: document starts relative to the current key tile
    float cap2 = 0;      // soft-cap in log2 units (cap_tile), 0: none
};

// Queries [i0, i0 + nq) against keys [s(i0), i0 + nq), s = the row's doc_start (null: s = 0):
// leaves o, m and l of the tile in hb. The running max starts at the lowest finite float, not
// -inf, so a query with no live key in a tile gets alpha = 1 and p = 0, never inf - inf.
void forward_query_tile(HeadBuffers& hb, int D, const int32_t* s, int i0, int nq) {
    const int i_end = i0 + nq, Dp = hb.Dp, j_begin = s ? s[i0] : 0;
    const int s_last = s ? s[i_end - 1] : 0;  // the largest document start of the tile
    std::fill(hb.m, hb.m + kFwdQ, std::numeric_limits<float>::lowest());
    std::fill(hb.l, hb.l + kFwdQ, 0.0f);
    for (int j0 = j_begin; j0 < i_end; j0 += kFwdK) {  // keys past the last query are skipped
        const int nk = std::min(kFwdK, i_end - j0);
        // S^T(nk, kFwdQ) = K(nk, D) Q'^T(D, kFwdQ)
        gemm_tile(hb.st, kFwdQ, hb.ks + size_t(j0) * Dp, Dp, 1, hb.qt + i0, hb.Tp, nk, D, kFwdQ,
                  Init::kZero);
        if (hb.cap2 > 0) cap_tile(hb.st, nk, kFwdQ, kFwdQ, hb.cap2, nullptr);
        if (s_last > j0) {  // some query's first key lies inside the tile
            doc_offsets(hb.lo, kFwdQ, s, i0, nq, j0);
            softmax_step<Mask::kDoc>(hb.st, nk, j0 - i0, hb.lo, hb.m, hb.l, hb.alpha);
        } else if (j0 + nk - 1 > i0) {  // the tile reaches past the first query: causal mask
            softmax_step<Mask::kCausal>(hb.st, nk, j0 - i0, nullptr, hb.m, hb.l, hb.alpha);
        } else {
            softmax_step<Mask::kNone>(hb.st, nk, j0 - i0, nullptr, hb.m, hb.l, hb.alpha);
        }
        // O(nq, Dp) = alpha * O + P(nq, nk) V(nk, Dp), P read from st transposed
        gemm_tile(hb.o, Dp, hb.st, 1, kFwdQ, hb.vs + size_t(j0) * Dp, Dp, nq, nk, Dp,
                  j0 == j_begin ? Init::kZero : Init::kScaled, hb.alpha);
    }
}

// Forward for one (b, h): out rows of head h and lse(b, h, :). doc: the host doc_start or null.
template <typename A>
void forward_head(A* out, size_t ldo, float* lse, const A* qkv, size_t S, const int32_t* doc,
                  AttnDims d, float scale, int b, int h) {
    const int T = d.T, D = d.D, Dp = round_up(D, kLanes), Tp = round_up(T, kFwdQ);
    const int kvh = h / (d.H / d.KV);
    const A* base = qkv + size_t(b) * T * S;

    Scratch& sc = thread_scratch();
    sc.reserve(Scratch::padded(size_t(D) * Tp) + Scratch::padded(size_t(T) * Dp) * 3 +
               Scratch::padded(size_t(kFwdK) * kFwdQ) + Scratch::padded(size_t(kFwdQ) * Dp));
    float* qs = sc.take(size_t(T) * Dp);  // (T, Dp) queries * scale*log2e
    HeadBuffers hb{.Dp = Dp,
                   .Tp = Tp,
                   .qt = sc.take(size_t(D) * Tp),
                   .ks = sc.take(size_t(T) * Dp),
                   .vs = sc.take(size_t(T) * Dp),
                   .st = sc.take(size_t(kFwdK) * kFwdQ),
                   .o = sc.take(size_t(kFwdQ) * Dp),
                   .cap2 = d.softcap * kLog2e};
    // Transposed from the packed copy, where 16 consecutive rows are contiguous (in qkv they are
    // a tensor row apart and would compete for one L1 set).
    pack_rows(qs, Dp, base + size_t(h) * D, S, T, D, scale * kLog2e);
    attn::transpose_pack(hb.qt, Tp, qs, size_t(Dp), T, Tp, D);
    pack_rows(hb.ks, Dp, base + size_t(d.H + kvh) * D, S, T, D, 1.0f);
    pack_rows(hb.vs, Dp, base + size_t(d.H + d.KV + kvh) * D, S, T, D, 1.0f);

    const int32_t* s = doc ? doc + size_t(b) * T : nullptr;
    for (int i0 = 0; i0 < T; i0 += kFwdQ) {
        const int nq = std::min(kFwdQ, T - i0);
        forward_query_tile(hb, D, s, i0, nq);
        A* out_rows = out + (size_t(b) * T + i0) * ldo + size_t(h) * D;
        for (int r = 0; r < nq; ++r) {
            copy_rows(out_rows + size_t(r) * ldo, 0, hb.o + size_t(r) * Dp, 0, 1, D,
                      1.0f / hb.l[r]);
            lse[(size_t(b) * d.H + h) * T + i0 + r] = (hb.m[r] + std::log2(hb.l[r])) * kLn2;
        }
    }
}

// Backward scratch of one (b, kv head) work item. Its query heads are processed one at a time
// (so scratch does not grow with H/KV); dK and dV accumulate over them for the whole sequence.
// Tp = round_up(T, 16) is the column count of transposed layouts and per-query scalars.
struct GroupBuffers {
    int Dp, Tp;
    float* ks;     // (T, Dp) keys
    float* vs;     // (T, Dp) values
    float* d_k;    // (T, Dp) dK accumulator (times 1/ln2, see backward_group)
    float* d_v;    // (T, Dp) dV accumulator
    float* q;      // (T, Dp) current head's queries * scale*log2e
    float* qt;     // (D, Tp) the same, transposed, zero past T
    float* d_o;    // (T, Dp) current head's output gradients
    float* d_ot;   // (D, Tp) the same, transposed, zero past T
    float* d_q;    // (T, Dp) sum_j dS_ij k_j; d_q = scale * this
    float* lse2;   // (Tp) lse in log2 units; +inf past T so padded queries get P = 0
    float* di;     // (Tp) D_i = dO_i . O_i; 0 past T
    float* st;     // (kBwdK, kBwdQ) probability tile P^T, keys by queries
    float* dst;    // (kBwdK, kBwdQ) dP^T, then dS^T
    float* d_cap;  // (kBwdK, kBwdQ) soft-capping: 1 - tanh² of the tile's scores; else null
    float cap2;    // soft-cap in log2 units (cap_tile), 0: none

    // Packed rows or a window only (s is null otherwise).
    const int32_t* s = nullptr;    // (T) the row's first key of each query (key_starts)
    const int* doc_end = nullptr;  // (T) one past the last query that sees each key
    int lo[kBwdQ] = {};            // first keys relative to the current key tile
};

// Packs query head h of batch b: q, dO (rows and transposed), lse2, D_i; clears d_q. d_out
// and out have row stride ldo, qkv S.
template <typename A>
void pack_head(GroupBuffers& g, const A* d_out, const A* out, size_t ldo, const float* lse,
               const A* qkv, size_t S, AttnDims d, float scale, int b, int h) {
    const int T = d.T, D = d.D, Dp = g.Dp, Tp = g.Tp;
    const A* dy = d_out + size_t(b) * T * ldo + size_t(h) * D;
    const A* o = out + size_t(b) * T * ldo + size_t(h) * D;
    // Transposed from the packed rows (contiguous), as in forward_head.
    pack_rows(g.q, Dp, qkv + size_t(b) * T * S + size_t(h) * D, S, T, D, scale * kLog2e);
    attn::transpose_pack(g.qt, Tp, g.q, size_t(Dp), T, Tp, D);
    pack_rows(g.d_o, Dp, dy, ldo, T, D, 1.0f);
    attn::transpose_pack(g.d_ot, Tp, g.d_o, size_t(Dp), T, Tp, D);
    std::fill(g.d_q, g.d_q + size_t(T) * Dp, 0.0f);
    for (int i = 0; i < T; ++i) {
        const A* dyi = dy + size_t(i) * ldo;
        const A* oi = o + size_t(i) * ldo;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int e = 0; e < D; ++e) acc += load(dyi[e]) * load(oi[e]);
        g.di[i] = acc;
        g.lse2[i] = lse[(size_t(b) * d.H + h) * T + i] * kLog2e;
    }
    std::fill(g.lse2 + T, g.lse2 + Tp, INFINITY);
    std::fill(g.di + T, g.di + Tp, 0.0f);
}

// Probabilities and their softmax gradient on a transposed tile pair (rows = keys j0 + c,
// columns = queries c0 + r, shift = j0 - c0): st = 2^(s - lse2) where live<kMask> (kNone when the
// whole tile is live), else 0; then dst = st * (dst - di), which turns dP^T into dS^T.
template <Mask kMask>
void probs_and_dsoft(float* st, float* dst, int nk, int ncols, int shift, const int* lo,
                     const float* lse2, const float* di) {
    for (int c = 0; c < nk; ++c) {
        float* p = st + size_t(c) * kBwdQ;
        float* ds = dst + size_t(c) * kBwdQ;
        const int first = shift + c;
#pragma omp simd
        for (int r = 0; r < ncols; ++r) {
            const float e = exp2_scalar(p[r] - lse2[r]);
            p[r] = live<kMask>(r, c, first, lo) ? e : 0.0f;
            ds[r] = p[r] * (ds[r] - di[r]);
        }
    }
}

// The current head's queries against keys [j0, j0 + nk): updates dK, dV of those keys and dQ.
// Queries before the tile, and (packed, windowed) after the last that sees its last key, see none
// of it.
void backward_key_tile(GroupBuffers& g, int T, int D, int j0, int nk) {
    const int Dp = g.Dp, Tp = g.Tp, q_end = g.s ? g.doc_end[j0 + nk - 1] : T;
    const float* kr = g.ks + size_t(j0) * Dp;
    const float* vr = g.vs + size_t(j0) * Dp;
    float* dk = g.d_k + size_t(j0) * Dp;
    float* dv = g.d_v + size_t(j0) * Dp;
    for (int c0 = j0; c0 < q_end; c0 += kBwdQ) {
        // Columns nq..ncols are computed but never read back (the updates below stop at nq).
        const int nq = std::min(kBwdQ, q_end - c0), ncols = round_up(nq, kLanes);
        // S^T(nk, ncols) = K Q'^T and dP^T = V dO^T
        gemm_tile(g.st, kBwdQ, kr, Dp, 1, g.qt + c0, Tp, nk, D, ncols, Init::kZero);
        gemm_tile(g.dst, kBwdQ, vr, Dp, 1, g.d_ot + c0, Tp, nk, D, ncols, Init::kZero);
        const int shift = j0 - c0;
        if (g.cap2 > 0) cap_tile(g.st, nk, ncols, kBwdQ, g.cap2, g.d_cap);
        if (g.s && g.s[c0 + nq - 1] > j0) {  // some query's first key lies inside the tile
            doc_offsets(g.lo, kBwdQ, g.s, c0, nq, j0);
            probs_and_dsoft<Mask::kDoc>(g.st, g.dst, nk, ncols, shift, g.lo, g.lse2 + c0,
                                        g.di + c0);
        } else if (j0 + nk - 1 > c0) {  // the tile reaches past the first query: causal mask
            probs_and_dsoft<Mask::kCausal>(g.st, g.dst, nk, ncols, shift, nullptr, g.lse2 + c0,
                                           g.di + c0);
        } else {
            probs_and_dsoft<Mask::kNone>(g.st, g.dst, nk, ncols, shift, nullptr, g.lse2 + c0,
                                         g.di + c0);
        }
        if (g.cap2 > 0) {  // dS of the capped scores -> of the raw ones
            for (int c = 0; c < nk; ++c) {
                float* ds = g.dst + size_t(c) * kBwdQ;
                const float* dc = g.d_cap + size_t(c) * kBwdQ;
#pragma omp simd
                for (int r = 0; r < ncols; ++r) ds[r] *= dc[r];
            }
        }
        const size_t q_off = size_t(c0) * Dp;
        // dV += P^T dO, dK += dS^T Q', dQ += dS K (dS read from dst transposed)
        gemm_tile(dv, Dp, g.st, kBwdQ, 1, g.d_o + q_off, Dp, nk, nq, Dp, Init::kLoad);
        gemm_tile(dk, Dp, g.dst, kBwdQ, 1, g.q + q_off, Dp, nk, nq, Dp, Init::kLoad);
        gemm_tile(g.d_q + q_off, Dp, g.dst, 1, kBwdQ, kr, Dp, nq, nk, Dp, Init::kLoad);
    }
}

// end[j] = one past the last query that sees key j (s = a row's first keys, nondecreasing: the
// queries with s_i <= j are a prefix), in a per-thread buffer that only grows.
const int* query_ends(const int32_t* s, int T) {
    thread_local std::vector<int> end;
    if (end.size() < size_t(T)) end.resize(size_t(T));
    int i = 0;
    for (int j = 0; j < T; ++j) {
        while (i < T && s[i] <= j) ++i;
        end[size_t(j)] = i;
    }
    return end.data();
}

// The row strides of one attention call's operands.
struct Strides {
    size_t qkv, d_qkv, out, d_out;
};

// Backward for one (b, kv head): writes d_qkv for its G query heads, its key and value head.
template <typename A>
void backward_group(A* d_qkv, const A* d_out, const A* out, const float* lse, const A* qkv,
                    const Strides& ld, const int32_t* doc, AttnDims d, float scale, int b,
                    int kvh) {
    const int T = d.T, D = d.D, Dp = round_up(D, kLanes), G = d.H / d.KV, Tp = round_up(T, kLanes);
    const size_t S = ld.qkv, rows = size_t(T) * Dp, cols = size_t(D) * Tp;
    const size_t score = size_t(kBwdK) * kBwdQ;
    Scratch& sc = thread_scratch();
    const bool cap = d.softcap > 0;
    sc.reserve(Scratch::padded(rows) * 7 + Scratch::padded(cols) * 2 + Scratch::padded(Tp) * 2 +
               Scratch::padded(score) * (cap ? 3 : 2));
    GroupBuffers g{.Dp = Dp,
                   .Tp = Tp,
                   .ks = sc.take(rows),
                   .vs = sc.take(rows),
                   .d_k = sc.take(rows),
                   .d_v = sc.take(rows),
                   .q = sc.take(rows),
                   .qt = sc.take(cols),
                   .d_o = sc.take(rows),
                   .d_ot = sc.take(cols),
                   .d_q = sc.take(rows),
                   .lse2 = sc.take(size_t(Tp)),
                   .di = sc.take(size_t(Tp)),
                   .st = sc.take(score),
                   .dst = sc.take(score),
                   .d_cap = cap ? sc.take(score) : nullptr,
                   .cap2 = d.softcap * kLog2e};
    if (doc) {
        g.s = doc + size_t(b) * T;
        g.doc_end = query_ends(g.s, T);
    }
    const A* base = qkv + size_t(b) * T * S;
    const size_t k_off = size_t(d.H + kvh) * D, v_off = size_t(d.H + d.KV + kvh) * D;
    pack_rows(g.ks, Dp, base + k_off, S, T, D, 1.0f);
    pack_rows(g.vs, Dp, base + v_off, S, T, D, 1.0f);
    std::fill(g.d_k, g.d_k + rows, 0.0f);
    std::fill(g.d_v, g.d_v + rows, 0.0f);

    const size_t dS = ld.d_qkv;
    A* d_base = d_qkv + size_t(b) * T * dS;
    for (int h = kvh * G; h < (kvh + 1) * G; ++h) {
        pack_head(g, d_out, out, ld.out, lse, qkv, S, d, scale, b, h);
        for (int j0 = 0; j0 < T; j0 += kBwdK)
            backward_key_tile(g, T, D, j0, std::min(kBwdK, T - j0));
        copy_rows(d_base + size_t(h) * D, dS, g.d_q, size_t(Dp), T, D, scale);
    }
    // dK = scale * sum dS q = ln2 * sum dS q' since q' = q * scale * log2e.
    copy_rows(d_base + k_off, dS, g.d_k, size_t(Dp), T, D, kLn2);
    copy_rows(d_base + v_off, dS, g.d_v, size_t(Dp), T, D, 1.0f);
}

// Elements below which RoPE runs on the calling thread: a parallel region costs more.
constexpr int64_t kRopeParallelMin = 32768;

// In-place rotate-half rotation of the first 2·half dims of the q and k heads at position t - s
// (packed rows) or t; sign = +1 forward, -1 the transpose (backward).
template <typename A>
void rope_apply(A* x, size_t S, const float* cos, const float* sin, size_t ldt, int half,
                const int32_t* doc, AttnDims d, float sign) {
    const int heads = d.H + d.KV;
    const int64_t N = int64_t(d.B) * d.T;
#pragma omp parallel for schedule(static) if (N * heads * d.D > kRopeParallelMin)
    for (int64_t n = 0; n < N; ++n) {
        const size_t t = size_t(n % d.T - (doc ? doc[n] : 0));
        const float* c = cos + t * ldt;
        const float* s = sin + t * ldt;
        for (int h = 0; h < heads; ++h) {
            A* v = x + size_t(n) * S + size_t(h) * d.D;
#pragma omp simd
            for (int j = 0; j < half; ++j) {
                const float x0 = load(v[j]), x1 = load(v[j + half]), sn = sign * s[j];
                store(v[j], x0 * c[j] - x1 * sn);
                store(v[j + half], x1 * c[j] + x0 * sn);
            }
        }
    }
}

void check_tables(const char* op, const CMat& cos, const CMat& sin, const AttnDims& d) {
    ETE_CHECK(cos.dtype == DType::F32 && sin.dtype == DType::F32 && cos.rows >= d.T &&
                  sin.rows >= d.T && cos.cols >= 1 && 2 * cos.cols <= d.D && sin.cols == cos.cols,
              "{}: cos/sin tables must be F32 (>= {}, R/2) for a rotary width R <= {}", op, d.T,
              d.D);
}

void rope_op(Mat x, CMat cos, CMat sin, const AttnDims& d, const char* op, float sign) {
    const int32_t* doc = check_dims(op, d);
    check_operand(op, "qkv", x, d, d.qkv_stride());
    check_tables(op, cos, sin, d);
    with_float_type(x.dtype, op, [&](auto t) {
        using A = decltype(t);
        rope_apply(elems<A>(x), size_t(x.ld), elems<float>(cos), elems<float>(sin), size_t(cos.ld),
                   int(cos.cols), doc, d, sign);
    });
}

}  // namespace

void CpuBackend::rope_forward(Mat qkv, CMat cos, CMat sin, AttnDims d) {
    Scope h(*this, "rope");
    rope_op(h(qkv), h(cos), h(sin), h(d), "rope_forward", 1.0f);
}

void CpuBackend::rope_backward(Mat d_qkv, CMat cos, CMat sin, AttnDims d) {
    Scope h(*this, "rope");
    rope_op(h(d_qkv), h(cos), h(sin), h(d), "rope_backward", -1.0f);
}

void CpuBackend::attention_forward(Mat out, Vec lse, CMat qkv, AttnDims d, float scale) {
    Scope h(*this, "attention_forward");
    out = h(out);
    lse = h(lse);
    qkv = h(qkv);
    d = h(d);
    const int32_t* doc = key_starts(check_dims("attention_forward", d), d);
    check_operand("attention_forward", "qkv", qkv, d, d.qkv_stride());
    check_operand("attention_forward", "out", out, d, int64_t(d.H) * d.D);
    ETE_CHECK(lse.n == int64_t(d.B) * d.H * d.T && lse.dtype == DType::F32,
              "attention_forward: lse must be B*H*T = {} F32", int64_t(d.B) * d.H * d.T);
    ETE_CHECK(out.dtype == qkv.dtype, "attention_forward: out and qkv must share one dtype");
    with_float_type(qkv.dtype, "attention_forward", [&](auto t) {
        using A = decltype(t);
        const int items = d.B * d.H;
        A* o = elems<A>(out);
        const A* q = elems<A>(qkv);
        float* l = elems<float>(lse);
#pragma omp parallel for schedule(static)
        for (int it = 0; it < items; ++it)
            forward_head(o, size_t(out.ld), l, q, size_t(qkv.ld), doc, d, scale, it / d.H,
                         it % d.H);
    });
}

void CpuBackend::attention_backward(Mat d_qkv, CMat d_out, CMat out, CVec lse, CMat qkv, AttnDims d,
                                    float scale) {
    Scope h(*this, "attention_backward");
    d_qkv = h(d_qkv);
    d_out = h(d_out);
    out = h(out);
    lse = h(lse);
    qkv = h(qkv);
    d = h(d);
    const char* op = "attention_backward";
    const int32_t* doc = key_starts(check_dims(op, d), d);
    check_operand(op, "qkv", qkv, d, d.qkv_stride());
    check_operand(op, "d_qkv", d_qkv, d, d.qkv_stride());
    check_operand(op, "out", out, d, int64_t(d.H) * d.D);
    check_operand(op, "d_out", d_out, d, int64_t(d.H) * d.D);
    ETE_CHECK(lse.n == int64_t(d.B) * d.H * d.T && lse.dtype == DType::F32,
              "{}: lse must be B*H*T = {} F32", op, int64_t(d.B) * d.H * d.T);
    ETE_CHECK(d_qkv.dtype == qkv.dtype && d_out.dtype == qkv.dtype && out.dtype == qkv.dtype,
              "{}: d_qkv, d_out, out and qkv must share one dtype", op);
    ETE_CHECK(d_out.ld == out.ld, "{}: d_out and out must share one row stride", op);
    const Strides ld{size_t(qkv.ld), size_t(d_qkv.ld), size_t(out.ld), size_t(d_out.ld)};
    with_float_type(qkv.dtype, op, [&](auto t) {
        using A = decltype(t);
        const int items = d.B * d.KV;
        A* dq = elems<A>(d_qkv);
        const A *dy = elems<A>(d_out), *o = elems<A>(out), *q = elems<A>(qkv);
        const float* l = elems<float>(lse);
#pragma omp parallel for schedule(static)
        for (int it = 0; it < items; ++it)
            backward_group(dq, dy, o, l, q, ld, doc, d, scale, it / d.KV, it % d.KV);
    });
}

}  // namespace ete::cpu
