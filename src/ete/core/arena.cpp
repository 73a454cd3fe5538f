// ete/core/arena.cpp
#include "ete/core/arena.h"

#include <cstring>

namespace ete {

void Arena::reset(size_t capacity) {
    capacity_ = capacity;
    used_ = 0;
    block_ = capacity ? aligned_alloc_shared(capacity) : nullptr;
    if (capacity) std::memset(block_.get(), 0, capacity);
}

void* Arena::alloc_bytes(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    size_t off = used_;
    used_ += rounded;
    if (counting()) return nullptr;
    ETE_ASSERT(used_ <= capacity_);
    return static_cast<char*>(block_.get()) + off;
}

Tensor Arena::alloc(Shape shape, DType dtype) {
    size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
    return Tensor::view(alloc_bytes(bytes), std::move(shape), dtype);
}

}  // namespace ete
