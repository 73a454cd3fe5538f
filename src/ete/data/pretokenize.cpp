// ete/data/pretokenize.cpp — PCRE2-backed regex splitter and line-start chunking.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "ete/data/pretokenize.h"

#include <pcre2.h>

#include "ete/core/error.h"

namespace ete {
namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    int n = pcre2_get_error_message(code, buf, sizeof(buf));
    return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf));
}

pcre2_code* as_code(void* p) {
    return static_cast<pcre2_code*>(p);
}

bool is_graphic_ascii(char c) {
    return c >= 0x21 && c <= 0x7E;
}

bool is_ascii_alnum(char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

// Frees the per-call match data even when split() throws.
struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code)
        : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        ETE_CHECK(md != nullptr, "regex split: out of memory for PCRE2 match data");
    }
    ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

RegexSplitter::RegexSplitter(std::string pattern) : pattern_(std::move(pattern)) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // UCP makes \s, \p{L}, \w Unicode-aware; MATCH_INVALID_UTF lets invalid bytes sit between
    // matches instead of failing the whole subject.
    const uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    const std::string compiled = pcre2_pattern(pattern_);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     opts, &err, &err_off, nullptr);
    ETE_CHECK(code != nullptr,
              "pre-tokenizer regex '{}': does not compile ({} at offset {} of "
              "its PCRE2 form)",
              pattern_, pcre2_message(err), err_off);
    code_ = code;
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // interpreter fallback otherwise
}

RegexSplitter::~RegexSplitter() {
    pcre2_code_free(as_code(code_));
}

// Calls f(begin, end) for each match of the regex in `text`, as Oniguruma's find_iter (HF's
// regex engine) yields them: leftmost, non-overlapping, empty matches included except one right
// at the end of the previous match (the search then moves on one character).
template <class F>
void RegexSplitter::each_match(std::string_view text, F&& f) const {
    const pcre2_code* code = as_code(code_);
    MatchData m(code);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0, last_end = std::string_view::npos;
    while (pos <= text.size()) {
        int rc = pcre2_match(code, subject, text.size(), pos, 0, m.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) return;
        ETE_CHECK(rc >= 0, "pre-tokenizer regex '{}': match failed at byte {}: {}", pattern_, pos,
                  pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
        const size_t begin = ov[0], end = ov[1];
        if (begin == end && end == last_end) {
            if (pos == text.size()) return;
            ++pos;
            while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
                ++pos;
            }
            continue;
        }
        f(begin, end);
        pos = last_end = end;
    }
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
    // The text between matches, and the matches, as pieces; an empty match is only a boundary.
    size_t prev = 0;
    each_match(text, [&](size_t begin, size_t end) {
        if (begin > prev) out.push_back(text.substr(prev, begin - prev));
        if (end > begin) out.push_back(text.substr(begin, end - begin));
        prev = end;
    });
    if (prev < text.size()) out.push_back(text.substr(prev));  // also unmatchable invalid bytes
}

void RegexSplitter::matches(std::string_view text,
                            std::vector<std::pair<size_t, size_t>>& out) const {
    each_match(text, [&](size_t begin, size_t end) { out.emplace_back(begin, end); });
}

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
    std::vector<std::string_view> out;
    split(text, out);
    return out;
}

std::vector<std::string_view> split_at_line_starts(std::string_view text, size_t target_bytes) {
    std::vector<std::string_view> chunks;
    size_t begin = 0;
    while (text.size() - begin > target_bytes) {
        size_t cut = std::string_view::npos;
        for (size_t nl = text.find('\n', begin + target_bytes); nl != std::string_view::npos;
             nl = text.find('\n', nl + 1)) {
            if (nl + 1 >= text.size()) break;
            if (nl > 0 && is_graphic_ascii(text[nl - 1]) && is_ascii_alnum(text[nl + 1])) {
                cut = nl + 1;
                break;
            }
        }
        if (cut == std::string_view::npos) break;
        chunks.push_back(text.substr(begin, cut - begin));
        begin = cut;
    }
    if (begin < text.size() || chunks.empty()) chunks.push_back(text.substr(begin));
    return chunks;
}

}  // namespace ete
