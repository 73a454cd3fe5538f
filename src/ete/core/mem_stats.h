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

// Keeps freed memory in the process instead of handing it back to the kernel at every free
// (glibc: allocations up to 32 MiB from the heap, M_MMAP_THRESHOLD; the heap's free top returned
// only past 1 GiB, M_TRIM_THRESHOLD). A training step frees and allocates the same buffers every
// step; with glibc's defaults the freed top of the heap was trimmed and faulted back in each step:
// a tp = 2 job of the bench model on 2 single-core ranks took 40k page faults a step and 0.57 s
// instead of 0.35 s (docs/planner.md). Peak memory is unchanged; memory freed after the peak
// stays resident. Call once at start, before the allocations it should govern.
void keep_freed_memory();

}  // namespace ete
