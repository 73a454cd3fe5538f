// fuzz/tokenizer_fuzz.cpp — libFuzzer target for tokenizer.json (ete/data/tokenizer.h), the file
// format whose readers walk user-controlled nesting and whose normalizers can grow a text.
//
// Each input is a tokenizer.json. ete::Error from Tokenizer::from_json is the expected rejection.
// An accepted tokenizer then encodes a few fixed texts (ASCII, accents, CJK, an emoji, invalid
// UTF-8, its own added tokens' contents) and decodes every id it produced: ete::Error there is
// allowed only from the documented run-time limits (a normalizer growing a text more than 16x);
// any other exception, a crash, a sanitizer report, a timeout or an out-of-memory is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ete/core/error.h"
#include "ete/data/tokenizer.h"

namespace {

const char* const kTexts[] = {
    "Hello, world! It's 2026.",
    "  leading and  double  spaces\n\ttabs\r\n",
    "naïve café Ünïcödé ß",
    "中文字符和日本語のテキスト",
    "emoji 🤖👍🏽 end",
    "\xff\xfe invalid \xc3 utf-8 \xe2\x82",
    "",
};

void exercise(const ete::Tokenizer& t, std::string_view text) {
    std::vector<int32_t> ids;
    try {
        ids = t.encode(text, true);
    } catch (const ete::Error& e) {
        // The one run-time refusal a valid tokenizer may give: a normalizer that explodes.
        if (std::string_view(e.what()).find("more than 16x") != std::string_view::npos) return;
        std::fprintf(stderr, "tokenizer_fuzz: encode of an accepted tokenizer threw: %s\n",
                     e.what());
        std::abort();
    }
    for (int32_t id : ids)
        if (id < 0 || id >= t.vocab_size()) {
            std::fprintf(stderr, "tokenizer_fuzz: encode produced id %d outside [0, %d)\n", id,
                         t.vocab_size());
            std::abort();
        }
    try {
        (void)t.decode(ids, false);
        (void)t.decode(ids, true);
    } catch (const ete::Error& e) {
        std::fprintf(stderr, "tokenizer_fuzz: decode of its own ids threw: %s\n", e.what());
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::optional<ete::Tokenizer> t;
    try {
        t.emplace(ete::Tokenizer::from_json(
            std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json"));
    } catch (const ete::Error&) {
        return 0;  // expected: a rejected file
    }
    for (const char* text : kTexts) exercise(*t, text);
    return 0;
}
