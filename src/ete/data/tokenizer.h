// ete/data/tokenizer.h — BPE tokenizer stored as HF tokenizer.json, encoding and decoding as
// Hugging Face's `tokenizers` does.
//
// Pipeline of encode(): (1) added tokens are cut out of the raw text (leftmost match, longest on
// ties; those with "normalized": true are matched after normalization); (2) each stretch between
// them is normalized (NFC, Replace, Prepend, ...) and (3) pre-tokenized into pieces (Split with a
// regex, ByteLevel, Metaspace, ...; tok_pipeline.h); (4) BPE runs on each piece, merges lowest
// rank first (leftmost on ties). A byte-level model (the pre-tokenizer ends in ByteLevel: GPT-2,
// Llama-3, Qwen, ...) runs BPE on the piece's bytes; any other (SentencePiece-style: Llama-2,
// Gemma) on its code points, with <0xNN> byte fallback or the unk token for the ones missing from
// the vocab. decode() runs the file's decoder chain over the tokens.
//
// Ids: a trained tokenizer has ids 0..255 = the single bytes 0x00..0xFF, then one id per merge in
// merge order, then the special tokens (GPT-2's pipeline); a loaded tokenizer keeps the file's
// ids. Byte-level tokens are shown in their tokenizer.json form: raw bytes mapped by
// byte_level.h ("Ġthe"); other models' tokens are kept in their vocab form ("▁the", "<0xE9>").
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

#include "ete/data/merge_table.h"

namespace ete {

class RegexSplitter;
class AddedMatcher;
namespace tok {
struct Pipeline;
}

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
    bool lstrip = false;       // the match takes the whitespace before it
    bool rstrip = false;       // ... and after it
    bool single_word = false;  // matches only between non-word characters
    bool normalized = false;   // matched in the normalized text
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

    // HF tokenizer.json with a BPE model; an unsupported component is named with its place.
    static Tokenizer load(const std::string& path);
    static Tokenizer from_json(std::string_view json, std::string_view source_name);
    void save(const std::string& path) const;  // atomic (temporary file + rename)
    std::string to_json() const;

    // Text that is not valid UTF-8 is encoded as HF would see it, each maximal invalid stretch
    // replaced by U+FFFD (utf8::repair); callers that must warn or refuse check it first.
    std::vector<int32_t> encode(std::string_view text) const;
    // With add_special_tokens, the post-processor's template around the ids (BOS and the like).
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
    void encode_append(std::string_view text, std::vector<int32_t>& out) const;
    // The decoder chain over the tokens of `ids` (HF's decode); skip_special drops special added
    // tokens first. Byte-level output that is not UTF-8 gets U+FFFD, as in HF.
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
    // The tokens' raw bytes, concatenated (byte-level models: exactly the encoded bytes).
    std::string decode_bytes(std::span<const int32_t> ids) const;
    // Steps (2) and (3) alone, on the whole text (no added tokens cut out). Byte-level pieces
    // are raw bytes.
    std::vector<std::string> pretokenize(std::string_view text) const;
    bool is_byte_level() const;  // false: BPE over code points (SentencePiece style)

    int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }  // max id + 1
    // Tokens in their vocab form: "Ġthe" (byte-level) or "▁the" (metaspace).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::string id_to_token(int32_t id) const;
    const std::string& id_to_bytes(int32_t id) const;  // raw bytes (non byte-level: vocab form)
    // BOS, EOS and pad as transformers reads them: load() takes them from tokenizer_config.json
    // (bos_token, eos_token, pad_token) and then generation_config.json (bos/eos/pad_token_id)
    // next to the file; without either, from the token names: eos "<|endoftext|>",
    // "<|end_of_text|>" or "</s>" (-1 if none), bos "<|begin_of_text|>" or "<s>", else eos (GPT-2
    // convention), no pad.
    int32_t eos_id() const;
    int32_t bos_id() const;
    int32_t pad_id() const;
    // The ids that end generation: eos_id() and every eos_token_id of generation_config.json.
    const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
    // Where eos_id() came from ("tokenizer_config.json", "generation_config.json" or "names").
    const std::string& eos_source() const { return eos_source_; }
    // What the post-processor puts before and after a sequence.
    const std::vector<int32_t>& special_prefix() const;
    const std::vector<int32_t>& special_suffix() const;

    size_t num_merges() const { return merges_.size(); }
    std::pair<int32_t, int32_t> merge(size_t rank) const { return merges_.at(rank); }
    const std::vector<AddedToken>& added_tokens() const { return added_; }
    const std::string& split_pattern() const;  // empty when no regex split

  private:
    enum class TokenKind : uint8_t { Unused, Model, Added };
    struct Segment {
        std::string_view text;  // plain text when id < 0
        int32_t id;             // added token id
        bool at_start;          // starts at byte 0 of the input
    };
    class PieceCache;
    friend class TokenizerJson;

    Tokenizer() = default;
    // Builds the lookup tables; `source` names the file in error messages. `vocab`, when given,
    // is the file's model.vocab (token as written -> id; taken): the token forms' table starts
    // from it instead of spelling every model token again.
    void finalize(std::string_view source, StringIdMap* vocab = nullptr);
    void finalize_byte_level(std::string_view source, StringIdMap* vocab);
    void finalize_chars(std::string_view source, StringIdMap* vocab);
    void take_vocab_forms(StringIdMap* vocab);
    void use_gpt2_pipeline();
    void read_model_configs(const std::string& dir);  // special_tokens.cpp
    void set_default_specials();
    // Cuts the added tokens with normalized == `normalized` out of `text`.
    std::vector<Segment> split_added(std::string_view text, bool normalized) const;
    // `parallel`: a large stretch that cannot be cut before pre-tokenization; its pieces are
    // encoded by all threads (encode_pieces).
    void encode_stretch(std::string_view text, bool at_start, PieceCache& cache,
                        std::vector<int32_t>& out, bool parallel = false) const;
    void encode_pieces(bool at_start, PieceCache& cache, std::vector<int32_t>& out,
                       bool parallel = false) const;
    // Encodes pre-tokenized pieces with `cache`'s memo and scratch; `cut`: each is first cut at
    // its SentencePiece spaces (next_cut).
    void encode_piece_range(std::span<const std::string_view> pieces, bool cut, PieceCache& cache,
                            std::vector<int32_t>& out) const;
    void bpe_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
    void char_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
    // Where the part of a code-point piece that starts at `begin` ends (see cut_at_space_).
    size_t next_cut(std::string_view piece, size_t begin) const;
    // A piece from the memo, or encoded by bpe_piece / char_piece and memoized.
    void encode_piece(std::string_view piece, PieceCache& cache, std::vector<int32_t>& out) const;
    // Applies the merges to the c.sym[0..n) symbols and appends the result to `out`.
    void merge_symbols(int32_t n, PieceCache& c, std::vector<int32_t>& out) const;
    void count_words(std::string_view text, WordCounts& counts) const;  // training, step (1)
    static Tokenizer from_word_counts(const std::vector<std::pair<std::string, int64_t>>& words,
                                      int vocab_size,
                                      const std::vector<std::string>& special_tokens);

    // Source of truth (set by train / load), indexed by id.
    std::vector<std::string> bytes_;  // raw bytes (an added token's content)
    std::vector<TokenKind> kind_;
    std::vector<std::pair<int32_t, int32_t>> merges_;  // rank -> (left id, right id)
    std::vector<AddedToken> added_;
    bool ignore_merges_ = false;  // a whole piece found in the vocab is taken as is (Llama-3)
    std::vector<bool> in_model_;  // an added token that model.vocab lists too (merges may make it)
    std::vector<bool> special_;   // a special added token (decode's skip_special drops it)
    std::shared_ptr<const tok::Pipeline> pipe_;
    std::shared_ptr<const RegexSplitter> splitter_;  // training: GPT-2's regex

    // Derived by finalize().
    std::array<int32_t, 256> byte_id_{};
    MergeTable merge_rule_;
    // Code-point BPE with an unk token (no character is dropped): a piece is cut before each
    // U+2581 '▁' that follows a character c other than '▁' when no merge joins a token ending in
    // c to one starting with '▁' (no_cut_after_: the sorted c that some merge does join); the
    // parts encode (and are memoized) separately with the same result.
    bool cut_at_space_ = false;
    std::vector<int32_t> no_cut_after_;
    StringIdMap token_id_;  // byte-level form (an added token's content) -> id
    StringIdMap bytes_id_;  // raw bytes -> model token id
    std::shared_ptr<const AddedMatcher> raw_added_, norm_added_;  // by `normalized`
    std::array<int32_t, 256> fallback_id_{};  // code-point BPE: id of "<0xNN>", -1 if absent
    int32_t unk_id_ = -1;                     // code-point BPE: id of unk_token, -1 if none
    bool has_normalized_added_ = false;
    int32_t bos_ = -1, eos_ = -1, pad_ = -1;
    std::vector<int32_t> stop_ids_;
    std::string eos_source_ = "names";
};

}  // namespace ete
