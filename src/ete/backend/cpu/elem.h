// ete/backend/cpu/elem.h — element types of the host kernels (CPU and reference backends) and the
// one dtype switch of each op.
//
// Kernels are templates over the element type of their 16-bit-capable operands and compute in
// float: `load` widens an element to float, `store` rounds a float into one (round to nearest
// even; NaN stays NaN). bf16 widening is a shift and its rounding integer arithmetic, so both
// vectorise inside `#pragma omp simd` loops; fp16 uses the F16C instructions one element at a
// time (correct everywhere, fast only where the hardware converts vectors).
//
// An op switches on a view's dtype once, with with_float_type(dtype, f): f receives a value of
// the element type (float, bf16, f16) and instantiates its kernel for it.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "ete/core/dtype.h"
#include "ete/core/error.h"
#include "ete/core/view.h"

namespace ete::cpu {

struct bf16 {
    uint16_t bits;
};
struct f16 {
    uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2);

[[gnu::always_inline]] inline float load(float x) {
    return x;
}
[[gnu::always_inline]] inline float load(double x) {
    return float(x);
}
[[gnu::always_inline]] inline float load(bf16 x) {
    return std::bit_cast<float>(uint32_t(x.bits) << 16);
}
[[gnu::always_inline]] inline float load(f16 x) {
#if defined(__F16C__)
    return _cvtsh_ss(x.bits);
#else
    return f16_to_f32(x.bits);
#endif
}

[[gnu::always_inline]] inline void store(float& o, float v) {
    o = v;
}
[[gnu::always_inline]] inline void store(bf16& o, float v) {
    // f32_to_bf16 (core/dtype.h) written branch-free: the NaN case is a select.
    const uint32_t u = std::bit_cast<uint32_t>(v);
    const uint16_t rounded = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    o.bits = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40u) : rounded;
}
[[gnu::always_inline]] inline void store(f16& o, float v) {
#if defined(__F16C__)
    o.bits = uint16_t(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
#else
    o.bits = f32_to_f16(v);
#endif
}

template <typename T>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>) return DType::F32;
    if constexpr (std::is_same_v<T, double>) return DType::F64;
    if constexpr (std::is_same_v<T, bf16>) return DType::BF16;
    if constexpr (std::is_same_v<T, f16>) return DType::F16;
    if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
}

// f(T{}) for the float element type T of dtype (F32, BF16, F16); other dtypes throw naming op.
template <typename F>
decltype(auto) with_float_type(DType t, const char* op, F&& f) {
    switch (t) {
        case DType::F32:
            return f(float{});
        case DType::BF16:
            return f(bf16{});
        case DType::F16:
            return f(f16{});
        default:
            throw_error(fmt::format("{}: dtype {} is not a compute dtype (F32, BF16, F16)", op,
                                    dtype_name(t)));
    }
}

// f(T{}) for the integer element type of an int8 model's activation: uint8_t (U8, q + 128) or
// int8_t (I8); other dtypes throw naming op.
template <typename F>
decltype(auto) with_s8_type(DType t, const char* op, F&& f) {
    switch (t) {
        case DType::U8:
            return f(uint8_t{});
        case DType::I8:
            return f(int8_t{});
        default:
            throw_error(fmt::format("{}: dtype {} is not I8 or U8", op, dtype_name(t)));
    }
}

// Typed element pointers of host views; the dtype must match (an internal invariant: ops
// dispatch on it first).
template <typename T, typename P>
auto elems(const MatViewT<P>& m) {
    ETE_ASSERT(m.empty() || m.dtype == dtype_of<T>());
    if constexpr (std::is_const_v<std::remove_pointer_t<P>>) {
        return static_cast<const T*>(m.data);
    } else {
        return static_cast<T*>(m.data);
    }
}
template <typename T, typename P>
auto elems(const VecViewT<P>& v) {
    ETE_ASSERT(v.empty() || v.dtype == dtype_of<T>());
    if constexpr (std::is_const_v<std::remove_pointer_t<P>>) {
        return static_cast<const T*>(v.data);
    } else {
        return static_cast<T*>(v.data);
    }
}

// Shape checks shared by the host backends: a violated one is a bug in the caller (an
// ete::Error naming the op, so tests can see it).
inline void check_shape(bool ok, const char* op, const char* what) {
    ETE_CHECK(ok, "{}: {}", op, what);
}

}  // namespace ete::cpu
