// ete/backend/cpu/dropout.cpp — counter-based dropout (backend.h DropoutMask).
//
// Each element's keep decision is one Philox word of its global index, so a row's mask does not
// depend on the thread count or on which rank holds which columns. A row walks its indices in
// order and computes one Philox block per four of them (CounterRng::word's grouping).
#include <array>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/elem.h"
#include "ete/core/rng.h"

namespace ete::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 14;  // elements below which a parallel region costs more

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
        std::array<uint32_t, 4> w = rng.block(e0 >> 2);
        for (int64_t j = 0; j < cols; ++j) {
            const uint64_t e = e0 + uint64_t(j);
            if ((e & 3) == 0 && j > 0) w = rng.block(e >> 2);
            // Rounded before the sum: no fma, so the reference's two roundings are ours.
            const float v = w[e & 3] >= thr ? fp32_rounded(load(in[j]) * s) : 0.0f;
            store(o[j], accumulate ? load(o[j]) + v : v);
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
