// ete/model/recompute_plan.cpp — train.recompute's value as a per-layer plan.
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ete/core/error.h"
#include "ete/model/transformer.h"

namespace ete {

std::vector<bool> recompute_plan(const std::string& spec, int L) {
    if (spec == "none" || spec == "full") return std::vector<bool>(size_t(L), spec == "full");
    std::vector<bool> plan(size_t(L), false);
    auto bad = [&]() {
        throw_error(
            fmt::format("train.recompute = '{}': expected none, full or layer indices "
                        "and ranges like 0-3,6 within 0..{}",
                        spec, L - 1));
    };
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t end = std::min(spec.find(',', pos), spec.size());
        std::string item = spec.substr(pos, end - pos);
        size_t dash = item.find('-');
        int lo = 0, hi = 0;
        try {
            size_t used = 0;
            lo = std::stoi(item.substr(0, dash), &used);
            if (used != (dash == std::string::npos ? item.size() : dash)) bad();
            hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1), &used);
            if (dash != std::string::npos && used != item.size() - dash - 1) bad();
        } catch (const std::logic_error&) {
            bad();
        }
        if (lo < 0 || hi >= L || lo > hi) bad();
        for (int l = lo; l <= hi; ++l) plan[size_t(l)] = true;
        pos = end + 1;
    }
    return plan;
}

}  // namespace ete
