// tests/backend/guarded_memory_test.cpp — the host cannot touch GuardedMemory; its alias can.
//
// The death tests expect SIGSEGV from a plain build. Under AddressSanitizer (ETE_SANITIZE) ASan's
// own SEGV handler reports the fault and exits non-zero instead, so there the test matches its
// "SEGV" report.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "ete/backend/cpu/guarded_memory.h"
#include "test_build.h"
#include "test_util.h"

namespace ete {
namespace {

using cpu::GuardedMemory;

std::string hex(const void* p) {
    return fmt::format("{}", fmt::ptr(p));
}

TEST(GuardedMemory, AliasWritesAreSeenByAnotherTranslation) {
    GuardedMemory mem;
    const size_t n = 10000;  // not a page multiple
    auto* dev = static_cast<char*>(mem.allocate(n * sizeof(float)));
    ASSERT_NE(dev, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(dev) % 64, 0u);
    auto* a = static_cast<float*>(mem.host(dev, n * sizeof(float)));
    EXPECT_NE(static_cast<void*>(a), static_cast<void*>(dev));
    EXPECT_EQ(a[n - 1], 0.0f);  // fresh memory is zeroed
    for (size_t i = 0; i < n; ++i) a[i] = float(i) * 0.5f;
    // A translation of an interior range reads the same file at the matching offset.
    auto* b = static_cast<const float*>(mem.host(dev + 100 * sizeof(float), 50 * sizeof(float)));
    EXPECT_EQ(b, a + 100);
    for (size_t i = 0; i < 50; ++i) EXPECT_EQ(b[i], float(100 + i) * 0.5f);
    mem.deallocate(dev);
}

TEST(GuardedMemory, HostAccessThroughTheDevicePointerDies) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");  // the binary may have OpenMP threads
    GuardedMemory mem;
    auto* dev = static_cast<volatile char*>(mem.allocate(4096));
    static_cast<char*>(mem.host(const_cast<char*>(dev), 4096))[7] = 1;  // the alias is fine
    if (ete::testing::under_sanitizers()) {
        ASSERT_DEATH({ [[maybe_unused]] char c = dev[7]; }, "SEGV");
        ASSERT_DEATH({ dev[0] = 1; }, "SEGV");
    } else {
        ASSERT_EXIT({ [[maybe_unused]] char c = dev[7]; }, ::testing::KilledBySignal(SIGSEGV), "");
        ASSERT_EXIT({ dev[0] = 1; }, ::testing::KilledBySignal(SIGSEGV), "");
    }
    mem.deallocate(const_cast<char*>(dev));
}

TEST(GuardedMemory, TranslationsOutsideOneAllocationThrowNamingTheAddress) {
    GuardedMemory mem;
    auto* dev = static_cast<char*>(mem.allocate(1000));
    EXPECT_NO_THROW(mem.host(dev, 1000));
    EXPECT_NO_THROW(mem.host(dev + 999, 1));
    EXPECT_NO_THROW(mem.host(dev + 1000, 0));  // an empty view at the end
    // Runs off the requested size, even though the page behind it is mapped.
    std::string msg = error_of([&] { mem.host(dev + 900, 101); });
    EXPECT_NE(msg.find(hex(dev + 900)), std::string::npos) << msg;
    EXPECT_NE(msg.find("101 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nearest allocation below: " + hex(dev) + " of 1000 bytes"),
              std::string::npos)
        << msg;
    EXPECT_NE(error_of([&] { mem.host(dev + 1001, 0); }), "<no error>");
    EXPECT_NE(error_of([&] { mem.host(dev + 1, SIZE_MAX); }), "<no error>");  // no wrap-around
    EXPECT_NE(error_of([&] { mem.host(dev - 1, 1); }), "<no error>");
    // A host pointer where device memory is expected.
    std::vector<float> host_buf(16);
    msg = error_of([&] { mem.host(host_buf.data(), 64); });
    EXPECT_NE(msg.find(hex(host_buf.data())), std::string::npos) << msg;
    EXPECT_NE(msg.find("not inside one live device allocation"), std::string::npos) << msg;
    // A range spanning two allocations is not inside one, even if they happen to be adjacent.
    auto* dev2 = static_cast<char*>(mem.allocate(4096));
    EXPECT_NE(error_of([&] { mem.host(dev, 8192); }), "<no error>");
    EXPECT_NE(error_of([&] { mem.host(dev2, 4097); }), "<no error>");
    mem.deallocate(dev2);
    mem.deallocate(dev);
}

TEST(GuardedMemory, OwnsDeallocateAndBytesInUse) {
    GuardedMemory mem;
    EXPECT_EQ(mem.bytes_in_use(), 0u);
    mem.deallocate(nullptr);  // no-op
    void* a = mem.allocate(100);
    void* b = mem.allocate(1 << 20);
    void* z = mem.allocate(0);
    EXPECT_NE(z, nullptr);
    EXPECT_NE(z, a);
    EXPECT_NE(z, b);
    EXPECT_EQ(mem.bytes_in_use(), 100u + (1u << 20));
    EXPECT_TRUE(mem.owns(a));
    EXPECT_TRUE(mem.owns(static_cast<char*>(a) + 99));
    EXPECT_FALSE(mem.owns(static_cast<char*>(a) + 100));
    EXPECT_TRUE(mem.owns(z));
    int local = 0;
    EXPECT_FALSE(mem.owns(&local));
    mem.deallocate(a);
    EXPECT_FALSE(mem.owns(a));
    EXPECT_NE(error_of([&] { mem.host(a, 1); }), "<no error>");
    EXPECT_EQ(mem.bytes_in_use(), 1u << 20);
    mem.deallocate(z);
    EXPECT_EQ(mem.bytes_in_use(), 1u << 20);
    // b is left live: the destructor unmaps it (LeakSanitizer would not see an mmap leak, but
    // running out of mappings would).
}

TEST(GuardedMemory, ConcurrentAllocateAndTranslate) {
    GuardedMemory mem;
    const size_t n = 1 << 16;
    auto* shared = static_cast<char*>(mem.allocate(n));
    auto* sa = static_cast<uint8_t*>(mem.host(shared, n));
    for (size_t i = 0; i < n; ++i) sa[i] = uint8_t(i * 7);
    std::atomic<int> failures{0};
    // Each thread churns its own allocations (inserting into and erasing from the shared map)
    // while translating the long-lived one and checking what it reads.
    auto worker = [&](int id) {
        for (int it = 0; it < 300; ++it) {
            size_t bytes = size_t(1 + (it * 37 + id * 11) % 20000);
            auto* d = static_cast<char*>(mem.allocate(bytes));
            auto* h = static_cast<uint8_t*>(mem.host(d, bytes));
            std::memset(h, id + 1, bytes);
            const size_t off = size_t(it * 131) % (n - 64);
            const auto* s = static_cast<const uint8_t*>(mem.host(shared + off, 64));
            for (size_t k = 0; k < 64; ++k)
                if (s[k] != uint8_t((off + k) * 7)) ++failures;
            if (!mem.owns(d + bytes - 1) || h[bytes - 1] != uint8_t(id + 1)) ++failures;
            mem.deallocate(d);
        }
    };
    std::thread t0(worker, 0), t1(worker, 1);
    t0.join();
    t1.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(mem.bytes_in_use(), n);
    mem.deallocate(shared);
    EXPECT_EQ(mem.bytes_in_use(), 0u);
}

}  // namespace
}  // namespace ete
