// ete/data/jinja_pystr.cpp — Python str operations on UTF-8 (jinja_pystr.h).
#include "ete/data/jinja_pystr.h"

#include <fmt/format.h>

#include <algorithm>

#include "ete/core/error.h"
#include "ete/data/unicode.h"
#include "ete/data/utf8.h"

namespace ete::jinja {

std::u32string to_u32(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8::char_len(s, i);
        if (n == 0) {  // input is repaired before rendering; keep going defensively
            out += U'\uFFFD';
            i += 1;
            continue;
        }
        out += utf8::decode(s, i, n);
        i += n;
    }
    return out;
}

std::string to_utf8(std::u32string_view cps) {
    std::string out;
    out.reserve(cps.size());
    for (char32_t c : cps) utf8::append(out, c);
    return out;
}

size_t cp_length(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += !utf8::is_cont(c);
    return n;
}

bool py_isspace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_isprintable(char32_t c) {
    if (c == ' ') return true;
    using unicode::Category;
    switch (unicode::category(c)) {
        case Category::Cc:
        case Category::Cf:
        case Category::Cs:
        case Category::Co:
        case Category::Cn:
        case Category::Zl:
        case Category::Zp:
        case Category::Zs:
            return false;
        default:
            return true;
    }
}

std::string py_repr(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const char quote = has_single && s.find('"') == std::string_view::npos ? '"' : '\'';
    std::string out(1, quote);
    for (char32_t c : to_u32(s)) {
        if (c == static_cast<char32_t>(quote) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (py_isprintable(c)) {
            utf8::append(out, c);
        } else if (c < 0x100) {
            out += fmt::format("\\x{:02x}", uint32_t(c));
        } else if (c < 0x10000) {
            out += fmt::format("\\u{:04x}", uint32_t(c));
        } else {
            out += fmt::format("\\U{:08x}", uint32_t(c));
        }
    }
    return out + quote;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
    const std::u32string cps = to_u32(s);
    const std::u32string set = chars ? to_u32(*chars) : std::u32string();
    const auto strip_it = [&](char32_t c) {
        return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
    };
    size_t b = 0, e = cps.size();
    while (left && b < e && strip_it(cps[b])) ++b;
    while (right && e > b && strip_it(cps[e - 1])) --e;
    return to_utf8(std::u32string_view(cps).substr(b, e - b));
}

namespace {

// Whitespace split (no separator): runs of whitespace separate, none at the ends.
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
    std::u32string cps = to_u32(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    std::vector<std::string> out;
    size_t i = 0;
    const size_t n = cps.size();
    while (true) {
        while (i < n && py_isspace(cps[i])) ++i;
        if (i == n) break;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
            size_t e = n;
            while (e > i && py_isspace(cps[e - 1])) --e;
            out.push_back(to_utf8(std::u32string_view(cps).substr(i, e - i)));
            break;
        }
        size_t j = i;
        while (j < n && !py_isspace(cps[j])) ++j;
        out.push_back(to_utf8(std::u32string_view(cps).substr(i, j - i)));
        i = j;
    }
    if (from_right) {
        for (std::string& part : out) {
            std::u32string p = to_u32(part);
            std::reverse(p.begin(), p.end());
            part = to_utf8(p);
        }
        std::reverse(out.begin(), out.end());
    }
    return out;
}

}  // namespace

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
    if (!sep) return split_whitespace(s, maxsplit, from_right);
    ETE_CHECK(!sep->empty(), "split: empty separator");
    std::vector<std::string> out;
    if (!from_right) {
        size_t p = 0;
        while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
            const size_t q = s.find(*sep, p);
            if (q == std::string_view::npos) break;
            out.emplace_back(s.substr(p, q - p));
            p = q + sep->size();
        }
        out.emplace_back(s.substr(p));
        return out;
    }
    size_t e = s.size();
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
        if (e < sep->size()) break;
        const size_t q = s.rfind(*sep, e - sep->size());
        if (q == std::string_view::npos) break;
        out.emplace_back(s.substr(q + sep->size(), e - q - sep->size()));
        e = q;
    }
    out.emplace_back(s.substr(0, e));
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
    const std::u32string cps = to_u32(s);
    const auto is_break = [](char32_t c) {
        return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    };
    std::vector<std::string> out;
    size_t i = 0;
    while (i < cps.size()) {
        size_t j = i;
        while (j < cps.size() && !is_break(cps[j])) ++j;
        size_t e = j;
        if (j < cps.size())
            e = (cps[j] == '\r' && j + 1 < cps.size() && cps[j + 1] == '\n') ? j + 2 : j + 1;
        out.push_back(to_utf8(std::u32string_view(cps).substr(i, (keepends ? e : j) - i)));
        i = e;
    }
    return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
    std::string out;
    if (old.empty()) {  // Python inserts repl between every character and at both ends
        const std::u32string cps = to_u32(s);
        int64_t done = 0;
        for (size_t k = 0; k <= cps.size(); ++k) {
            if (count < 0 || done < count) {
                out += repl;
                ++done;
            }
            if (k < cps.size()) utf8::append(out, cps[k]);
        }
        return out;
    }
    size_t p = 0;
    for (int64_t done = 0; count < 0 || done < count; ++done) {
        const size_t q = s.find(old, p);
        if (q == std::string_view::npos) break;
        out.append(s.substr(p, q - p));
        out.append(repl);
        p = q + old.size();
    }
    out.append(s.substr(p));
    return out;
}

namespace {

bool is_cased_letter(char32_t c) {
    using unicode::Category;
    const Category k = unicode::category(c);
    return k == Category::Lu || k == Category::Ll || k == Category::Lt;
}

char32_t ascii_upper(char32_t c) {
    return c >= 'a' && c <= 'z' ? c - 32 : c;
}
char32_t ascii_lower(char32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

}  // namespace

std::string py_case(std::string_view s, CaseOp op) {
    static constexpr const char* kNames[] = {"lower", "upper", "capitalize", "title", "title"};
    const std::u32string cps = to_u32(s);
    for (char32_t c : cps) {
        if (c < 0x80 || !is_cased_letter(c)) continue;
        // lower(): Rust's per-character mapping equals Python's but for the final sigma rule.
        if (op == CaseOp::Lower && c != 0x03A3) return unicode::lowercase(s);
        ETE_CHECK(false, "{}() of text with the non-ASCII letter U+{:04X} is not supported",
                  kNames[int(op)], uint32_t(c));
    }
    std::u32string out = cps;
    bool word_start = true;  // Jinja's title: after [-\s({\[<]; Python's: after a non-letter
    for (size_t k = 0; k < out.size(); ++k) {
        const char32_t c = out[k];
        switch (op) {
            case CaseOp::Lower:
                out[k] = ascii_lower(c);
                break;
            case CaseOp::Upper:
                out[k] = ascii_upper(c);
                break;
            case CaseOp::Capitalize:
                out[k] = k == 0 ? ascii_upper(c) : ascii_lower(c);
                break;
            case CaseOp::PyTitle: {
                const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
                out[k] = word_start ? ascii_upper(c) : ascii_lower(c);
                word_start = !letter;
                break;
            }
            case CaseOp::JinjaTitle: {
                const bool sep =
                    py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
                out[k] = word_start ? ascii_upper(c) : ascii_lower(c);
                word_start = sep;
                break;
            }
        }
    }
    return to_utf8(out);
}

}  // namespace ete::jinja
