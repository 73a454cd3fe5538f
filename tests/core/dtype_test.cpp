// tests/core/dtype_test.cpp — storage conversions (bf16 round-to-nearest-even, f16) and tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ete/core/arena.h"
#include "ete/core/dtype.h"
#include "ete/core/tensor.h"
#include "ete/core/view.h"

namespace ete {

static float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(DType, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties go to even (1.0).
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000u)), 0x3f80);
    // 1.0078125 + half ulp: tie, the odd mantissa rounds up to even.
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000u)), 0x3f82);
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // just above halfway rounds up
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(from_bits(0x7f7fffffu)))));  // max rounds up
}

TEST(DType, F16RoundTripAndSpecials) {
    for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
        EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
    }
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
    EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // halfway: ties to even
    EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
}

TEST(DType, ConvertBuffersUnaligned) {
    float src[3] = {1.5f, -0.25f, 3.0f};
    unsigned char raw[7];
    convert_from_f32(raw + 1, DType::BF16, src, 3);  // deliberately odd address
    float back[3];
    convert_to_f32(back, raw + 1, DType::BF16, 3);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], src[i]);
    DType t;
    EXPECT_TRUE(dtype_from_name("BF16", &t));
    EXPECT_EQ(t, DType::BF16);
    EXPECT_FALSE(dtype_from_name("bf16", &t));
}

TEST(Tensor, ShapeChecksAndArenaAlignment) {
    EXPECT_THROW(shape_numel({-1, 2}), Error);
    EXPECT_THROW(shape_numel({int64_t(1) << 62, 8}), Error);
    EXPECT_EQ(shape_numel({}), 1);
    Tensor z = Tensor::zeros({3, 5});
    EXPECT_EQ(z.numel(), 15);
    EXPECT_EQ(z.f32()[14], 0.0f);
    Arena counting;
    EXPECT_TRUE(counting.alloc_vec(DType::F32, 3).empty());  // counting hands out no memory
    counting.alloc_mat(DType::BF16, 17, 2);
    EXPECT_EQ(counting.used(), 64u + 128u);  // each block rounded up to 64 bytes
    std::shared_ptr<void> block = aligned_alloc_shared(counting.used());
    Arena a;
    a.reset(block.get(), counting.used());
    Vec p = a.alloc_vec(DType::F32, 3);
    Mat q = a.alloc_mat(DType::BF16, 17, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q.data) % 64, 0u);
    EXPECT_EQ(static_cast<char*>(q.data) - static_cast<char*>(p.data), 64);
    EXPECT_EQ(q.dtype, DType::BF16);
    EXPECT_EQ(q.span_bytes(), 17u * 2 * 2);
}

// Views: slices move by whole elements of their dtype and keep the row stride.
TEST(View, SlicesAndFlattening) {
    std::vector<uint16_t> buf(6 * 10);
    Mat m(buf.data(), DType::BF16, 6, 8, 10);  // rows 10 elements apart
    EXPECT_FALSE(m.contiguous());
    Mat r = m.row_slice(2, 3);
    EXPECT_EQ(r.data, buf.data() + 20);
    EXPECT_EQ(r.ld, 10);
    Mat c = m.col_slice(5, 3);
    EXPECT_EQ(c.data, buf.data() + 5);
    EXPECT_EQ(c.cols, 3);
    EXPECT_EQ(c.span_bytes(), size_t(5 * 10 + 3) * 2);
    Vec v(buf.data(), DType::F32, 30);
    EXPECT_EQ(v.slice(4, 2).data, reinterpret_cast<char*>(buf.data()) + 16);
    EXPECT_EQ(Mat(buf.data(), DType::F32, 3, 4).flat().n, 12);
    EXPECT_EQ(Mat(buf.data(), DType::F32, 3, 4).reshaped(6, 2).cols, 2);
    CMat const_view = m;  // mutable converts to read-only, not back
    EXPECT_EQ(const_view.rows, 6);
}

}  // namespace ete
