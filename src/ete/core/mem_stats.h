// ete/core/mem_stats.h — this process's resident memory (Linux /proc and getrusage).
#pragma once

#include <cstdint>
#include <string>

namespace ete {

// Resident set size now, and its peak so far, in bytes (0 where the system does not say).
uint64_t process_rss_bytes();
uint64_t process_peak_rss_bytes();

// The memory this process can still use, and where the figure comes from: the smaller of
// MemAvailable (/proc/meminfo) and the room left under a cgroup limit (v2 memory.max less
// memory.current, or v1 memory.limit_in_bytes less memory.usage_in_bytes). ETE_MEMORY_AVAILABLE
// (bytes) overrides both (tests and drills). bytes = 0 when nothing is known.
struct AvailableMemory {
    uint64_t bytes = 0;
    std::string source;  // e.g. "MemAvailable 11.6 GiB, cgroup limit 16.00 GiB (3.2 GiB used)"
};
AvailableMemory available_memory();

}  // namespace ete
