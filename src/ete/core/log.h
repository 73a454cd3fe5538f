// ete/core/log.h — rank-aware logging to stderr. Only rank 0 prints info unless told otherwise.
#pragma once

#include <fmt/format.h>

#include <string>

namespace ete {

enum class LogLevel { Debug, Info, Warn, Error };

void log_set_level(LogLevel level);
void log_set_rank(int rank);  // ranks other than 0 print only warnings and errors
void log_write(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
    log_write(LogLevel::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
    log_write(LogLevel::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
    log_write(LogLevel::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ete
