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

// Encodes the whole file as one document (in parallel over line-aligned chunks, same ids as a
// serial encode), appends the tokenizer's EOS when `append_eos` (an error if it has none), and
// writes a token shard atomically. Logs and returns the throughput.
TokenizeStats tokenize_text_file_to_shard(const std::string& text_path, const Tokenizer& tokenizer,
                                          const std::string& out_path, bool append_eos);

}  // namespace ete
