// ete/data/tok_json_stream.h — internal to the tokenizer: tokenizer.json parsed in one pass, the
// BPE model's vocab and merges (99% of a large file: 262k tokens and 514k merges in Gemma 3's)
// streamed into flat tables instead of a JSON tree, everything else a tree as parse_json builds
// it. The tree of a 128k-token vocab was a node and a key string per token, built, walked once
// and freed; the streamed tables are read by TokenizerJson with the same checks and messages.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ete::tok {

// One element of model.merges as written: "a b" (whole in `a`), ["a", "b"], or anything else;
// its strings are spans of StreamedTokenizerJson::text (one buffer: a million short strings of
// their own cost more than the parse).
struct MergeEntry {
    enum class Kind : uint8_t { Joined, Pair, Bad };
    size_t a = 0, a_size = 0, b = 0, b_size = 0;
    Kind kind = Kind::Bad;
};

struct VocabEntry {
    size_t token = 0, token_size = 0;
    int64_t id = -1;  // -1: not an integer in [0, max_id]
};

struct StreamedTokenizerJson {
    // The file's tree; model.vocab and model.merges are null in it when streamed below.
    nlohmann::json root;
    // The streamed strings, back to back.
    std::string text;
    // model.vocab when it is an object, in file order (a repeated token's last entry is the one
    // the tree would hold).
    bool vocab_streamed = false;
    std::vector<VocabEntry> vocab;
    // model.merges when it is an array.
    bool merges_streamed = false;
    std::vector<MergeEntry> merges;

    std::string_view at(size_t offset, size_t size) const {
        return std::string_view(text).substr(offset, size);
    }
};

// Throws ete::Error "WHERE: invalid JSON (...)" like parse_json (json_file.h), nesting limit
// included; ids above max_id are recorded as -1.
StreamedTokenizerJson parse_tokenizer_json(std::string_view text, const std::string& where,
                                           int64_t max_id);

}  // namespace ete::tok
