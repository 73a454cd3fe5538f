// ete/core/dtype.h — element types. Compute is always f32; bf16/f16 are storage formats that are
// converted on load (bf16 with round-to-nearest-even on the way down).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ete {

enum class DType : uint8_t { F32, F64, BF16, F16, I8, U8, I16, U16, I32, U32, I64, U64, BOOL };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
bool dtype_from_name(std::string_view name, DType* out);

// v itself, rounded to fp32 where it stands: a compiler allowed to contract a · b + c into one
// fma (GCC does by default, across statements too) cannot fuse through it. For results that two
// implementations (a kernel and its reference) must round identically.
inline float fp32_rounded(float v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    asm("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
    asm("" : "+w"(v));
#else
    volatile float t = v;
    v = t;
#endif
    return v;
}

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of a storage dtype (F32, F64, BF16, F16) to f32; src may be unaligned.
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);
// Converts n f32 values to F32, BF16 or F16; dst may be unaligned.
void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n);

}  // namespace ete
