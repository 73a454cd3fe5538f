// tests/backend/zeroed_memory_test.cpp — DeviceMemory::allocate_zeroed on the CPU backends: every
// byte 0 whatever the size, and on the plain CPU backend a large buffer takes memory only where
// it is written (mincore reports its untouched pages absent), which is what keeps the fp32 copies
// of an integer model's weights out of its resident memory.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ete/backend/backend.h"

namespace ete {
namespace {

bool all_zero(Backend& be, void* p, size_t bytes) {
    std::vector<unsigned char> host(bytes, 1);
    be.download(host.data(), p, bytes);
    return std::all_of(host.begin(), host.end(), [](unsigned char c) { return c == 0; });
}

size_t resident_pages(const void* p, size_t bytes) {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE)), n = (bytes + page - 1) / page;
    std::vector<unsigned char> vec(n);
    EXPECT_EQ(::mincore(const_cast<void*>(p), bytes, vec.data()), 0);
    return size_t(std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; }));
}

TEST(ZeroedMemory, EveryByteIsZeroOnEveryCpuBackend) {
    for (auto make : {make_cpu_backend, make_guarded_backend}) {
        auto be = make();
        for (size_t bytes : {size_t(1), size_t(1000), size_t(3) << 20}) {
            // Dirty the allocator first, so that reused memory would show.
            void* junk = be->allocate(bytes);
            be->fill_bytes(junk, 0xAB, bytes);
            be->deallocate(junk);
            void* p = be->allocate_zeroed(bytes);
            EXPECT_TRUE(all_zero(*be, p, bytes)) << be->name() << " " << bytes << " bytes";
            be->deallocate(p);
        }
    }
}

TEST(ZeroedMemory, LargeCpuBuffersTakeMemoryOnlyWhereWritten) {
    auto be = make_cpu_backend();
    const size_t bytes = (size_t(64) << 20) + 3;
    auto* p = static_cast<unsigned char*>(be->allocate_zeroed(bytes));
    EXPECT_EQ(resident_pages(p, bytes), 0u);
    p[size_t(10) << 20] = 1;  // one page (a 2 MiB one with transparent huge pages)
    const size_t touched = resident_pages(p, bytes);
    EXPECT_GE(touched, 1u);
    EXPECT_LE(touched, (size_t(2) << 20) / size_t(::sysconf(_SC_PAGESIZE)));
    be->deallocate(p);
}

}  // namespace
}  // namespace ete
