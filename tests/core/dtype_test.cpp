// tests/core/dtype_test.cpp — storage conversions (bf16 round-to-nearest-even, f16) and tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ete/core/arena.h"
#include "ete/core/dtype.h"
#include "ete/core/tensor.h"

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
    counting.alloc_f32(3);
    counting.alloc_f32(17);
    EXPECT_EQ(counting.used(), 64u + 128u);  // each block rounded up to 64 bytes
    Arena a(counting.used());
    float* p = a.alloc_f32(3);
    float* q = a.alloc_f32(17);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
    EXPECT_EQ(q - p, 16);
}

}  // namespace ete
