// ete/data/corpus.h — turning text files into token shards.
#pragma once

#include <cstdint>
#include <string>

#include "ete/data/tokenizer.h"

namespace ete {

struct TokenizeStats {
    uint64_t bytes = 0;   // text bytes read
    uint64_t tokens = 0;  // ids written (including the EOS)
    double seconds = 0;   // encoding time (reading and writing excluded)
    double tokens_per_second() const { return seconds > 0 ? tokens / seconds : 0.0; }
};

struct TokenizeOptions {
    bool append_eos = false;          // end with the tokenizer's eos (an error if it has none)
    bool add_special_tokens = false;  // the post-processor's template around the document
    bool strict_utf8 = false;         // invalid UTF-8 is an error (else U+FFFD, one warning)
};

// Checks `text` (read from `source`) for invalid UTF-8: with `strict` an error naming the first
// bad byte offset, else one warning with the count and that offset (the encoder then sees each
// invalid stretch as U+FFFD, as HF's text pipeline would). Returns the number of stretches.
size_t check_utf8_input(std::string_view text, const std::string& source, bool strict);

// Encodes the whole file as one document (in parallel over line-aligned chunks, same ids as a
// serial encode) and writes a token shard atomically. Logs and returns the throughput.
TokenizeStats tokenize_text_file_to_shard(const std::string& text_path, const Tokenizer& tokenizer,
                                          const std::string& out_path, const TokenizeOptions& opt);

}  // namespace ete
