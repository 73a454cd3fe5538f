// ete/backend/cpu/kernel_use.cpp — see kernel_use.h.
#include "ete/backend/cpu/kernel_use.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ete::cpu {

namespace {

std::atomic<bool> g_noted{false};

}  // namespace

void note_profiled_kernel() noexcept {
    if (g_noted.load(std::memory_order_relaxed) || g_noted.exchange(true)) return;
    const char* log = std::getenv("ETE_KERNEL_USE_LOG");
    if (!log || !*log) return;
    const char* test = std::getenv("ETE_TEST_NAME");
    if (!test || !*test) test = "?";
    // One write of the name and its newline: appends of a few bytes never interleave.
    char line[512];
    const size_t n = std::min(std::strlen(test), sizeof line - 1);
    std::memcpy(line, test, n);
    line[n] = '\n';
    const int fd = ::open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    [[maybe_unused]] const ssize_t w = ::write(fd, line, n + 1);
    ::close(fd);
}

void reset_profiled_kernel_note() noexcept {
    g_noted.store(false);
}

}  // namespace ete::cpu
