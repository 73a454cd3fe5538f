// ete/core/mem_stats.cpp
#include "ete/core/mem_stats.h"

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

}  // namespace ete
