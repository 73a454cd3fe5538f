// ete/core/arena.cpp
#include "ete/core/arena.h"

namespace ete {

void Arena::reset(void* block, size_t capacity) {
    block_ = static_cast<char*>(block);
    capacity_ = block ? capacity : 0;
    used_ = 0;
}

void* Arena::alloc_bytes(size_t bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    size_t off = used_;
    used_ += rounded;
    if (counting()) return nullptr;
    ETE_ASSERT(used_ <= capacity_);
    return block_ + off;
}

}  // namespace ete
