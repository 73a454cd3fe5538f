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

// PCRE2 10.42 counts U+180E MONGOLIAN VOWEL SEPARATOR as \s (it was a space before Unicode 6.3),
// while GPT-2's `regex` module, HF tokenizers (Oniguruma), tiktoken and Rust's regex all use the
// Unicode White_Space property. So \s and \S compile as that property (inside classes too), and
// pre-tokens match theirs. \Q...\E quotes and escaped backslashes are copied unchanged.
std::string with_unicode_white_space(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 32);
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] != '\\' || i + 1 == pattern.size()) {
            out += pattern[i];
            continue;
        }
        const char next = pattern[++i];
        if (next == 's') {
            out += "\\p{White_Space}";
        } else if (next == 'S') {
            out += "\\P{White_Space}";
        } else if (next == 'Q') {
            const size_t end = std::min(pattern.find("\\E", i + 1), pattern.size());
            out.append(pattern.substr(i - 1, end - (i - 1)));
            i = end + 1;  // past the "\E" (or the end)
            if (end < pattern.size()) out += "\\E";
        } else {
            out += '\\';
            out += next;
        }
    }
    return out;
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
    const std::string compiled = with_unicode_white_space(pattern_);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     opts, &err, &err_off, nullptr);
    ETE_CHECK(code != nullptr, "pre-tokenizer regex '{}': does not compile at offset {}{}: {}",
              pattern_, err_off, compiled == pattern_ ? "" : fmt::format(" of '{}'", compiled),
              pcre2_message(err));
    code_ = code;
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // interpreter fallback otherwise
}

RegexSplitter::~RegexSplitter() {
    pcre2_code_free(as_code(code_));
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
    const pcre2_code* code = as_code(code_);
    MatchData m(code);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
        int rc = pcre2_match(code, subject, text.size(), pos, 0, m.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) {
            out.push_back(text.substr(pos));  // only unmatchable (invalid UTF-8) bytes remain
            return;
        }
        ETE_CHECK(rc >= 0, "pre-tokenizer regex '{}': match failed at byte {}: {}", pattern_, pos,
                  pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
        size_t begin = ov[0], end = ov[1];
        ETE_CHECK(end > begin, "pre-tokenizer regex '{}': matched an empty string at byte {}",
                  pattern_, begin);
        if (begin > pos) out.push_back(text.substr(pos, begin - pos));
        out.push_back(text.substr(begin, end - begin));
        pos = end;
    }
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
            if (nl > 0 && is_graphic_ascii(text[nl - 1]) && is_graphic_ascii(text[nl + 1])) {
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
