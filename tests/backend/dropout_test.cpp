// tests/backend/dropout_test.cpp — the counter-based dropout op (backend.h DropoutMask): the CPU
// and guarded backends against the reference bit for bit (dtype pairs, strided views, column
// offsets that are not multiples of 4, accumulate), each element against the mask's definition,
// the keep rate, and layout invariance (a block computed in column or row pieces, each with its
// own offsets, equals the block computed whole).
#include <gtest/gtest.h>

#include "ete/core/rng.h"
#include "kernel_bounds.h"

namespace ete::backend_test {
namespace {

DropoutMask mask_of(float p, uint64_t stream, uint64_t row0, uint64_t stride, uint64_t col0) {
    DropoutMask m;
    m.seed = 0x5eedULL;
    m.stream = stream;
    m.row0 = row0;
    m.row_stride = stride;
    m.col0 = col0;
    m.p = p;
    return m;
}

struct Pair {
    DType y, x;
};

class Dropout : public ::testing::TestWithParam<Pair> {};

TEST_P(Dropout, CpuAndGuardedMatchReferenceBitForBit) {
    const Pair t = GetParam();
    auto ref = make_ref_backend();
    auto cpu = make_cpu_backend();
    const int64_t rows = 37, cols = 203;  // odd: rows start at every residue of e mod 4
    const FVec xv = random_vec(size_t(rows * cols), 3), yv = random_vec(size_t(rows * cols), 4);
    for (bool acc : {false, true}) {
        const DropoutMask m = mask_of(0.3f, 77, 1000, 517, 11);
        const Buf x = Buf::of(t.x, xv, rows, cols, cols + 5);
        Buf yr = Buf::of(t.y, yv, rows, cols, cols + 3), yc = yr;
        ref->dropout(yr.mat(), x.cmat(), m, acc);
        cpu->dropout(yc.mat(), x.cmat(), m, acc);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
                ASSERT_EQ(yr.at(i, j), yc.at(i, j))
                    << "accumulate " << acc << " at " << i << "," << j;
        ASSERT_TRUE(yr.same_bytes(yc)) << "accumulate " << acc;  // padding columns untouched too
        // Against the definition, element by element.
        const CounterRng rng(m.seed, m.stream);
        int64_t kept = 0;
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
                const uint64_t e = (m.row0 + uint64_t(i)) * m.row_stride + m.col0 + uint64_t(j);
                const bool keep = rng.word(e) >= m.threshold();
                kept += keep;
                const float v = keep ? float(x.at(i, j)) * m.keep_scale() : 0.0f;
                Buf want(t.y, 1, 1);
                want.set(0, 0, acc ? float(Buf::of(t.y, yv, rows, cols).at(i, j)) + v : v);
                ASSERT_EQ(yc.at(i, j), want.at(0, 0)) << i << "," << j;
            }
        // A statistical check of the counter RNG, not rounding: the keep rate of 7511
        // Bernoulli(0.7) draws has sigma = sqrt(0.21 / 7511) = 0.0053; 0.02 is 3.8 sigma.
        EXPECT_NEAR(double(kept) / double(rows * cols), 0.7, 0.02);
    }
    auto guarded = make_guarded_backend();
    const DropoutMask m = mask_of(0.5f, 78, 3, 300, 40);
    const Buf x = Buf::of(t.x, xv, rows, cols);
    Buf yc = Buf::of(t.y, yv, rows, cols);
    cpu->dropout(yc.mat(), x.cmat(), m, true);
    DeviceBuffer dx(*guarded, size_t(rows * cols) * dtype_size(t.x));
    DeviceBuffer dy(*guarded, size_t(rows * cols) * dtype_size(t.y));
    const Buf y0 = Buf::of(t.y, yv, rows, cols);
    guarded->upload(dx.data(), x.cmat().data, dx.bytes());
    guarded->upload(dy.data(), y0.cmat().data, dy.bytes());
    guarded->dropout({dy.data(), t.y, rows, cols}, {dx.data(), t.x, rows, cols}, m, true);
    Buf yg(t.y, rows, cols);
    guarded->download(yg.mat().data, dy.data(), dy.bytes());
    EXPECT_TRUE(yg.same_bytes(yc));
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, Dropout,
    ::testing::Values(Pair{DType::F32, DType::F32}, Pair{DType::BF16, DType::BF16},
                      Pair{DType::F16, DType::F16}, Pair{DType::BF16, DType::F32},
                      Pair{DType::F32, DType::BF16}),
    [](const auto& info) { return std::string(dname(info.param.y)) + "_" + dname(info.param.x); });

// Which rank holds which columns or rows must not change a single element: a (rows, cols)
// block of a (·, W) global tensor computed as two column shards (col0 = 0 and c1) and as two row
// chunks (row0 and row0 + r1) equals the block computed whole.
TEST(Dropout, ShardsOfABlockGiveTheWholeBlock) {
    auto cpu = make_cpu_backend();
    const int64_t rows = 24, W = 90, c1 = 37, r1 = 10;
    const FVec xv = random_vec(size_t(rows * W), 9);
    const Buf x = Buf::of(DType::F32, xv, rows, W);
    const DropoutMask whole = mask_of(0.25f, 5, 480, W, 0);
    Buf yw(DType::F32, rows, W);
    cpu->dropout(yw.mat(), x.cmat(), whole);
    Buf ys(DType::F32, rows, W);
    for (auto [c0, n] : {std::pair<int64_t, int64_t>{0, c1}, {c1, W - c1}}) {
        DropoutMask m = whole;
        m.col0 = uint64_t(c0);
        cpu->dropout(ys.mat().col_slice(c0, n), x.cmat().col_slice(c0, n), m);
    }
    EXPECT_TRUE(ys.same_bytes(yw));
    Buf yr(DType::F32, rows, W);
    for (auto [r0, n] : {std::pair<int64_t, int64_t>{0, r1}, {r1, rows - r1}}) {
        DropoutMask m = whole;
        m.row0 = whole.row0 + uint64_t(r0);
        cpu->dropout(yr.mat().row_slice(r0, n), x.cmat().row_slice(r0, n), m);
    }
    EXPECT_TRUE(yr.same_bytes(yw));
    // Another stream draws another mask.
    DropoutMask other = whole;
    other.stream = 6;
    Buf yo(DType::F32, rows, W);
    cpu->dropout(yo.mat(), x.cmat(), other);
    EXPECT_FALSE(yo.same_bytes(yw));
}

TEST(Dropout, ZeroProbabilityCopiesAndBadArgumentsAreErrors) {
    auto cpu = make_cpu_backend();
    const FVec xv = random_vec(60, 2);
    const Buf x = Buf::of(DType::F32, xv, 6, 10);
    Buf y(DType::F32, 6, 10);
    cpu->dropout(y.mat(), x.cmat(), mask_of(0.0f, 1, 0, 10, 0));
    EXPECT_TRUE(y.same_bytes(x));
    EXPECT_EQ(error_of([&] { cpu->dropout(y.mat(), x.cmat(), mask_of(1.0f, 1, 0, 10, 0)); }),
              "dropout: p = 1, expected [0, 1)");
    EXPECT_EQ(error_of([&] { cpu->dropout(y.mat(), x.cmat(), mask_of(0.1f, 1, 0, 8, 0)); }),
              "dropout: columns [0, 10) outside the row stride 8");
    Buf z(DType::F32, 5, 10);
    EXPECT_EQ(error_of([&] { cpu->dropout(z.mat(), x.cmat(), mask_of(0.1f, 1, 0, 10, 0)); }),
              "dropout: x (6, 10) for y (5, 10)");
}

}  // namespace
}  // namespace ete::backend_test
