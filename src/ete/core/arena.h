// ete/core/arena.h — a bump allocator that carves one block of backend memory into views.
//
// Layers reserve their buffers once, when a model is set up for a (batch, sequence) size; the
// training loop then runs without allocating. The arena never touches the bytes (they may be
// device memory): it only hands out 64-byte aligned addresses inside the block it was given.
// Two-pass use: a counting pass (no block) sizes it, then reset(block, bytes) and the same calls
// again hand out real addresses.
#pragma once

#include <cstddef>

#include "ete/core/view.h"

namespace ete {

class Arena {
  public:
    Arena() = default;  // counting
    void reset(void* block, size_t capacity);
    void* alloc_bytes(size_t bytes);
    Mat alloc_mat(DType t, int64_t rows, int64_t cols) {
        return {alloc_bytes(size_t(rows * cols) * dtype_size(t)), t, rows, cols};
    }
    Vec alloc_vec(DType t, int64_t n) { return {alloc_bytes(size_t(n) * dtype_size(t)), t, n}; }
    size_t used() const { return used_; }
    size_t capacity() const { return capacity_; }
    bool counting() const { return block_ == nullptr; }

  private:
    char* block_ = nullptr;
    size_t capacity_ = 0;
    size_t used_ = 0;
};

}  // namespace ete
