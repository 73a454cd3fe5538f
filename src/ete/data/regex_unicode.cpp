// ete/data/regex_unicode.cpp — rewrites a tokenizer.json regex for PCRE2 so that its Unicode
// classes are those of Unicode 16.0, the version HF's tokenizers (Oniguruma) uses.
#include <fmt/format.h>

#include "ete/data/pretokenize.h"
#include "ete/data/unicode.h"

namespace ete {
namespace {

bool is_category_name(std::string_view n) {
    static constexpr std::string_view kNames[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M", "Mn",
                                                  "Mc", "Me", "N",  "Nd", "Nl", "No", "P", "Pc",
                                                  "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm",
                                                  "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp"};
    for (std::string_view k : kNames) {
        if (n == k) return true;
    }
    return false;
}

std::string ranges_text(std::span<const unicode::Range> ranges) {
    std::string s;
    for (const unicode::Range& r : ranges) {
        s += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
        if (r.last != r.first) s += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
    }
    return s;
}

// \p{name} (negated: \P{name}) as PCRE2 text matching the class in Unicode 16. PCRE2's own
// tables are 14.0 (Debian 12): the code points a class gained since are added to it; the ones it
// lost (only Mn's U+1171E, now Mc) are cut off with a lookahead outside a character class.
std::string property(std::string_view name, bool negated, bool in_class) {
    const std::string base = fmt::format("\\{}{{{}}}", negated ? 'P' : 'p', name);
    if (!is_category_name(name)) return base;  // scripts and the like: PCRE2's own tables
    const std::string added = ranges_text(unicode::class_added_since_14(name));
    const std::string removed = ranges_text(unicode::class_removed_since_14(name));
    if (in_class) {
        // A negated class inside [...] cannot drop the added code points; patterns in real
        // tokenizer.json files do not use one.
        return negated ? base : fmt::format("\\p{{{}}}{}", name, added);
    }
    if (!negated) {
        const std::string cls = fmt::format("[\\p{{{}}}{}]", name, added);
        return removed.empty() ? cls : fmt::format("(?:(?![{}]){})", removed, cls);
    }
    const std::string cls = fmt::format("[^\\p{{{}}}{}]", name, added);
    return removed.empty() ? cls : fmt::format("(?:[{}]|{})", removed, cls);
}

}  // namespace

std::string pcre2_pattern(std::string_view p) {
    std::string out;
    out.reserve(p.size() + 64);
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']'
            continue;
        }
        if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {
            const size_t end = p.find(":]", i + 2);  // a POSIX class [:alpha:]
            const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
            out.append(p.substr(i, stop - i));
            i = stop - 1;
            continue;
        }
        if (c == ']' && in_class) {
            in_class = false;
            out += c;
            continue;
        }
        if (c != '\\' || i + 1 == p.size()) {
            out += c;
            continue;
        }
        const char next = p[++i];
        if (next == 's' || next == 'S') {
            // PCRE2 counts U+180E as \s (a space before Unicode 6.3); HF (Oniguruma), tiktoken and
            // Rust's regex use the White_Space property, inside classes too.
            out += next == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
        } else if ((next == 'p' || next == 'P') && i + 1 < p.size()) {
            bool negated = next == 'P';
            std::string_view name;
            if (p[i + 1] == '{') {
                const size_t end = p.find('}', i + 2);
                if (end == std::string_view::npos) {  // malformed: PCRE2 will say so
                    out.append(p.substr(i - 1));
                    break;
                }
                name = p.substr(i + 2, end - i - 2);
                i = end;
            } else {
                name = p.substr(i + 1, 1);
                i += 1;
            }
            if (name.starts_with('^')) {
                negated = !negated;
                name.remove_prefix(1);
            }
            out += property(name, negated, in_class);
        } else if (next == 'Q') {
            const size_t end = std::min(p.find("\\E", i + 1), p.size());
            out.append(p.substr(i - 1, end - (i - 1)));
            i = end + 1;  // past the "\E" (or the end)
            if (end < p.size()) out += "\\E";
        } else {
            out += '\\';
            out += next;
        }
    }
    return out;
}

}  // namespace ete
