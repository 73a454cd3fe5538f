// ete/core/mem_stats.h — this process's resident memory (Linux /proc and getrusage).
#pragma once

#include <cstdint>

namespace ete {

// Resident set size now, and its peak so far, in bytes (0 where the system does not say).
uint64_t process_rss_bytes();
uint64_t process_peak_rss_bytes();

}  // namespace ete
