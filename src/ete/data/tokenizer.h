// ete/data/tokenizer.h — BPE tokenizer stored as HF tokenizer.json: byte-level (GPT-2, Llama-3)
// or SentencePiece-style "metaspace" (Llama-2: '▁' marks a space, <0xNN> byte fallback).
//
// Pipeline of encode(): (1) added/special tokens are matched in the raw text first (leftmost
// match, longest on ties) and emit their ids; (2) each stretch between them is split by the
// pre-tokenizer regex (GPT-2's by default); (3) each piece starts as one token per byte and BPE
// merges are applied lowest rank first (leftmost on ties). decode() concatenates token bytes, so
// decode(encode(x)) == x for any byte string, valid UTF-8 or not (with add_prefix_space off).
//
// Ids: a trained tokenizer has ids 0..255 = the single bytes 0x00..0xFF, then one id per merge in
// merge order, then the special tokens; a loaded tokenizer keeps the file's ids. Tokens are shown
// in their tokenizer.json ("byte-level") form: raw bytes mapped by byte_level.h ("Ġthe").
//
// Metaspace mode (loaded only; see tokenizer_metaspace.cpp): each plain stretch is normalized as
// the file says (Prepend "▁" normalizer: always; Metaspace prepend_scheme "first": only at text
// offset 0, "always": every stretch, both only when it does not already start with "▁"; spaces
// become "▁"), optionally split before each "▁" (Metaspace split), then BPE runs over UTF-8 code
// points. A code point missing from the vocab becomes the <0xNN> tokens of its bytes
// (byte_fallback), else unk_token (consecutive ones fused with fuse_unk), else it is dropped, as
// in HF. decode() maps "▁" to space, joins <0xNN> runs into bytes (U+FFFD per byte when a run is
// not valid UTF-8) and strips one leading space when the decoder says so. Tokens are kept in
// their vocab form ("▁the", "<0xE9>") and id_to_bytes() returns that form too.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ete {

class RegexSplitter;

// Hash for string-keyed maps that allows lookups by string_view without a copy.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
using WordCounts = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

struct AddedToken {
    int32_t id = -1;
    std::string content;  // matched verbatim in raw text
    bool special = true;
};

class Tokenizer {
  public:
    // BPE training. Pre-tokens are counted once, then merges run over the unique pre-tokens with
    // pair counts updated incrementally. The most frequent pair wins; ties go to the smallest
    // (left id, right id), so training is reproducible. `vocab_size` counts the 256 byte tokens,
    // the merges and the special tokens. Special tokens are cut out of the training text.
    static Tokenizer train(std::string_view text, int vocab_size,
                           const std::vector<std::string>& special_tokens = {});
    static Tokenizer train_files(const std::vector<std::string>& paths, int vocab_size,
                                 const std::vector<std::string>& special_tokens = {});

    // HF tokenizer.json. load() accepts a BPE model with a ByteLevel pre-tokenizer (or a
    // Sequence of one regex Split then ByteLevel), or Llama-2's SentencePiece-style files (a
    // Sequence [Prepend "▁", Replace " " -> "▁"] normalizer and/or a Metaspace pre-tokenizer,
    // byte_fallback); merges as "a b" or ["a", "b"].
    static Tokenizer load(const std::string& path);
    static Tokenizer from_json(std::string_view json, std::string_view source_name);
    void save(const std::string& path) const;  // atomic (temporary file + rename)
    std::string to_json() const;

    std::vector<int32_t> encode(std::string_view text) const;
    void encode_append(std::string_view text, std::vector<int32_t>& out) const;
    std::string decode(std::span<const int32_t> ids) const;
    std::vector<std::string_view> pretokenize(std::string_view text) const;  // step (2) alone
    bool is_byte_level() const { return !sp_; }  // false: metaspace (Llama-2) mode

    int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }  // max id + 1
    // Tokens in their vocab form: "Ġthe" (byte-level) or "▁the" (metaspace).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::string id_to_token(int32_t id) const;
    const std::string& id_to_bytes(int32_t id) const;  // raw bytes (metaspace: vocab form)
    int32_t eos_id() const;  // "<|endoftext|>", "<|end_of_text|>" or "</s>"; -1 if none
    int32_t bos_id() const;  // "<|begin_of_text|>" or "<s>"; else eos_id() (GPT-2 convention)

    // Metaspace (SentencePiece-style) settings as read from tokenizer.json.
    enum class Prepend : uint8_t { Never, First, Always };
    struct Metaspace {
        bool prepend_normalizer = false;  // normalizer Prepend "▁" (non-empty stretches)
        bool replace_normalizer = false;  // normalizer Replace " " -> "▁"
        bool pre_tokenizer = false;       // a Metaspace pre-tokenizer follows
        Prepend scheme = Prepend::First;  // its prepend_scheme
        bool split = false;               // its split (cut before each "▁")
        bool strip_space = true;          // decoder Strip(" ", start 1)
        bool byte_fallback = false;
        bool fuse_unk = false;
        std::string unk_token;       // empty: none
        std::string post_processor;  // JSON text, written back verbatim by save()
    };
    const Metaspace* metaspace() const { return sp_.get(); }  // null: byte-level

    size_t num_merges() const { return merges_.size(); }
    std::pair<int32_t, int32_t> merge(size_t rank) const { return merges_.at(rank); }
    const std::vector<AddedToken>& added_tokens() const { return added_; }
    const std::string& split_pattern() const;  // empty when no regex split

  private:
    struct MergeRule {
        int32_t rank;
        int32_t id;
    };
    enum class TokenKind : uint8_t { Unused, Model, Added };
    // How the pre-tokenizer is written to tokenizer.json.
    enum class PreTokForm : uint8_t { ByteLevelRegex, SplitThenByteLevel, ByteLevelNoRegex };
    struct Segment {
        std::string_view text;  // plain text when id < 0
        int32_t id;             // added token id
        bool at_start;          // first stretch of a text (add_prefix_space applies)
    };
    class PieceCache;
    friend class TokenizerJson;

    Tokenizer() = default;
    // Builds the lookup tables; `source` names the file in error messages.
    void finalize(std::string_view source);
    void finalize_byte_level(std::string_view source);
    void set_pre_tokenizer(PreTokForm form, std::string pattern);
    std::vector<Segment> split_added(std::string_view text) const;
    void encode_segment(std::string_view text, bool at_start, PieceCache& cache,
                        std::vector<int32_t>& out) const;
    void bpe_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
    // Applies the merges to the c.sym[0..n) symbols and appends the result to `out`.
    void merge_symbols(int32_t n, PieceCache& c, std::vector<int32_t>& out) const;
    // Metaspace mode (tokenizer_metaspace.cpp).
    void finalize_metaspace(std::string_view source);
    void encode_metaspace(std::string_view text, bool text_start, PieceCache& cache,
                          std::vector<int32_t>& out) const;
    void sp_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
    std::string decode_metaspace(std::span<const int32_t> ids) const;
    void count_words(std::string_view text, WordCounts& counts) const;  // training, step (1)
    static Tokenizer from_word_counts(const std::vector<std::pair<std::string, int64_t>>& words,
                                      int vocab_size,
                                      const std::vector<std::string>& special_tokens);

    // Source of truth (set by train / load), indexed by id.
    std::vector<std::string> bytes_;  // raw bytes (an added token's content)
    std::vector<TokenKind> kind_;
    std::vector<std::pair<int32_t, int32_t>> merges_;  // rank -> (left id, right id)
    std::vector<AddedToken> added_;
    PreTokForm pre_form_ = PreTokForm::ByteLevelRegex;
    bool add_prefix_space_ = false;
    bool ignore_merges_ = false;  // a whole piece found in the vocab is taken as is (Llama-3)
    std::shared_ptr<const RegexSplitter> splitter_;
    std::shared_ptr<const Metaspace> sp_;  // set: metaspace mode (immutable)
    bool chunkable_ = false;  // splitter_ ends a match at every line start (parallel encode)

    // Derived by finalize().
    std::array<int32_t, 256> byte_id_{};
    std::unordered_map<uint64_t, MergeRule> merge_rule_;  // key (left << 32) | right
    StringIdMap token_id_;                    // byte-level form (an added token's content) -> id
    StringIdMap bytes_id_;                    // raw bytes -> model token id
    std::vector<size_t> added_by_length_;     // indices into added_, longest content first
    std::array<int32_t, 256> fallback_id_{};  // metaspace: id of "<0xNN>", -1 if absent
    int32_t unk_id_ = -1;                     // metaspace: id of unk_token, -1 if none
};

}  // namespace ete
