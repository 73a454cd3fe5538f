// ete/core/tensor.h — a dense, row-major, contiguous tensor: shape + dtype + bytes.
//
// A Tensor either owns its bytes (64-byte aligned, freed with the last copy) or is a view into
// memory owned by someone else (an Arena, a memory-mapped file). Copies are shallow: they share
// the bytes. There are no strides: layers pass explicit leading dimensions to kernels instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ete/core/dtype.h"
#include "ete/core/error.h"

namespace ete {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);    // throws ete::Error on overflow or negative dims
std::string shape_str(const Shape& s);  // "[2, 3]"

class Tensor {
  public:
    Tensor() = default;
    static Tensor empty(Shape shape, DType dtype = DType::F32);             // uninitialised, owned
    static Tensor zeros(Shape shape, DType dtype = DType::F32);             // zero-filled, owned
    static Tensor view(void* data, Shape shape, DType dtype = DType::F32);  // not owned

    bool defined() const { return data_ != nullptr || numel_ == 0; }
    const Shape& shape() const { return shape_; }
    int64_t dim(int i) const { return shape_[size_t(i < 0 ? i + int(shape_.size()) : i)]; }
    int ndim() const { return int(shape_.size()); }
    int64_t numel() const { return numel_; }
    DType dtype() const { return dtype_; }
    size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }

    void* data() { return data_; }
    const void* data() const { return data_; }
    float* f32() { return typed<float>(DType::F32); }
    const float* f32() const { return const_cast<Tensor*>(this)->typed<float>(DType::F32); }
    int32_t* i32() { return typed<int32_t>(DType::I32); }
    const int32_t* i32() const { return const_cast<Tensor*>(this)->typed<int32_t>(DType::I32); }

    Tensor clone() const;  // deep copy, owned
    void fill_zero();
    Tensor to_f32() const;  // converts float storage dtypes; F32 returns a deep copy

  private:
    template <typename T>
    T* typed(DType want) {
        ETE_ASSERT(dtype_ == want);
        return static_cast<T*>(data_);
    }

    std::shared_ptr<void> owner_;
    void* data_ = nullptr;
    Shape shape_;
    int64_t numel_ = 0;
    DType dtype_ = DType::F32;
};

// 64-byte aligned allocation with a deleter, for buffers that outlive one scope.
std::shared_ptr<void> aligned_alloc_shared(size_t bytes);

}  // namespace ete
