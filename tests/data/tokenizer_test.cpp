// tests/data/tokenizer_test.cpp — byte-level alphabet, GPT-2 pre-tokenizer, BPE training,
// encode/decode round trips, tokenizer.json save/load and error messages.
#include <gtest/gtest.h>

#include <omp.h>
#include <unistd.h>
#include "test_util.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/byte_level.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tokenizer.h"
#include "ete/data/utf8.h"

namespace ete {
namespace tokenizer_test {

namespace fs = std::filesystem;
using Pieces = std::vector<std::string_view>;

fs::path temp_dir(const std::string& name) {
    fs::path p =
        fs::temp_directory_path() / ("ete_tok_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
}

void write_text(const fs::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary) << s;
}

// Multilingual text with accents, CJK, emoji, tabs and newlines; repeated so merges happen.
std::string multilingual_corpus() {
    const std::string lines =
        "The quick brown fox jumps over the lazy dog. The dog sleeps.\n"
        "Ça va très bien, merci ! Où est la boulangerie ? Straße, Mädchen, naïve café.\n"
        "日本語のテキストです。東京は大きい都市です。中文文本：你好，世界！\n"
        "Emoji: 🙂🚀🎉 mixed with text 🙂 and numbers 3.14159, 2024-06-01.\n"
        "\tTabbed line\twith\ttabs  and   spaces\r\n"
        "Ελληνικά κείμενα και русский текст, עברית, العربية.\n\n";
    std::string text;
    for (int i = 0; i < 40; ++i) text += lines;
    return text;
}

constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const Tokenizer& trained() {
    static const Tokenizer t = Tokenizer::train(multilingual_corpus(), 400, {"<|endoftext|>"});
    return t;
}

std::string all_bytes() {
    std::string s;
    for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
    return s;
}

// A hand-written tokenizer.json: ids 0..255 = bytes, then "bc", "ab", "abc" with the merges in
// the given JSON form (strings "a b" or pairs ["a", "b"]).
std::string handmade_json(bool pair_form) {
    nlohmann::ordered_json vocab;
    for (int b = 0; b < 256; ++b) vocab[data::byte_level_char(static_cast<unsigned char>(b))] = b;
    vocab["bc"] = 256;
    vocab["ab"] = 257;
    vocab["abc"] = 258;
    nlohmann::json merges = nlohmann::json::array();
    for (auto [l, r] : {std::pair{"b", "c"}, {"a", "b"}, {"ab", "c"}}) {
        if (pair_form) {
            merges.push_back({l, r});
        } else {
            merges.push_back(std::string(l) + " " + r);
        }
    }
    nlohmann::ordered_json j = {
        {"version", "1.0"},
        {"added_tokens",
         {{{"id", 259}, {"content", "<x>"}, {"special", true}},
          {{"id", 260}, {"content", "<x>>"}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    return j.dump();
}

TEST(ByteLevel, Gpt2AlphabetAndInverse) {
    EXPECT_EQ(data::byte_level_char(' '), "Ġ");
    EXPECT_EQ(data::byte_level_char('\n'), "Ċ");
    EXPECT_EQ(data::byte_level_char('\t'), "ĉ");
    EXPECT_EQ(data::byte_level_char(0), "Ā");
    EXPECT_EQ(data::byte_level_char('A'), "A");
    EXPECT_EQ(data::byte_level_char(0x7F), "ġ");
    EXPECT_EQ(data::byte_level_char(0xAD), "Ń");  // soft hyphen: the last non-printable byte
    EXPECT_EQ(data::byte_level_char(0xE9), "é");
    std::string back;
    ASSERT_TRUE(data::byte_level_to_bytes(data::bytes_to_byte_level(all_bytes()), back));
    EXPECT_EQ(back, all_bytes());
    EXPECT_FALSE(data::byte_level_to_bytes("Ω", back));     // U+03A9 is outside the alphabet
    EXPECT_FALSE(data::byte_level_to_bytes("\xC4", back));  // truncated sequence
}

TEST(PreTokenizer, Gpt2SplitHandChecked) {
    RegexSplitter s{std::string(kGpt2SplitPattern)};
    // "  3": \s+(?!\S) backs off to one space so that " 3" keeps its leading space.
    EXPECT_EQ(s.split("Hello world's  3.14!!\n"),
              (Pieces{"Hello", " world", "'s", " ", " 3", ".", "14", "!!", "\n"}));
    EXPECT_EQ(s.split("I'm  fine\t\tok\n\n x"),
              (Pieces{"I", "'m", " ", " fine", "\t", "\t", "ok", "\n\n", " x"}));
    // Unicode classes: letters with accents and CJK are \p{L}; emoji are neither L nor N.
    EXPECT_EQ(s.split("héllo 世界 🙂! naïve2024"),
              (Pieces{"héllo", " 世界", " 🙂!", " naïve", "2024"}));
}

TEST(PreTokenizer, WhitespaceIsUnicodeWhiteSpace) {
    // Regression: PCRE2's own \s also matches U+180E (Mongolian vowel separator, a format
    // character since Unicode 6.3), which split "x\u180e!?" into "\u180e", "!?". GPT-2's regex
    // module, HF and tiktoken use White_Space: U+180E is punctuation-like, U+0085, U+3000 and
    // U+2028 are spaces. Expected pieces from Python's regex module.
    RegexSplitter gpt2{std::string(kGpt2SplitPattern)};
    EXPECT_EQ(gpt2.split("x\u180e!? y\u180e  z"),
              (Pieces{"x", "\u180e!?", " y", "\u180e", " ", " z"}));
    EXPECT_EQ(gpt2.split("a\u0085b\u3000\u3000c\u2028"),
              (Pieces{"a", "\u0085", "b", "\u3000", "\u3000", "c", "\u2028"}));
    RegexSplitter llama3{std::string(kLlama3Pattern)};
    EXPECT_EQ(llama3.split("x\u180e!? y\u180e  z"),
              (Pieces{"x", "\u180e!?", " y", "\u180e", " ", " z"}));
    EXPECT_EQ(llama3.split("a\u0085b\u3000\u3000c\u2028"),
              (Pieces{"a", "\u0085b", "\u3000", "\u3000c", "\u2028"}));
    // The pattern is kept as written (it is saved back to tokenizer.json); escapes survive.
    EXPECT_EQ(gpt2.pattern(), kGpt2SplitPattern);
    EXPECT_EQ(RegexSplitter(R"(\\s|\Q\S\E|\s+|[a-z])").split(R"(a\s \S)"),
              (Pieces{"a", R"(\s)", " ", R"(\S)"}));
}

TEST(PreTokenizer, InvalidUtf8BytesBecomeTheirOwnPieces) {
    RegexSplitter s{std::string(kGpt2SplitPattern)};
    EXPECT_EQ(s.split("ab\xff\xfe cd"), (Pieces{"ab", "\xff\xfe", " cd"}));
    const std::string bytes = all_bytes();
    std::string joined;
    for (auto p : s.split(bytes)) joined += p;
    EXPECT_EQ(joined, bytes);
}

TEST(PreTokenizer, LineStartChunksGiveTheSamePieces) {
    RegexSplitter s{std::string(kGpt2SplitPattern)};
    // Cut candidates ("so.\nAnd") next to runs where a cut would change the pieces ("\n\nThe",
    // "  \nIt", "\n  7").
    std::string text;
    for (int i = 0; i < 100; ++i) {
        text +=
            "Verse " + std::to_string(i) + " said so.\nAnd it was so.\n\nThe end  \nIt\n  7 x\n";
        if (i % 10 == 0) text += multilingual_corpus();
    }
    auto chunks = split_at_line_starts(text, 1000);
    ASSERT_GT(chunks.size(), 10u);
    Pieces chunked;
    for (auto c : chunks) s.split(c, chunked);
    EXPECT_EQ(chunked, s.split(text));
    // The same cut points are safe for Llama-3's pattern (punctuation takes trailing newlines).
    RegexSplitter llama3{std::string(kLlama3Pattern)};
    Pieces chunked3;
    for (auto c : chunks) llama3.split(c, chunked3);
    EXPECT_EQ(chunked3, llama3.split(text));
}

TEST(Tokenizer, TieBreakAndFrequencyHandChecked) {
    // "ab cd": three pairs with count 1; ties go to the smallest (left id, right id): (Ġ, c) =
    // (32, 99) first, then (a, b) = (97, 98), then (Ġc, d) = (256, 100).
    Tokenizer t = Tokenizer::train("ab cd", 259);
    ASSERT_EQ(t.num_merges(), 3u);
    EXPECT_EQ(t.merge(0), std::make_pair(32, 99));
    EXPECT_EQ(t.merge(1), std::make_pair(97, 98));
    EXPECT_EQ(t.merge(2), std::make_pair(256, 100));
    EXPECT_EQ(t.id_to_token(258), "Ġcd");
    // Frequency beats id order: (a, b) occurs twice.
    Tokenizer f = Tokenizer::train("ab ab cd", 257);
    EXPECT_EQ(f.merge(0), std::make_pair(97, 98));
}

TEST(Tokenizer, MergesAreAppliedSoAFrequentWordIsOneToken) {
    const Tokenizer& t = trained();
    EXPECT_EQ(t.vocab_size(), 400);
    // " dog" and " The" are the most frequent words (80 times each).
    std::vector<int32_t> ids = t.encode(" dog");
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(t.id_to_token(ids[0]), "Ġdog");
    EXPECT_EQ(t.encode(" The").size(), 1u);
    // Far fewer tokens than bytes on text like the training text.
    std::string line = "The quick brown fox jumps over the lazy dog.";
    EXPECT_LT(t.encode(line).size(), line.size() / 2);
}

TEST(Tokenizer, RoundTripIsByteExact) {
    const Tokenizer& t = trained();
    const std::vector<std::string> samples = {
        multilingual_corpus(),
        "unseen words: quokka, Zürich, 東京タワー 🦘🦘 \t\t\n\n\n   trailing   ",
        all_bytes(),
        "invalid utf-8: \xff\xfe\xc3 \xe2\x82 end \xf0\x9f\x99",
        "",
        " ",
        "<|endoftext|>",
        "a<|endoftext|><|endoftext|>b <|endoftext",
    };
    for (const std::string& s : samples) {
        // Valid UTF-8 comes back byte for byte; invalid stretches are encoded as U+FFFD, one per
        // maximal invalid subpart (as Rust's from_utf8_lossy counts them, and HF sees the text).
        EXPECT_EQ(t.decode_bytes(t.encode(s)), utf8::repair(s)) << s;
        EXPECT_EQ(t.decode(t.encode(s)), utf8::repair(s)) << s;
    }
    EXPECT_EQ(utf8::repair(samples[3]), "invalid utf-8: \uFFFD\uFFFD\uFFFD \uFFFD end \uFFFD");
    EXPECT_EQ(utf8::repair(samples[0]), samples[0]);
    // decode() is HF's ByteLevel decoder: ids that do not spell UTF-8 decode to U+FFFD, while
    // decode_bytes() gives the raw bytes.
    const std::vector<int32_t> bytes = {*t.token_to_id("\u00e2"), *t.token_to_id("\u0124")};
    EXPECT_EQ(t.decode(bytes), "\uFFFD");
    EXPECT_EQ(t.decode_bytes(bytes), "\xe2\x82");
}

TEST(Tokenizer, SpecialTokenMatchedInRawText) {
    const Tokenizer& t = trained();
    const int32_t eos = t.eos_id();
    ASSERT_EQ(eos, 399);  // specials take the ids after the merges
    EXPECT_EQ(t.bos_id(), eos);
    EXPECT_EQ(t.token_to_id("<|endoftext|>"), eos);
    std::vector<int32_t> ids = t.encode("dog.<|endoftext|>The");
    std::vector<int32_t> expect = t.encode("dog.");
    expect.push_back(eos);
    for (int32_t id : t.encode("The")) expect.push_back(id);
    EXPECT_EQ(ids, expect);
    // Without the special the same bytes are ordinary text, never the special id.
    for (int32_t id : t.encode("<|endoftext")) EXPECT_NE(id, eos);
}

TEST(Tokenizer, LongestAddedTokenWinsAtTheSamePosition) {
    Tokenizer t = Tokenizer::from_json(handmade_json(false), "handmade");
    EXPECT_EQ(t.encode("a<x>>b<x>"), (std::vector<int32_t>{'a', 260, 'b', 259}));
}

TEST(Tokenizer, MergeRanksDecideNotPosition) {
    // Ranks: (b, c) = 0, (a, b) = 1, (ab, c) = 2. In "abc" (b, c) merges first, leaving
    // "a" + "bc" with no merge; a leftmost-first BPE would give "abc".
    Tokenizer t = Tokenizer::from_json(handmade_json(false), "handmade");
    EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{'a', 256}));
    EXPECT_EQ(t.encode("abd"), (std::vector<int32_t>{257, 'd'}));
    EXPECT_EQ(t.encode("ab c"), (std::vector<int32_t>{257, ' ', 'c'}));  // no merge across pieces
}

TEST(Tokenizer, BothMergeFormatsLoadIdentically) {
    Tokenizer s = Tokenizer::from_json(handmade_json(false), "strings");
    Tokenizer p = Tokenizer::from_json(handmade_json(true), "pairs");
    ASSERT_EQ(s.num_merges(), 3u);
    ASSERT_EQ(p.num_merges(), 3u);
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(s.merge(r), p.merge(r));
    EXPECT_EQ(s.to_json(), p.to_json());
    EXPECT_EQ(p.encode("abcabd xbc"), s.encode("abcabd xbc"));
}

TEST(Tokenizer, SaveLoadGivesIdenticalTokenizer) {
    const Tokenizer& t = trained();
    fs::path dir = temp_dir("save_load");
    const std::string path = (dir / "tokenizer.json").string();
    t.save(path);
    Tokenizer u = Tokenizer::load(path);
    ASSERT_EQ(u.vocab_size(), t.vocab_size());
    for (int32_t id = 0; id < t.vocab_size(); ++id) EXPECT_EQ(u.id_to_token(id), t.id_to_token(id));
    ASSERT_EQ(u.num_merges(), t.num_merges());
    for (size_t r = 0; r < t.num_merges(); ++r) EXPECT_EQ(u.merge(r), t.merge(r));
    EXPECT_EQ(u.eos_id(), t.eos_id());
    const std::string text = multilingual_corpus() + "\xff<|endoftext|> 🦘";
    EXPECT_EQ(u.encode(text), t.encode(text));
    EXPECT_EQ(u.to_json(), t.to_json());  // a second save is byte-identical
    fs::remove_all(dir);
}

TEST(Tokenizer, SavedJsonHasTheHuggingFaceGpt2Layout) {
    const Tokenizer& t = trained();
    auto j = nlohmann::json::parse(t.to_json());
    EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
    EXPECT_EQ(j["pre_tokenizer"]["add_prefix_space"], false);
    EXPECT_EQ(j["pre_tokenizer"]["use_regex"], true);
    EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
    EXPECT_TRUE(j["normalizer"].is_null());
    const auto& model = j["model"];
    EXPECT_EQ(model["type"], "BPE");
    EXPECT_EQ(model["vocab"]["Ġ"], 32);
    EXPECT_EQ(model["vocab"]["<|endoftext|>"], 399);
    ASSERT_EQ(model["merges"].size(), t.num_merges());
    auto [a, b] = t.merge(0);
    EXPECT_EQ(model["merges"][0], t.id_to_token(a) + " " + t.id_to_token(b));
    ASSERT_EQ(j["added_tokens"].size(), 1u);
    EXPECT_EQ(j["added_tokens"][0]["id"], 399);
    EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
    EXPECT_EQ(j["added_tokens"][0]["special"], true);
}

TEST(Tokenizer, TrainingIsReproducibleAndFilesMatchText) {
    const std::string text = multilingual_corpus();
    Tokenizer a = Tokenizer::train(text, 500, {"<|endoftext|>"});
    Tokenizer b = Tokenizer::train(text, 500, {"<|endoftext|>"});
    EXPECT_EQ(a.to_json(), b.to_json());
    fs::path dir = temp_dir("train_files");
    write_text(dir / "corpus.txt", text);
    Tokenizer f = Tokenizer::train_files({(dir / "corpus.txt").string()}, 500, {"<|endoftext|>"});
    EXPECT_EQ(f.to_json(), a.to_json());
    fs::remove_all(dir);
}

TEST(Tokenizer, SpecialTokensAreCutOutOfTrainingText) {
    // Without cutting, "<|endoftext|>" pieces would be the most frequent pairs.
    std::string text;
    for (int i = 0; i < 50; ++i) text += "<|endoftext|>xy ";
    Tokenizer t = Tokenizer::train(text, 258, {"<|endoftext|>"});
    ASSERT_EQ(t.num_merges(), 1u);
    EXPECT_EQ(t.id_to_token(256), "xy");
}

TEST(Tokenizer, ParallelEncodeEqualsSerial) {
    const Tokenizer& t = trained();
    // Over 512 KiB with line starts where the encoder may cut it into parallel chunks.
    std::string big;
    while (big.size() < 1200 * 1024) big += multilingual_corpus() + "It was so.\nAnd the dog.\n";
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    std::vector<int32_t> serial = t.encode(big);
    omp_set_num_threads(2);
    std::vector<int32_t> parallel = t.encode(big);
    omp_set_num_threads(saved);
    EXPECT_EQ(parallel, serial);
    EXPECT_EQ(t.decode(parallel), big);
}

TEST(Tokenizer, LoadsLlama3StyleSplitSequenceAndKeepsIt) {
    auto j = nlohmann::json::parse(handmade_json(false));
    const std::string llama3(kLlama3Pattern);
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", llama3}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    Tokenizer t = Tokenizer::from_json(j.dump(), "llama3-like");
    EXPECT_EQ(t.pretokenize("I'M 12345"), (std::vector<std::string>{"I", "'M", " ", "123", "45"}));
    Tokenizer u = Tokenizer::from_json(t.to_json(), "resaved");
    EXPECT_EQ(u.split_pattern(), llama3);
    EXPECT_EQ(nlohmann::json::parse(u.to_json())["pre_tokenizer"]["type"], "Sequence");
}

TEST(Tokenizer, ErrorsNameTheFileAndTheExpectation) {
    fs::path dir = temp_dir("errors");
    const std::string missing = (dir / "nope.json").string();
    std::string e = error_of([&] { Tokenizer::load(missing); });
    EXPECT_NE(e.find(missing), std::string::npos) << e;
    EXPECT_NE(e.find("cannot open"), std::string::npos) << e;

    write_text(dir / "bad.json", "{\"model\": [");
    e = error_of([&] { Tokenizer::load((dir / "bad.json").string()); });
    EXPECT_NE(e.find("bad.json"), std::string::npos) << e;
    EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;

    auto j = nlohmann::json::parse(handmade_json(false));
    j["model"]["type"] = "WordPiece";
    e = error_of([&] { Tokenizer::from_json(j.dump(), "wp.json"); });
    EXPECT_NE(e.find("wp.json"), std::string::npos) << e;
    EXPECT_NE(e.find("expected \"BPE\""), std::string::npos) << e;

    j = nlohmann::json::parse(handmade_json(false));
    j["model"]["merges"].push_back("zz q");
    e = error_of([&] { Tokenizer::from_json(j.dump(), "m.json"); });
    EXPECT_NE(e.find("'zz', which is not in model.vocab"), std::string::npos) << e;

    e = error_of([] { Tokenizer::train("abc", 200); });
    EXPECT_NE(e.find("at least 256"), std::string::npos) << e;
    e = error_of([] { trained().decode(std::vector<int32_t>{400}); });
    EXPECT_NE(e.find("token id 400"), std::string::npos) << e;
    fs::remove_all(dir);
}

}  // namespace tokenizer_test
}  // namespace ete
