// ete/core/log.cpp
#include "ete/core/log.h"

#include <cstdio>

namespace ete {
namespace {
LogLevel g_level = LogLevel::Info;
int g_rank = 0;
}  // namespace

void log_set_level(LogLevel level) {
    g_level = level;
}
void log_set_rank(int rank) {
    g_rank = rank;
}

void log_write(LogLevel level, const std::string& msg) {
    if (level < g_level) return;
    if (g_rank != 0 && level < LogLevel::Warn) return;
    const char* tag = level == LogLevel::Warn    ? "warning: "
                      : level == LogLevel::Error ? "error: "
                                                 : "";
    std::fprintf(stderr, "%s%s\n", tag, msg.c_str());
}

}  // namespace ete
