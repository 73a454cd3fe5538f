// ete/core/arena.h — a bump allocator for activations and scratch.
//
// Layers reserve their buffers once, when a model is set up for a (batch, sequence) size; the
// training loop then runs without calling malloc. Every block is 64-byte aligned.
#pragma once

#include <cstddef>
#include <memory>

#include "ete/core/tensor.h"

namespace ete {

class Arena {
  public:
    // Two-pass use: a sizing pass with capacity 0 only counts bytes, then reset(bytes) allocates.
    explicit Arena(size_t capacity = 0) { reset(capacity); }
    void reset(size_t capacity);
    float* alloc_f32(size_t n) { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
    void* alloc_bytes(size_t bytes);
    Tensor alloc(Shape shape, DType dtype = DType::F32);
    size_t used() const { return used_; }
    size_t capacity() const { return capacity_; }
    bool counting() const { return capacity_ == 0; }

  private:
    std::shared_ptr<void> block_;
    size_t capacity_ = 0;
    size_t used_ = 0;
};

}  // namespace ete
