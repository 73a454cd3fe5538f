// ete/backend/cpu/guarded_memory.h — memory the host cannot touch, for a test backend.
//
// DESIGN.md §3b: nothing outside a backend dereferences backend memory. A CPU test backend that
// hands out GuardedMemory addresses proves it without a GPU: each allocation is one memfd mapped
// twice, a PROT_NONE "device" view (any host load or store through it faults with SIGSEGV) and a
// read-write alias that only the backend's kernels and copies (and a device-aware test
// communicator) reach, through host(). host() also checks that the whole range lies inside one
// live allocation, so a view that runs off its buffer or a host pointer passed where device
// memory is expected fails with a message instead of corrupting a neighbour.
//
// Thread-safe: a communication thread may translate while the main thread allocates or computes.
// Allocations are few and large, so a shared_mutex around a sorted map is enough.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>

namespace ete::cpu {

class GuardedMemory {
  public:
    GuardedMemory() = default;
    ~GuardedMemory();  // unmaps every allocation still live
    GuardedMemory(const GuardedMemory&) = delete;
    GuardedMemory& operator=(const GuardedMemory&) = delete;

    // A new region of at least `bytes`, page-aligned (so 64-byte aligned); 0 bytes still gets its
    // own page, so the pointer is valid and unique. Throws std::bad_alloc when the system is out
    // of memory or mappings, ete::Error on any other failure.
    void* allocate(size_t bytes);
    // nullptr is a no-op; any other pointer must be one allocate() returned and not yet freed.
    void deallocate(void* device) noexcept;
    // The read-write alias of [device, device + bytes). Throws ete::Error naming the address and
    // size unless the range lies inside one live allocation (bytes == 0: device must be inside
    // one, or one past its requested end).
    void* host(const void* device, size_t bytes) const;
    // Inside a live allocation's requested bytes (or the base of a 0-byte one).
    bool owns(const void* device) const;
    size_t bytes_in_use() const;  // requested bytes of the live allocations

  private:
    struct Region {
        size_t bytes = 0;       // as requested
        size_t mapped = 0;      // page multiple >= max(bytes, 1), the length of both mappings
        char* alias = nullptr;  // PROT_READ | PROT_WRITE view of the same memfd
    };
    // The region containing [addr, addr + bytes), or null. Caller holds mutex_.
    const std::pair<const uintptr_t, Region>* find(uintptr_t addr, size_t bytes) const;

    mutable std::shared_mutex mutex_;
    std::map<uintptr_t, Region> regions_;  // keyed by the device base address
    size_t in_use_ = 0;
};

}  // namespace ete::cpu
