// ete/cli/cli_checks.h — CLI11 validators whose messages are one short line (CLI11's own range
// validators print the largest double in full).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace ete {

// A finite number in [lo, hi] (hi = +inf: no upper bound); `what` says it ("a positive number").
inline CLI::Validator number_in(double lo, double hi, std::string what) {
    return CLI::Validator(
        [lo, hi, what](std::string& s) -> std::string {
            double v = 0;
            try {
                size_t used = 0;
                v = std::stod(s, &used);
                if (used != s.size()) return fmt::format("'{}': expected {}", s, what);
            } catch (const std::exception&) {
                return fmt::format("'{}': expected {}", s, what);
            }
            if (!std::isfinite(v) || v < lo || v > hi)
                return fmt::format("{}: expected {}", s, what);
            return "";
        },
        what);
}
inline CLI::Validator positive() {
    return number_in(1e-300, INFINITY, "a positive number");
}
inline CLI::Validator non_negative() {
    return number_in(0, INFINITY, "a number >= 0");
}

}  // namespace ete
