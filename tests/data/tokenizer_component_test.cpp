// tests/data/tokenizer_component_test.cpp — each pipeline component configuration (Split
// behaviours, Metaspace schemes, ByteLevel options, the character splitters, normalizers,
// added-token options, BPE options, decoders, post-processors) in a tiny synthetic tokenizer.json
// against Hugging Face's `tokenizers` 0.23.2; and hostile tokenizer.json files, which must give
// one-line errors naming the component and its place. Goldens: tools/gen_hf_component_goldens.mjs
// -> tests/golden/tokenizers/components.json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/tokenizer.h"
#include "test_util.h"

namespace ete {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const json& components() {
    static const json kGolden =
        json::parse(read_file(ETE_SOURCE_DIR "/tests/golden/tokenizers/components.json"));
    return kGolden;
}

std::string show(const Ids& ids) {
    std::string s;
    for (int32_t id : ids) s += fmt::format("{} ", id);
    return s;
}

// A JSON string (quoted, escaped): how failure messages show texts.
std::string quoted(const std::string& s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Counts the checks against the golden and reports the first differences.
class Checker {
  public:
    void expect(bool ok, const std::string& what) {
        ++checked_;
        if (!ok && ++bad_ <= 40) ADD_FAILURE() << what;
    }
    void expect_equal(const std::string& got, const json& want, const std::string& what) {
        expect(got == want.get<std::string>(),
               fmt::format("{}\n  ete: {}\n  hf:  {}", what, quoted(got), quoted(want)));
    }
    size_t checked() const { return checked_; }
    size_t bad() const { return bad_; }

  private:
    size_t checked_ = 0, bad_ = 0;
};

// One golden case: encode with and without special tokens, decode with and without skipping.
void check_case(const Tokenizer& t, const json& k, const std::string& at, Checker& check) {
    const std::string text = k["text"];
    const Ids want = k["ids"], want_special = k["ids_special"];
    const Ids ids = t.encode(text), special = t.encode(text, true);
    check.expect(ids == want,
                 fmt::format("{}: ids\n  ete: {}\n  hf:  {}", at, show(ids), show(want)));
    check.expect(special == want_special,
                 fmt::format("{}: ids with special tokens\n  ete: {}\n  hf:  {}", at, show(special),
                             show(want_special)));
    check.expect_equal(t.decode(want), k["decoded"], at + ": decode");
    check.expect_equal(t.decode(want_special, true), k["decoded_skip"],
                       at + ": decode skipping specials");
}

// A decode case: ids given directly (invalid byte runs, odd byte tokens).
void check_decode_case(const Tokenizer& t, const json& k, const std::string& at, Checker& check) {
    const Ids ids = k["ids"];
    check.expect_equal(t.decode(ids), k["decoded"], at);
    check.expect_equal(t.decode(ids, true), k["decoded_skip"], at + " skipping specials");
}

void check_config(const json& c, Checker& check) {
    const std::string name = c["name"];
    std::optional<Tokenizer> t;
    try {
        t = Tokenizer::from_json(c["tokenizer"].dump(), name);
    } catch (const Error& e) {
        return check.expect(false, fmt::format("{}: does not load: {}", name, e.what()));
    }
    auto guarded = [&](const std::string& at, const auto& f) {
        try {
            f(at);
        } catch (const Error& e) {
            check.expect(false, fmt::format("{}: throws: {}", at, e.what()));
        }
    };
    for (const json& k : c["cases"]) {
        guarded(fmt::format("{}, text {}", name, quoted(k["text"])),
                [&](const std::string& at) { check_case(*t, k, at, check); });
    }
    for (const json& k : c.value("decode_cases", json::array())) {
        guarded(fmt::format("{}, decode of ids {}", name, show(k["ids"])),
                [&](const std::string& at) { check_decode_case(*t, k, at, check); });
    }
}

TEST(TokenizerComponents, MatchHuggingFace) {
    Checker check;
    for (const json& c : components()) check_config(c, check);
    EXPECT_EQ(check.bad(), 0u) << check.bad() << " of " << check.checked()
                               << " checks differ from HF";
    EXPECT_GE(components().size(), 100u);
    EXPECT_GT(check.checked(), 5000u);
}

// The HF behaviours the goldens found ETE missing, each on its own.

// Vocab a b x <unk>, no merges; `extra` is merged into the file.
Tokenizer tiny(const json& extra) {
    json j = {{"model",
               {{"type", "BPE"},
                {"unk_token", "<unk>"},
                {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"x", 3}, {" ", 4}}},
                {"merges", json::array({json::array({"a", "b"})})}}}};
    j["model"]["vocab"]["ab"] = 5;
    j.update(extra);
    return Tokenizer::from_json(j.dump(), "tiny.json");
}

TEST(TokenizerComponents, NormalizedAddedTokenIsItsNormalizedContent) {
    const Tokenizer t =
        tiny({{"normalizer", {{"type", "Lowercase"}}},
              {"added_tokens",
               {{{"id", 6}, {"content", "AB"}, {"normalized", true}},
                {{"id", 7}, {"content", "X"}, {"normalized", true}, {"special", true}}}}});
    // "AB" is matched as "ab" in the lowercased text, and decodes as "ab".
    EXPECT_EQ(t.encode("aB"), (Ids{6}));
    EXPECT_EQ(t.decode(Ids{6}), "ab");
    // A special token whose text changes under the normalizer is not skipped: HF compares the
    // decoded text "x" with the special content "X".
    EXPECT_EQ(t.encode("x"), (Ids{7}));
    EXPECT_EQ(t.decode(Ids{7, 6}, true), "x ab");
}

TEST(TokenizerComponents, RstripDoesNotHideAMatchInItsWhitespace) {
    const Tokenizer t =
        tiny({{"added_tokens",
               {{{"id", 6}, {"content", "<r>"}, {"rstrip", true}, {"normalized", false}},
                {{"id", 7}, {"content", " x"}, {"normalized", false}}}}});
    EXPECT_EQ(t.encode("<r> x"), (Ids{6, 7}));  // " x" starts inside the stripped space
    EXPECT_EQ(t.encode("<r>  b"), (Ids{6, 2}));
}

TEST(TokenizerComponents, EmptyRegexMatchesAreBoundaries) {
    const json split = {{"type", "Split"},
                        {"pattern", {{"Regex", "x*"}}},
                        {"behavior", "Removed"},
                        {"invert", false}};
    EXPECT_EQ(tiny({{"pre_tokenizer", split}}).encode("abxab"), (Ids{1, 2, 1, 2}));
    const json replace = {{"type", "Replace"}, {"pattern", {{"Regex", "x*"}}}, {"content", " "}};
    EXPECT_EQ(tiny({{"normalizer", replace}}).encode("ab"), (Ids{4, 1, 4, 2, 4}));
}

TEST(TokenizerComponents, SingleWordUsesUnicodeWordCharacters) {
    const Tokenizer t =
        tiny({{"added_tokens", {{{"id", 6}, {"content", "<m>"}, {"single_word", true}}}}});
    EXPECT_EQ(t.encode("\u00b2<m>"), (Ids{0, 6}));        // '²' (No) is no word character
    EXPECT_EQ(t.encode("\u24b6<m>"), (Ids{0, 0, 0, 0}));  // 'Ⓐ' (So, Alphabetic) is one
    EXPECT_EQ(t.encode("\u200d<m>"), (Ids{0, 0, 0, 0}));  // and so is ZWJ
    EXPECT_EQ(t.encode("\u0301<m>"), (Ids{0, 0, 0, 0}));  // and a combining mark
}

// ---------------------------------------------------------------------------------------------
// Hostile files.

// A valid character-level tokenizer.json to break: vocab a b c ab, one merge, <s> added.
json base_file() {
    return json::parse(R"({
      "added_tokens": [{"id": 5, "content": "<s>", "special": true}],
      "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
      "model": {"type": "BPE", "unk_token": "<unk>",
                "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4},
                "merges": [["a", "b"]]}})");
}

// The error loading `j` gives; the test fails when it loads, or when the message spans lines.
std::string load_error(const json& j) {
    const std::string e = error_of([&] { Tokenizer::from_json(j.dump(), "bad.json"); });
    EXPECT_NE(e, "<no error>") << j.dump();
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.find('\r'), std::string::npos) << e;
    return e;
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
    for (const std::string& p : parts) {
        EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

TEST(TokenizerHostile, BaseFileLoads) {
    const Tokenizer t = Tokenizer::from_json(base_file().dump(), "base.json");
    EXPECT_EQ(t.encode("abc<s>"), (Ids{4, 3, 5}));
}

TEST(TokenizerHostile, UnknownComponentTypesNameTheirPlace) {
    json j = base_file();
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFC"}}, {{"type", "StripAccents"}}}}};
    expect_has(load_error(j),
               {"bad.json", "normalizer.normalizers[1] has type 'StripAccents'", "supported"});
    j = base_file();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Whitespace"}}, {{"type", "UnicodeScripts"}}}}};
    expect_has(load_error(j), {"pre_tokenizer.pretokenizers[1] has type 'UnicodeScripts'"});
    j = base_file();
    j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
    expect_has(load_error(j), {"decoder has type 'WordPiece'"});
    j = base_file();
    j["post_processor"] = {{"type", "Sequence"}, {"processors", {{{"type", "Bogus"}}}}};
    expect_has(load_error(j), {"post_processor.processors[0] has type 'Bogus'"});
    j = base_file();
    j["pre_tokenizer"] = {{"type", "Bad\ntype"}};
    expect_has(load_error(j), {R"(has type 'Bad\ntype')"});
}

TEST(TokenizerHostile, SplitPatternsAndBehaviours) {
    json j = base_file();
    j["pre_tokenizer"] = {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}};
    expect_has(load_error(j), {"pre_tokenizer.pattern is missing"});
    j["pre_tokenizer"]["pattern"] = {{"Regex", "a"}};
    j["pre_tokenizer"]["behavior"] = "Merged\nWithNext";
    expect_has(load_error(j), {"pre_tokenizer.behavior is \"Merged\\nWithNext\"", "Removed"});
    j = base_file();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "(a\n"}}}, {"behavior", "Isolated"}}}}};
    expect_has(load_error(j), {"pre_tokenizer.pretokenizers[0].pattern", R"((a\n)"});
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Str", "a"}};
    expect_has(load_error(j), {"pre_tokenizer.pretokenizers[0].pattern must be"});
    j = base_file();
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "[z"}}}, {"content", ""}};
    expect_has(load_error(j), {"normalizer.pattern", "[z"});
}

TEST(TokenizerHostile, VocabAndMerges) {
    json j = base_file();
    j["model"]["merges"] = json::array({json::array({"a", "q"})});
    expect_has(load_error(j), {"model.merges[0] uses 'q', which is not in model.vocab"});
    j = base_file();
    j["model"]["merges"] = json::array({"a b", "b c"});
    expect_has(load_error(j), {"model.merges[1] ('b c')", "missing from model.vocab"});
    j = base_file();
    j["model"]["merges"] = json::array({"a b\nc"});
    expect_has(load_error(j), {R"(model.merges[0] uses 'b\nc', which is not in model.vocab)"});
    j["model"]["merges"] = json::array({"a b c"});
    expect_has(load_error(j), {"model.merges[0] is 'a b c', expected two tokens"});
    j["model"]["merges"] = json::array({json::array({"a"})});
    expect_has(load_error(j), {"model.merges[0] must be a string"});
    j = base_file();
    j["model"]["vocab"]["d"] = 2;
    expect_has(load_error(j), {"model.vocab uses id 2 twice", "'b'", "'d'"});
    j = base_file();
    j["added_tokens"][0]["id"] = 3;
    expect_has(load_error(j), {"id 3", "'c'", "'<s>'", "added_tokens"});
    j = base_file();
    j["added_tokens"][0]["content"] = "ab";
    expect_has(load_error(j), {"added_tokens[0] 'ab' has id 5, but model.vocab gives it id 4"});
    j = base_file();
    j["model"]["vocab"]["huge"] = int64_t{1} << 25;
    expect_has(load_error(j), {"model.vocab['huge']", "[0, 16777216)"});
    j = base_file();
    j["added_tokens"][0]["id"] = int64_t{1} << 30;
    expect_has(load_error(j), {"added_tokens", "[0, 16777216)"});
    j = base_file();
    j["model"]["vocab"]["line\nbreak"] = 1 << 25;
    const std::string e = load_error(j);
    expect_has(e, {R"(line\nbreak)"});
}

// model.vocab and model.merges stream past the JSON tree (data/tok_json_stream.h): what the tree
// would hold is what loads — a repeated key's last value, a repeated "vocab", "merges" or "model"
// key's last value — and keys of those names elsewhere are not them.
TEST(TokenizerHostile, StreamedVocabAndMergesReadAsTheTreeWould) {
    auto file = [](const std::string& model, const std::string& more = "") {
        return R"({"added_tokens": [{"id": 5, "content": "<s>", "special": true}],)" + more +
               R"("normalizer": null, "pre_tokenizer": null, "post_processor": null,
                 "decoder": null, "model": )" +
               model + "}";
    };
    const std::string vocab = R"("vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4})";
    const std::string merges = R"("merges": [["a", "b"]])";
    const std::string head = R"({"type": "BPE", "unk_token": "<unk>", )";
    auto error = [](const std::string& text) {
        return error_of([&] { Tokenizer::from_json(text, "bad.json"); });
    };
    {  // the last value of a repeated token, even where an earlier one is not an id
        const Tokenizer t = Tokenizer::from_json(
            file(head + R"("vocab": {"<unk>": 0, "b": 9, "a": 1, "b": "x", "c": 3, "ab": 4,
                           "b": 2}, )" +
                 merges + "}"),
            "dup.json");
        EXPECT_EQ(t.token_to_id("b"), 2);
        EXPECT_EQ(t.vocab_size(), 6);  // the 9 was replaced: no id 9
        EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{4}));
    }
    EXPECT_EQ(error(file(head + vocab + R"(, "vocab": 7, )" + merges + "}")),
              "bad.json: model.vocab must be an object");
    EXPECT_EQ(error(file(head + vocab + ", " + merges + R"(, "merges": {"a": "b"}})")),
              "bad.json: model.merges must be an array");
    EXPECT_NO_THROW(Tokenizer::from_json(
        file(head + R"("vocab": [1], )" + vocab + R"(, "merges": 3, )" + merges + "}"), "ok"));
    // A second model replaces the first whole: its missing merges are missing.
    EXPECT_EQ(error(R"({"model": )" + head + vocab + ", " + merges + "}, " +
                    file(head + vocab + "}").substr(1)),
              "bad.json: model.merges must be an array");
    // "vocab" and "merges" outside model, and inside model's other fields, are other fields.
    EXPECT_NO_THROW(Tokenizer::from_json(
        file(head + R"("x": {"vocab": 1, "merges": 2}, )" + vocab + ", " + merges + "}",
             R"("vocab": 5, "merges": {"a": 1}, )"),
        "ok"));
    // Values of other kinds, nested ones included, are named; the first bad key in key order.
    EXPECT_EQ(error(file(head + R"("vocab": {"a": 1, "zz": [1, {"q": 2}], "b": 2, "yy": null}, )" +
                         merges + "}")),
              "bad.json: model.vocab['yy'] must be an integer id in [0, 16777216)");
    for (const std::string bad :
         {R"([["a", ["b"]]])", R"([["a", "b", "c"]])", R"([5])", R"([{"a": "b"}])", R"([["a"]])"}) {
        EXPECT_EQ(error(file(head + vocab + R"(, "merges": )" + bad + "}")),
                  R"(bad.json: model.merges[0] must be a string "a b" or a pair ["a", "b"])")
            << bad;
    }
    // The nesting limit holds inside the streamed tables.
    const std::string deep = std::string(70, '[') + std::string(70, ']');
    EXPECT_EQ(error(file(head + vocab + R"(, "merges": [)" + deep + "]}")),
              "bad.json (a tokenizer.json): invalid JSON (arrays and objects nested deeper than 64 "
              "levels)");
    EXPECT_EQ(error(file(head + R"("vocab": {"a": )" + deep + "}, " + merges + "}")),
              "bad.json (a tokenizer.json): invalid JSON (arrays and objects nested deeper than 64 "
              "levels)");
}

TEST(TokenizerHostile, PostProcessorsAndDecoders) {
    json j = base_file();
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
        {"special_tokens", json::object()}};
    expect_has(load_error(j), {"post_processor.single[0] names '<s>'", "special_tokens"});
    j["post_processor"]["special_tokens"]["<s>"] = {{"id", "<s>"}, {"ids", {int64_t{1} << 24}}};
    expect_has(load_error(j), {"post_processor.single[0]", "token id"});
    j = base_file();
    j["post_processor"] = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 7e9}}, {"cls", {"x", 1}}};
    expect_has(load_error(j), {"post_processor.sep[1] must be a token id"});
    j = base_file();
    const json tmpl = {
        {"type", "TemplateProcessing"},
        {"single", {{{"Sequence", {{"id", "A"}}}}, {{"SpecialToken", {{"id", "<s>"}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {5}}}}}}};
    j["post_processor"] = {{"type", "Sequence"},
                           {"processors", {{{"type", "ByteLevel"}}, tmpl, tmpl}}};
    expect_has(load_error(j), {"post_processor.processors[1] and post_processor.processors[2]"});
    j["post_processor"]["processors"].erase(2);
    EXPECT_EQ(Tokenizer::from_json(j.dump(), "ok.json").encode("ab", true), (Ids{4, 5}));
    j = base_file();
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Fuse"}}, {{"type", "Strip"}, {"content", "ab"}}}}};
    expect_has(load_error(j), {"decoder.decoders[1].content must be one character"});
    j["decoder"]["decoders"][1]["content"] = "\n\n";
    expect_has(load_error(j), {"decoder.decoders[1].content must be one character"});
}

TEST(TokenizerHostile, MetaspaceOptionsHfRefuses) {
    for (const char* where : {"pre_tokenizer", "decoder"}) {
        json j = base_file();
        j[where] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}};
        expect_has(load_error(j), {fmt::format("{}.add_prefix_space is false", where)});
        j[where]["prepend_scheme"] = "first";
        expect_has(load_error(j), {fmt::format("{}.add_prefix_space is false", where)});
        j[where]["prepend_scheme"] = "never";
        EXPECT_NO_THROW(Tokenizer::from_json(j.dump(), "ok.json"));
        j[where]["prepend_scheme"] = "sometimes";
        expect_has(load_error(j), {fmt::format("{}.prepend_scheme must be", where)});
        j[where] = {{"type", "Metaspace"}, {"replacement", "__"}};
        expect_has(load_error(j), {fmt::format("{}.replacement must be one character", where)});
    }
}

TEST(TokenizerHostile, IdsOutOfRangeAreErrorsAtUse) {
    const Tokenizer t = Tokenizer::from_json(base_file().dump(), "base.json");
    expect_has(error_of([&] { t.decode(Ids{1 << 24}); }), {"16777216", "not in the vocabulary"});
    expect_has(error_of([&] { t.decode(Ids{-1}); }), {"-1", "not in the vocabulary"});
}

// A normalizer Sequence nested 20,000 deep (780 KB) overflowed the stack of the reader that walks
// it: the JSON is refused at its nesting before any component is built. 64 levels still load.
TEST(TokenizerHostile, DeepNestingIsRefusedNotACrash) {
    auto nested = [](int depth) {
        std::string open, close;
        for (int i = 0; i < depth; ++i) {
            open += R"({"type": "Sequence", "normalizers": [)";
            close += "]}";
        }
        std::string j = base_file().dump();
        const std::string key = R"("normalizer":null)";
        return j.replace(j.find(key), key.size(), R"("normalizer":)" + open + close);
    };
    const std::string e = error_of([&] { Tokenizer::from_json(nested(20000), "deep.json"); });
    expect_has(e, {"deep.json", "invalid JSON (arrays and objects nested deeper than 64 levels)"});
    EXPECT_LT(e.size(), 300u);
    EXPECT_NO_THROW(Tokenizer::from_json(nested(30), "ok.json"));  // 62 levels of JSON
}

// Three chained Replace normalizers of 100 characters each grew a 13 KB text to 4.3 GB: a step,
// or a Sequence, that grows a text more than 16x is an error naming it.
TEST(TokenizerHostile, ANormalizerThatExplodesTheTextIsRefused) {
    json j = base_file();
    const json grow = {
        {"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", std::string(100, 'a')}};
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {grow, grow, grow}}};
    const Tokenizer t = Tokenizer::from_json(j.dump(), "grow.json");
    expect_has(error_of([&] { t.encode(std::string(13000, 'a')); }),
               {"tokenizer.json Replace to \"aaaa",
                "would grow a 13000-byte text to 1300000 bytes "
                "(more than 16x)"});
    const json twice = {{"type", "Replace"}, {"pattern", {{"String", "b"}}}, {"content", "bbbb"}};
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {twice, twice, twice}}};
    const Tokenizer u = Tokenizer::from_json(j.dump(), "grow4.json");  // 4x, then 16x, then 64x
    expect_has(error_of([&] { u.encode(std::string(10000, 'b')); }),
               {"normalizer Sequence: grows a 10000-byte text to 640000 bytes (more than 16x)"});
    EXPECT_EQ(u.encode("ab").size(), 64u);  // short texts pass: "ab" + 63 "b" (64x, under 4 KiB)
}

}  // namespace
}  // namespace ete
