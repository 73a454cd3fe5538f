// ete/core/dtype.cpp
#include "ete/core/dtype.h"

#include <cmath>

#include "ete/core/error.h"

namespace ete {
namespace {

struct DTypeInfo {
    DType type;
    const char* name;
    size_t size;
};

constexpr DTypeInfo kInfo[] = {
    {DType::F32, "F32", 4},   {DType::F64, "F64", 8}, {DType::BF16, "BF16", 2},
    {DType::F16, "F16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2}, {DType::I32, "I32", 4},
    {DType::U32, "U32", 4},   {DType::I64, "I64", 8}, {DType::U64, "U64", 8},
    {DType::BOOL, "BOOL", 1},
};

}  // namespace

size_t dtype_size(DType t) {
    return kInfo[size_t(t)].size;
}
std::string_view dtype_name(DType t) {
    return kInfo[size_t(t)].name;
}

bool dtype_from_name(std::string_view name, DType* out) {
    for (const auto& i : kInfo) {
        if (name == i.name) {
            *out = i.type;
            return true;
        }
    }
    return false;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = std::ldexp(float(man), -24);  // zero or subnormal
        return sign ? -f : f;
    }
    uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13))
                           : (sign | ((exp + 112u) << 23) | (man << 13));
    std::memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    float a = std::fabs(f);
    if (std::isnan(f)) return uint16_t(sign | 0x7e00u);
    if (a >= 65520.0f) return uint16_t(sign | 0x7c00u);  // rounds to inf
    if (a < 6.103515625e-05f) {                          // subnormal: multiples of 2^-24
        return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
    }
    uint32_t v = u & 0x7fffffffu;
    v += 0xfffu + ((v >> 13) & 1u);  // round to nearest even on the 13 dropped bits
    return uint16_t(sign | uint16_t(((v >> 23) - 112u) << 10 | ((v >> 13) & 0x3ffu)));
}

void convert_to_f32(float* dst, const void* src, DType t, size_t n) {
    const auto* b = static_cast<const unsigned char*>(src);
    switch (t) {
        case DType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::F64:
            for (size_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, b + 8 * i, 8);
                dst[i] = float(d);
            }
            return;
        case DType::BF16:
        case DType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, b + 2 * i, 2);
                dst[i] = t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
            return;
        default:
            throw_error(fmt::format("convert_to_f32: dtype {} is not a float type", dtype_name(t)));
    }
}

void convert_from_f32(void* dst, DType t, const float* src, size_t n) {
    auto* b = static_cast<unsigned char*>(dst);
    switch (t) {
        case DType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case DType::BF16:
        case DType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h = t == DType::BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
                std::memcpy(b + 2 * i, &h, 2);
            }
            return;
        default:
            throw_error(fmt::format("convert_from_f32: cannot store f32 as {}", dtype_name(t)));
    }
}

}  // namespace ete
