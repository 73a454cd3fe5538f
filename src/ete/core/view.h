// ete/core/view.h — typed views of backend memory (DESIGN.md §3b): a pointer never travels
// without its dtype and shape.
//
// A view does not own memory and never dereferences it: the pointer may be a device address that
// the host cannot touch. Only a backend's kernels turn a view into loads and stores. Two shapes:
//
//   MatView  rows x cols, row-major, rows `ld` elements apart (ld >= cols): a slice of a wider
//            buffer (q|k|v columns of a fused GEMM output, one chunk of rows) is a view too.
//   VecView  n contiguous elements.
//
// Mutable and read-only flavours: Mat/Vec hold `void*`, CMat/CVec `const void*`; a Mat converts
// to a CMat implicitly, never the other way. An empty view (data == nullptr, size 0) means
// "absent" (no bias, no gradient, no document starts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete {

namespace view_detail {
template <typename P>
P advance(P p, int64_t bytes) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char, char>;
    return static_cast<P>(static_cast<Byte*>(p) + bytes);
}
}  // namespace view_detail

template <typename P>
struct VecViewT {
    P data = nullptr;
    DType dtype = DType::F32;
    int64_t n = 0;

    VecViewT() = default;
    VecViewT(P d, DType t, int64_t count) : data(d), dtype(t), n(count) {}
    template <typename Q, typename = std::enable_if_t<std::is_convertible_v<Q, P>>>
    VecViewT(const VecViewT<Q>& o) : data(o.data), dtype(o.dtype), n(o.n) {}

    bool empty() const { return data == nullptr; }
    size_t bytes() const { return size_t(n) * dtype_size(dtype); }
    // Elements [offset, offset + count).
    VecViewT slice(int64_t offset, int64_t count) const {
        ETE_ASSERT(offset >= 0 && count >= 0 && offset + count <= n);
        return {view_detail::advance(data, offset * int64_t(dtype_size(dtype))), dtype, count};
    }
};

template <typename P>
struct MatViewT {
    P data = nullptr;
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0, ld = 0;

    MatViewT() = default;
    MatViewT(P d, DType t, int64_t r, int64_t c, int64_t lead = -1)
        : data(d), dtype(t), rows(r), cols(c), ld(lead < 0 ? c : lead) {
        ETE_ASSERT(r >= 0 && c >= 0 && ld >= c);
    }
    template <typename Q, typename = std::enable_if_t<std::is_convertible_v<Q, P>>>
    MatViewT(const MatViewT<Q>& o)
        : data(o.data), dtype(o.dtype), rows(o.rows), cols(o.cols), ld(o.ld) {}
    // A vector as one row.
    explicit MatViewT(const VecViewT<P>& v) : MatViewT(v.data, v.dtype, 1, v.n) {}

    bool empty() const { return data == nullptr; }
    bool contiguous() const { return ld == cols || rows <= 1; }
    int64_t numel() const { return rows * cols; }
    size_t elem_size() const { return dtype_size(dtype); }
    // Bytes from the first to one past the last element (what a kernel may touch).
    size_t span_bytes() const {
        return rows == 0 ? 0 : size_t((rows - 1) * ld + cols) * elem_size();
    }
    // Rows [r0, r0 + n).
    MatViewT row_slice(int64_t r0, int64_t n) const {
        ETE_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= rows);
        return {view_detail::advance(data, r0 * ld * int64_t(elem_size())), dtype, n, cols, ld};
    }
    // Columns [c0, c0 + n) of every row (same ld).
    MatViewT col_slice(int64_t c0, int64_t n) const {
        ETE_ASSERT(c0 >= 0 && n >= 0 && c0 + n <= cols);
        return {view_detail::advance(data, c0 * int64_t(elem_size())), dtype, rows, n, ld};
    }
    // The same bytes as one vector; only for contiguous views.
    VecViewT<P> flat() const {
        ETE_ASSERT(contiguous());
        return {data, dtype, numel()};
    }
    // The same contiguous bytes seen as (r, c), r * c == rows * cols.
    MatViewT reshaped(int64_t r, int64_t c) const {
        ETE_ASSERT(contiguous() && r * c == numel());
        return {data, dtype, r, c};
    }
};

using Vec = VecViewT<void*>;
using CVec = VecViewT<const void*>;
using Mat = MatViewT<void*>;
using CMat = MatViewT<const void*>;

inline Mat as_mat(Vec v) {
    return Mat(v);
}
inline CMat as_mat(CVec v) {
    return CMat(v);
}

}  // namespace ete
