// ete/data/tok_pipeline.h — internal to the tokenizer: tokenizer.json's pipeline components
// (normalizers, pre-tokenizers, decoders, post-processors), each as Hugging Face's `tokenizers`
// implements it. Built from the JSON objects by the make_* functions, which name an unsupported
// component and where it sits in the file ("pre_tokenizer.pretokenizers[1]").
//
// Encoding runs on the text between added tokens: normalize (whole stretch), then pre-tokenize
// into pieces, then BPE per piece (tokenizer.cpp). HF keeps offsets; ETE needs none, so a
// normalizer rewrites a std::string and a pre-tokenizer rewrites a list of string views (pieces
// it transforms live in Pieces::owned).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ete {
class RegexSplitter;
}

namespace ete::tok {

class Normalizer {
  public:
    virtual ~Normalizer() = default;
    virtual void normalize(std::string& s) const = 0;
};

// The most a normalizer (and a Replace step) may grow a text: 16x plus 4 KiB. Real normalizers
// change a text by a few bytes per character (NFKC's widest expansion is 11x); a hostile
// tokenizer.json chaining Replaces grew 13 KB to 4.3 GB. Beyond it an ete::Error names the step.
size_t max_normalized_bytes(size_t input_bytes);

struct Pieces {
    std::vector<std::string_view> list;
    std::deque<std::string> owned;  // stable storage for rewritten pieces
    std::string_view own(std::string s) { return owned.emplace_back(std::move(s)); }
    void clear() {
        list.clear();
        owned.clear();
    }
};

class PreTokenizer {
  public:
    virtual ~PreTokenizer() = default;
    // Rewrites p.list. `origin`: p.list[0] starts at byte 0 of the whole input (Metaspace's
    // prepend_scheme "first" looks at that).
    virtual void split(Pieces& p, bool origin) const = 0;
    // True when the component is ByteLevel: the model's tokens are then GPT-2 byte-level text
    // and BPE runs on raw bytes (the byte -> char mapping is implicit).
    virtual bool is_byte_level() const { return false; }
};

// HF's decode_chain: each decoder rewrites the list of token strings.
class Decoder {
  public:
    virtual ~Decoder() = default;
    virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// What a post-processor adds around one sequence (add_special_tokens).
struct PostProcessor {
    std::vector<int32_t> prefix, suffix;
    bool empty() const { return prefix.empty() && suffix.empty(); }
};

// A loaded tokenizer's pipeline and the model options that go with it. The *_json strings are
// the components as the file wrote them ("null" when absent), written back verbatim by save().
struct Pipeline {
    std::unique_ptr<Normalizer> normalizer;  // null: none
    std::unique_ptr<PreTokenizer> pre;       // null: the stretch is one piece
    std::unique_ptr<Decoder> decoder;        // null: tokens joined with " " (as HF)
    PostProcessor post;
    bool byte_level = false;       // the pre-tokenizer ends in ByteLevel
    bool line_start_safe = false;  // encode may cut at split_at_line_starts' points
    std::string split_pattern;     // the pre-tokenizer's regex when it has exactly one
    bool byte_fallback = false, fuse_unk = false;
    std::string unk_token;  // empty: none
    std::string normalizer_json = "null", pre_json = "null", post_json = "null",
                decoder_json = "null";
};

// Builds the pipeline from a parsed tokenizer.json (`root`) and its model object.
std::shared_ptr<const Pipeline> make_pipeline(const nlohmann::json& root,
                                              const nlohmann::json& model, std::string_view src);
// The pipeline of a tokenizer ETE trains: GPT-2's (ByteLevel with its regex, no normalizer).
std::shared_ptr<const Pipeline> gpt2_pipeline();

// How Split combines the matches of its pattern with the text between them.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A Split pattern: a literal string or a regex (PCRE2 with Unicode 16 classes).
struct Pattern {
    std::string literal;
    std::shared_ptr<const RegexSplitter> regex;  // set: regex
    // Appends the [begin, end) spans of the non-overlapping matches in `s`.
    void find(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
    // Every match in `s` replaced by `content` (HF's Replace normalizer and decoder); an
    // ete::Error naming `what` when the result would exceed max_normalized_bytes(s.size()).
    void replace(std::string& s, const std::string& content, const char* what = "Replace") const;
};

// Splits `piece` into the pieces HF's NormalizedString::split gives for these matches.
void split_matches(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& matches,
                   Behavior behavior, bool invert, std::vector<std::string_view>& out);

// Metaspace's prepend_scheme (pre-tokenizer and decoder alike), or the legacy add_prefix_space.
enum class PrependScheme { Never, First, Always };

using json = nlohmann::json;
PrependScheme make_prepend_scheme(const json& j, std::string_view src, const std::string& where);
std::unique_ptr<Normalizer> make_normalizer(const json& j, std::string_view src,
                                            const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, std::string_view src,
                                                 const std::string& where);
std::unique_ptr<Decoder> make_decoder(const json& j, std::string_view src,
                                      const std::string& where);
PostProcessor make_post_processor(const json& j, std::string_view src, const std::string& where);
Pattern make_pattern(const json& j, std::string_view src, const std::string& where);
Behavior make_behavior(const json& j, std::string_view src, const std::string& where);

// \w as HF's regex engines read it (Oniguruma in Whitespace, Rust's regex in added tokens'
// single_word): UTS #18's word characters, Alphabetic + Mark + Decimal_Number +
// Connector_Punctuation + Join_Control.
bool is_word_char(char32_t c);

// GPT-2's byte-level decoding of one token: the bytes its characters stand for, or the
// token's own bytes when one character is outside the alphabet (HF's ByteLevel decoder).
std::string byte_level_decode(std::string_view token);

}  // namespace ete::tok
