// ete/backend/cpu/guarded_memory.cpp — memfd mapped twice: a PROT_NONE device view, an RW alias.
//
// Both mappings are MAP_SHARED views of the same memfd, so a store through the alias is what the
// next translation reads; the fd is closed once mapped (the mappings keep the file alive). The
// memfd's pages are reserved with fallocate at allocate() time, so running out of memory is a
// std::bad_alloc there rather than a SIGBUS on first touch.
#include "ete/backend/cpu/guarded_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "ete/core/error.h"

namespace ete::cpu {
namespace {

// Out of memory or out of mappings/fds is bad_alloc (the caller may free and retry); anything
// else is a broken environment, reported with the call that failed.
[[noreturn]] void throw_errno(const char* call, size_t bytes) {
    int err = errno;
    if (err == ENOMEM || err == ENOSPC || err == EMFILE || err == ENFILE) throw std::bad_alloc();
    throw_error(fmt::format("GuardedMemory::allocate({} bytes): {} failed: {}", bytes, call,
                            std::strerror(err)));
}

}  // namespace

GuardedMemory::~GuardedMemory() {
    for (auto& [base, r] : regions_) {
        munmap(reinterpret_cast<void*>(base), r.mapped);
        munmap(r.alias, r.mapped);
    }
}

void* GuardedMemory::allocate(size_t bytes) {
    static const size_t page = size_t(sysconf(_SC_PAGESIZE));
    if (bytes > SIZE_MAX - page) throw std::bad_alloc();
    // Zero bytes still maps a page: the pointer must be valid and distinct from every other.
    const size_t mapped = (std::max<size_t>(bytes, 1) + page - 1) / page * page;

    int fd = memfd_create("ete-guarded", MFD_CLOEXEC);
    if (fd < 0) throw_errno("memfd_create", bytes);
    if (ftruncate(fd, off_t(mapped)) != 0) {
        close(fd);
        throw_errno("ftruncate", bytes);
    }
    // EOPNOTSUPP (an old kernel) only loses the early out-of-memory report; the mapping works.
    if (int rc = fallocate(fd, 0, 0, off_t(mapped)); rc != 0 && errno != EOPNOTSUPP) {
        close(fd);
        throw_errno("fallocate", bytes);
    }
    void* device = mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    if (device == MAP_FAILED) {
        close(fd);
        throw_errno("mmap(PROT_NONE)", bytes);
    }
    void* alias = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (alias == MAP_FAILED) {
        munmap(device, mapped);
        close(fd);
        throw_errno("mmap(PROT_READ|PROT_WRITE)", bytes);
    }
    close(fd);

    std::unique_lock lock(mutex_);
    regions_[reinterpret_cast<uintptr_t>(device)] =
        Region{bytes, mapped, static_cast<char*>(alias)};
    in_use_ += bytes;
    return device;
}

void GuardedMemory::deallocate(void* device) noexcept {
    if (!device) return;
    Region r;
    {
        std::unique_lock lock(mutex_);
        auto it = regions_.find(reinterpret_cast<uintptr_t>(device));
        ETE_ASSERT(it != regions_.end());  // not from allocate(), or freed twice
        r = it->second;
        in_use_ -= r.bytes;
        regions_.erase(it);
    }
    // Unmapped after the erase: a concurrent host() can no longer hand out this alias.
    munmap(device, r.mapped);
    munmap(r.alias, r.mapped);
}

const std::pair<const uintptr_t, GuardedMemory::Region>* GuardedMemory::find(uintptr_t addr,
                                                                             size_t bytes) const {
    auto it = regions_.upper_bound(addr);  // first region starting after addr
    if (it == regions_.begin()) return nullptr;
    --it;
    const size_t off = addr - it->first;
    // Written as subtractions so that a huge `bytes` cannot wrap around.
    if (off > it->second.bytes || bytes > it->second.bytes - off) return nullptr;
    return &*it;
}

void* GuardedMemory::host(const void* device, size_t bytes) const {
    const auto addr = reinterpret_cast<uintptr_t>(device);
    std::shared_lock lock(mutex_);
    if (const auto* hit = find(addr, bytes)) return hit->second.alias + (addr - hit->first);
    // Name the allocation just below the address: "runs off its buffer" is the usual cause.
    std::string near = "no live allocation below it";
    if (auto it = regions_.upper_bound(addr); it != regions_.begin()) {
        --it;
        near = fmt::format("nearest allocation below: {} of {} bytes",
                           fmt::ptr(reinterpret_cast<const void*>(it->first)), it->second.bytes);
    }
    throw_error(
        fmt::format("GuardedMemory: [{}, +{} bytes) is not inside one live device "
                    "allocation ({})",
                    fmt::ptr(device), bytes, near));
}

bool GuardedMemory::owns(const void* device) const {
    const auto addr = reinterpret_cast<uintptr_t>(device);
    std::shared_lock lock(mutex_);
    const auto* hit = find(addr, 0);
    // find(addr, 0) also accepts one past the end; the base of a 0-byte allocation is owned.
    return hit && (addr - hit->first < hit->second.bytes || addr == hit->first);
}

size_t GuardedMemory::bytes_in_use() const {
    std::shared_lock lock(mutex_);
    return in_use_;
}

}  // namespace ete::cpu
