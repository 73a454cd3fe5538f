// ete/data/corpus.cpp — text file -> token shard.
#include "ete/data/corpus.h"

#include <chrono>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/token_shard.h"
#include "ete/data/utf8.h"

namespace ete {

size_t check_utf8_input(std::string_view text, const std::string& source, bool strict) {
    if (utf8::valid(text)) return 0;
    utf8::Repair r;
    (void)utf8::repair(text, &r);
    ETE_CHECK(!strict,
              "{}: invalid UTF-8 at byte {} ({} invalid sequence(s); --strict-utf8 is set)", source,
              r.first_offset, r.replaced);
    log_warn("{}: {} invalid UTF-8 sequence(s), the first at byte {}; each encoded as U+FFFD",
             source, r.replaced, r.first_offset);
    return r.replaced;
}

TokenizeStats tokenize_text_file_to_shard(const std::string& text_path, const Tokenizer& tokenizer,
                                          const std::string& out_path, const TokenizeOptions& opt) {
    const int32_t eos = tokenizer.eos_id();
    ETE_CHECK(!opt.append_eos || eos >= 0,
              "tokenize '{}': --append-eos needs an end-of-text token, and the tokenizer has none "
              "(no eos_token in tokenizer_config.json, no eos_token_id in generation_config.json, "
              "no <|endoftext|>, <|end_of_text|> or </s>)",
              text_path);
    std::string text = read_file(text_path, UINT64_MAX);
    check_utf8_input(text, text_path, opt.strict_utf8);
    TokenizeStats stats;
    stats.bytes = text.size();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tokenizer.encode(text, opt.add_special_tokens);
    if (opt.append_eos) ids.push_back(eos);
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
