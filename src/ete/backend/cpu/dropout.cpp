// ete/backend/cpu/dropout.cpp — counter-based dropout (backend.h DropoutMask).
//
// Each element's keep decision is one Philox word of its global index, so a row's mask does not
// depend on the thread count or on which rank holds which columns. A row's words come from
// CounterRng::words in chunks (16 Philox blocks at a time, vectorised), then one select loop.
#include <algorithm>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/core/rng.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which a parallel region costs more
constexpr int64_t kChunk = 1024;           // mask words generated at a time

template <typename Y, typename X>
void dropout_rows(Y* y, int64_t ldy, const X* x, int64_t ldx, int64_t rows, int64_t cols,
                  const DropoutMask& m, bool accumulate) {
    const CounterRng rng(m.seed, m.stream);
    const uint32_t thr = m.threshold();
    const float s = m.keep_scale();
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMin)
    for (int64_t i = 0; i < rows; ++i) {
        const uint64_t e0 = (m.row0 + uint64_t(i)) * m.row_stride + m.col0;
        Y* o = y + i * ldy;
        const X* in = x + i * ldx;
        uint32_t w[kChunk];
        float v[kChunk];
        for (int64_t j0 = 0; j0 < cols; j0 += kChunk) {
            const int64_t n = std::min(kChunk, cols - j0);
            rng.words(e0 + uint64_t(j0), n, w);
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) v[j] = w[j] >= thr ? load(in[j0 + j]) * s : 0.0f;
            // x·s is stored (rounded) before the sum: no fma, the reference's two roundings.
            if (accumulate) {
#pragma omp simd
                for (int64_t j = 0; j < n; ++j) store(o[j0 + j], load(o[j0 + j]) + v[j]);
            } else {
#pragma omp simd
                for (int64_t j = 0; j < n; ++j) store(o[j0 + j], v[j]);
            }
        }
    }
}

}  // namespace

void CpuBackend::dropout(Mat y, CMat x, const DropoutMask& m, bool accumulate) {
    Scope h(*this, "dropout");
    ETE_CHECK(y.rows == x.rows && y.cols == x.cols, "dropout: x ({}, {}) for y ({}, {})", x.rows,
              x.cols, y.rows, y.cols);
    ETE_CHECK(m.p >= 0.0f && m.p < 1.0f, "dropout: p = {}, expected [0, 1)", m.p);
    ETE_CHECK(uint64_t(m.col0) + uint64_t(x.cols) <= m.row_stride || x.rows == 0,
              "dropout: columns [{}, {}) outside the row stride {}", m.col0, m.col0 + x.cols,
              m.row_stride);
    y = h(y);
    x = h(x);
    with_float_type(y.dtype, "dropout", [&](auto ty) {
        with_float_type(x.dtype, "dropout", [&](auto tx) {
            using Y = decltype(ty);
            using X = decltype(tx);
            dropout_rows(elems<Y>(y), y.ld, elems<X>(x), x.ld, y.rows, y.cols, m, accumulate);
        });
    });
}

}  // namespace ete::cpu
