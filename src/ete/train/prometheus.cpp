// ete/train/prometheus.cpp
#include "ete/train/prometheus.h"

#include <cmath>

#include "ete/core/error.h"

namespace ete {

namespace {

std::string format_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", v);  // shortest round-trip form
}

// Backslashes and newlines escaped (HELP text); with quotes = true also double quotes (label
// values).
std::string escaped(const std::string& s, bool quotes) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (c == '"' && quotes)
            out += "\\\"";
        else
            out += c;
    }
    return out;
}

}  // namespace

std::string label_value(const std::string& v) {
    return escaped(v, true);
}

std::string render_exposition(const std::vector<MetricFamily>& families) {
    std::string out;
    for (const MetricFamily& f : families) {
        if (f.samples.empty()) continue;
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escaped(f.help, false), f.name,
                           f.type);
        for (const MetricSample& s : f.samples) {
            out += f.name;
            if (!s.labels.empty()) out += "{" + s.labels + "}";
            out += " " + format_value(s.value) + "\n";
        }
    }
    return out;
}

}  // namespace ete
