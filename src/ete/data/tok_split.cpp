// ete/data/tok_split.cpp — Split patterns and HF's split behaviours.
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_pipeline.h"

namespace ete::tok {

void Pattern::find(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
    if (s.empty()) return;  // HF: an empty text has no matches, not even an empty one
    if (regex) return regex->matches(s, out);
    if (literal.empty()) return;
    for (size_t p = s.find(literal); p != std::string_view::npos;
         p = s.find(literal, p + literal.size())) {
        out.emplace_back(p, p + literal.size());
    }
}

size_t max_normalized_bytes(size_t input_bytes) {
    return 16 * input_bytes + 4096;
}

void Pattern::replace(std::string& s, const std::string& content, const char* what) const {
    std::vector<std::pair<size_t, size_t>> m;
    find(s, m);
    if (m.empty()) return;
    size_t matched = 0;
    for (auto [b, e] : m) matched += e - b;
    const size_t size = s.size() - matched + m.size() * content.size();
    ETE_CHECK(size <= max_normalized_bytes(s.size()),
              "tokenizer.json {} to {:?}: would grow a {}-byte text to {} bytes (more than "
              "16x): refused (real tokenizers change a text by a few bytes per character)",
              what, content.substr(0, 40), s.size(), size);
    std::string out;
    out.reserve(size);
    size_t prev = 0;
    for (auto [b, e] : m) {
        out.append(s, prev, b - prev);
        out += content;
        prev = e;
    }
    out.append(s, prev);
    s.swap(out);
}

void split_matches(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches,
                   Behavior behavior, bool invert, std::vector<std::string_view>& out) {
    // The tiling of `piece` into (span, is_match), as HF's Pattern::find_matches returns it.
    struct Span {
        size_t begin, end;
        bool match;
    };
    std::vector<Span> spans;
    size_t prev = 0;
    for (auto [b, e] : matches) {
        if (b > prev) spans.push_back({prev, b, invert});
        spans.push_back({b, e, !invert});
        prev = e;
    }
    if (prev < piece.size() || spans.empty()) spans.push_back({prev, piece.size(), invert});
    std::vector<Span> kept;  // the pieces, before empty ones are dropped
    bool previous_match = false;
    switch (behavior) {
        case Behavior::Removed:
            for (const Span& s : spans) {
                if (!s.match) kept.push_back(s);
            }
            break;
        case Behavior::Isolated:
            kept.swap(spans);
            break;
        case Behavior::MergedWithPrevious:
            for (const Span& s : spans) {
                if (s.match && !previous_match && !kept.empty()) {
                    kept.back().end = s.end;
                } else {
                    kept.push_back(s);
                }
                previous_match = s.match;
            }
            break;
        case Behavior::MergedWithNext:
            for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
                if (it->match && !previous_match && !kept.empty()) {
                    kept.back().begin = it->begin;
                } else {
                    kept.push_back(*it);
                }
                previous_match = it->match;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        case Behavior::Contiguous:
            for (const Span& s : spans) {
                if (s.match == previous_match && !kept.empty()) {
                    kept.back().end = s.end;
                } else {
                    kept.push_back(s);
                }
                previous_match = s.match;
            }
            break;
    }
    for (const Span& s : kept) {
        if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
    }
}

Pattern make_pattern(const json& j, std::string_view src, const std::string& where) {
    ETE_CHECK(j.is_object() && j.size() == 1 && (j.contains("String") || j.contains("Regex")),
              "{}: {} must be {{\"String\": ...}} or {{\"Regex\": ...}}", src, where);
    Pattern p;
    if (const json* s = field(j, "String")) {
        ETE_CHECK(s->is_string(), "{}: {}.String must be a string", src, where);
        p.literal = s->get<std::string>();
        return p;
    }
    const json* r = field(j, "Regex");
    ETE_CHECK(r != nullptr && r->is_string(), "{}: {}.Regex must be a string", src, where);
    try {
        p.regex = std::make_shared<const RegexSplitter>(r->get<std::string>());
    } catch (const Error& e) {
        throw_error(fmt::format("{}: {}: {}", src, where, e.what()));
    }
    return p;
}

Behavior make_behavior(const json& j, std::string_view src, const std::string& where) {
    static const std::pair<const char*, Behavior> kNames[] = {
        {"Removed", Behavior::Removed},
        {"Isolated", Behavior::Isolated},
        {"MergedWithPrevious", Behavior::MergedWithPrevious},
        {"MergedWithNext", Behavior::MergedWithNext},
        {"Contiguous", Behavior::Contiguous}};
    if (j.is_string()) {
        const std::string& s = j.get_ref<const std::string&>();
        for (auto [name, b] : kNames) {
            if (s == name) return b;
        }
    }
    throw_error(
        fmt::format("{}: {} is {}, expected Removed, Isolated, MergedWithPrevious, "
                    "MergedWithNext or Contiguous",
                    src, where, j.dump()));
}

}  // namespace ete::tok
