// ete/core/tensor.cpp
#include "ete/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace ete {

int64_t shape_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) {
        ETE_CHECK(d >= 0, "shape {}: negative dimension", shape_str(s));
        ETE_CHECK(d == 0 || n <= std::numeric_limits<int64_t>::max() / d,
                  "shape {}: element count overflows", shape_str(s));
        n *= d;
    }
    return n;
}

std::string shape_str(const Shape& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor Tensor::empty(Shape shape, DType dtype) {
    Tensor t;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    t.owner_ = aligned_alloc_shared(t.nbytes());
    t.data_ = t.owner_.get();
    return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
    Tensor t = empty(std::move(shape), dtype);
    t.fill_zero();
    return t;
}

Tensor Tensor::view(void* data, Shape shape, DType dtype) {
    Tensor t;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    t.dtype_ = dtype;
    t.data_ = data;
    return t;
}

Tensor Tensor::clone() const {
    Tensor t = empty(shape_, dtype_);
    if (nbytes()) std::memcpy(t.data_, data_, nbytes());
    return t;
}

void Tensor::fill_zero() {
    if (nbytes()) std::memset(data_, 0, nbytes());
}

Tensor Tensor::to_f32() const {
    Tensor t = empty(shape_, DType::F32);
    convert_to_f32(t.f32(), data_, dtype_, size_t(numel_));
    return t;
}

}  // namespace ete
