// ete/core/device_memory.h — the memory half of a compute backend (DESIGN.md §3b).
//
// Parameters, gradients, optimizer moments and activations live in memory that a backend owns:
// host memory for the CPU backend, device memory for CUDA, memory the host cannot touch for the
// test backend that proves nobody else dereferences it. Code outside a backend moves bytes only
// through this interface: upload (host -> backend), download (backend -> host), copy and fill
// inside the backend. Communicators that must see host bytes (MPI) stage through it
// (parallel/device_comm.h). It sits in core so that layers below the backend (parallel) can
// use it; ete::Backend implements it.
#pragma once

#include <cstddef>
#include <utility>

namespace ete {

class DeviceMemory {
  public:
    virtual ~DeviceMemory() = default;

    // At least `bytes` of backend memory, 64-byte aligned, uninitialised; throws on exhaustion.
    virtual void* allocate(size_t bytes) = 0;
    virtual void deallocate(void* p) noexcept = 0;
    // The same, every byte 0. A backend may hand out pages that take memory only when first
    // written (CPU: fresh anonymous mappings), so a zeroed buffer that is never written costs no
    // memory: the fp32 copies of weights an integer model holds as integers, say.
    virtual void* allocate_zeroed(size_t bytes) {
        void* p = allocate(bytes);
        fill_bytes(p, 0, bytes);
        return p;
    }
    // dst (backend) = src (host) / dst (host) = src (backend) / within the backend.
    virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
    virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
    virtual void copy_bytes(void* dst, const void* src, size_t bytes) = 0;
    // Every byte of [dst, dst + bytes) = value.
    virtual void fill_bytes(void* dst, int value, size_t bytes) = 0;
    // Waits until every operation issued so far has finished (a no-op for synchronous backends).
    virtual void synchronize() = 0;
    // Whether the backend's pointers are plain host pointers (CPU: yes; CUDA and the guarded
    // test backend: no). Code that merely forwards buffers (to MPI, say) may skip staging then;
    // nothing may rely on it to read backend memory directly.
    virtual bool host_addressable() const = 0;
};

// Owning handle of one allocation; move-only, freed with its owner's deallocate.
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceMemory& mem, size_t bytes)
        : mem_(&mem), data_(bytes ? mem.allocate(bytes) : nullptr), bytes_(bytes) {}
    // A buffer of `bytes` zeros (DeviceMemory::allocate_zeroed).
    static DeviceBuffer zeroed(DeviceMemory& mem, size_t bytes) {
        DeviceBuffer b;
        b.mem_ = &mem;
        b.data_ = bytes ? mem.allocate_zeroed(bytes) : nullptr;
        b.bytes_ = bytes;
        return b;
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            mem_ = std::exchange(o.mem_, nullptr);
            data_ = std::exchange(o.data_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() { reset(); }

    void reset() {
        if (data_) mem_->deallocate(data_);
        data_ = nullptr;
        bytes_ = 0;
    }
    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

  private:
    DeviceMemory* mem_ = nullptr;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace ete
