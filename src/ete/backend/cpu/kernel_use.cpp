// ete/backend/cpu/kernel_use.cpp — see kernel_use.h.
#include "ete/backend/cpu/kernel_use.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace ete::cpu {

namespace {

std::atomic<bool> g_noted{false};

}  // namespace

void note_profiled_kernel() noexcept {
    if (g_noted.load(std::memory_order_relaxed) || g_noted.exchange(true)) return;
    const char* dir = std::getenv("ETE_KERNEL_USE_LOG");
    if (!dir || !*dir) return;
    const char* test = std::getenv("ETE_TEST_NAME");
    if (!test || !*test) test = "?";
    // The record is an empty file named after the test ('/' and '%' percent-encoded): creating it
    // writes no data, so neither a test's RLIMIT_FSIZE (Durability.* caps its files at 16 KiB; an
    // appended line was cut there) nor another process's record can tear it.
    try {
        std::string path = std::string(dir) + "/";
        for (const char* c = test; *c; ++c) {
            if (*c == '/')
                path += "%2F";
            else if (*c == '%')
                path += "%25";
            else
                path += *c;
        }
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) ::close(fd);
    } catch (...) {  // out of memory: the list misses this test, the run goes on
    }
}

void reset_profiled_kernel_note() noexcept {
    g_noted.store(false);
}

}  // namespace ete::cpu
