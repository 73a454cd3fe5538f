// ete/core/mem_stats.cpp
#include "ete/core/mem_stats.h"

#include <malloc.h>

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <optional>

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace ete {

uint64_t process_rss_bytes() {
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("VmRSS:", 0) == 0) return uint64_t(std::stoull(line.substr(6))) * 1024;
    }
    return 0;
}

uint64_t process_peak_rss_bytes() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return uint64_t(u.ru_maxrss) * 1024;  // KiB on Linux
}

namespace {

// The first number in a file ("max" and unreadable files give nullopt).
std::optional<uint64_t> read_number(const char* path) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word) || word == "max") return std::nullopt;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (end == word.c_str()) return std::nullopt;
    return uint64_t(v);
}

std::string gib(uint64_t b) {
    return fmt::format("{:.2f} GiB", double(b) / double(uint64_t(1) << 30));
}

}  // namespace

AvailableMemory available_memory() {
    AvailableMemory a;
    if (const char* forced = std::getenv("ETE_MEMORY_AVAILABLE")) {
        a.bytes = std::strtoull(forced, nullptr, 10);
        a.source = fmt::format("ETE_MEMORY_AVAILABLE {}", gib(a.bytes));
        return a;
    }
    std::ifstream info("/proc/meminfo");
    for (std::string key; info >> key;) {
        uint64_t kib = 0;
        info >> kib;
        if (key == "MemAvailable:") {
            a.bytes = kib * 1024;
            a.source = fmt::format("MemAvailable {}", gib(a.bytes));
            break;
        }
        info.ignore(256, '\n');
    }
    // cgroup v2, then v1 (a v1 "no limit" is a huge number, never below MemAvailable).
    std::optional<uint64_t> limit = read_number("/sys/fs/cgroup/memory.max");
    std::optional<uint64_t> used = read_number("/sys/fs/cgroup/memory.current");
    if (!limit) {
        limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    }
    if (limit && used) {
        const uint64_t room = *limit > *used ? *limit - *used : 0;
        if (a.bytes == 0 || room < a.bytes) {
            a.bytes = room;
            a.source = fmt::format("{}{}cgroup limit {} ({} used)", a.source,
                                   a.source.empty() ? "" : ", ", gib(*limit), gib(*used));
        }
    }
    return a;
}

void keep_freed_memory() {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: HEAP_MAX_SIZE / 2
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace ete
