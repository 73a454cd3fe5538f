// ete/data/corpus.cpp — text file -> token shard.
#include "ete/data/corpus.h"

#include <chrono>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/token_shard.h"

namespace ete {

TokenizeStats tokenize_text_file_to_shard(const std::string& text_path, const Tokenizer& tokenizer,
                                          const std::string& out_path, bool append_eos) {
    const int32_t eos = tokenizer.eos_id();
    ETE_CHECK(!append_eos || eos >= 0,
              "tokenize '{}': append_eos needs an end-of-text token (<|endoftext|>), the "
              "tokenizer has none",
              text_path);
    std::string text = read_file(text_path, UINT64_MAX);
    TokenizeStats stats;
    stats.bytes = text.size();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tokenizer.encode(text);
    if (append_eos) ids.push_back(eos);
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats.tokens = ids.size();
    write_token_shard(out_path, ids, static_cast<uint32_t>(tokenizer.vocab_size()));
    log_info(
        "tokenized {} ({} bytes) -> {} tokens in {:.3f} s ({:.2f} M tokens/s), {:.2f} "
        "bytes/token -> {}",
        text_path, stats.bytes, stats.tokens, stats.seconds, stats.tokens_per_second() / 1e6,
        stats.tokens ? static_cast<double>(stats.bytes) / stats.tokens : 0.0, out_path);
    return stats;
}

}  // namespace ete
