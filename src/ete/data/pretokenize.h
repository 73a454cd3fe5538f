// ete/data/pretokenize.h — regex pre-tokenization (PCRE2, UTF + UCP, JIT when available).
//
// BPE merges never cross a pre-token boundary. The splitter returns pieces that tile the input
// exactly: matches of the pattern, plus any bytes the pattern cannot match (PCRE2 skips invalid
// UTF-8 under PCRE2_MATCH_INVALID_UTF), which become pieces of their own. Concatenating the pieces
// always gives the input back, so byte-exact round trips hold for any input, UTF-8 or not.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ete {

// GPT-2's pattern (also the one HF's ByteLevel pre-tokenizer applies with use_regex: true).
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `pattern` (a tokenizer.json regex, as Oniguruma reads it) as PCRE2 must compile it to match
// the same text: \s and \S become the White_Space property (PCRE2 also counts U+180E), and the
// general categories (\p{L}, \p{Lu}, \p{N}, ...) follow Unicode 16.0 instead of PCRE2's own
// Unicode 14.0 tables. \Q...\E quotes are copied unchanged.
std::string pcre2_pattern(std::string_view pattern);

class RegexSplitter {
  public:
    // Throws ete::Error naming the pattern and PCRE2's message when it does not compile.
    explicit RegexSplitter(std::string pattern);
    ~RegexSplitter();
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Appends the pieces of `text` (views into it) to `out`. Thread-safe.
    void split(std::string_view text, std::vector<std::string_view>& out) const;
    std::vector<std::string_view> split(std::string_view text) const;
    // Appends the [begin, end) byte spans of the pattern's non-overlapping matches, as
    // Oniguruma's find_iter gives them: an empty match counts, unless it sits right at the end
    // of the previous match (the search then moves on one character).
    void matches(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

    const std::string& pattern() const { return pattern_; }
    bool jit() const { return jit_; }

  private:
    template <class F>
    void each_match(std::string_view text, F&& f) const;

    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*; kept opaque so PCRE2 stays out of this header
    bool jit_ = false;
};

// Splits `text` into chunks of about `target_bytes` at places where the GPT-2 pattern is known to
// end a match whether or not the text continues: after the '\n' of "X\nY" with X graphic ASCII
// and Y an ASCII letter or digit. There "\n" ends a piece in the whole text and at the end of a
// chunk, and no piece spans it. (A whitespace run before the cut would not do: "\n\nY" splits
// "\n", "\n" but a chunk ending in "\n\n" keeps one "\n\n" piece; and GPT-4o's punctuation
// alternative swallows "\n/", hence a letter or digit after the cut.) Pre-tokenizing the chunks
// one by one thus gives the same pieces as the whole text, so chunks can be processed in
// parallel. Other patterns may use it only if they share that property (tok_pipeline.cpp lists
// them).
std::vector<std::string_view> split_at_line_starts(std::string_view text, size_t target_bytes);

}  // namespace ete
