// tests/data/tokenizer_llama2_test.cpp — Llama-2 style (SentencePiece-converted, "metaspace")
// tokenizer.json: hand-checked encodings of tests/data/llama2_tokenizer.json, byte fallback,
// spaces, special tokens, decode round trips, the Metaspace pre-tokenizer forms and save/load.
//
// The file (HF's Llama-2 layout): ids 0 <unk>, 1 <s>, 2 </s>, 3 + b = <0xbb> for every byte b,
// then 259 ▁▁, 260 ▁t, 261 he, 262 ▁a, 263 at, 264 ▁c, 265 ▁the, 266 th, then single characters
// 267 ▁, 268..293 a..z, 294 '.', 295 ',', 296 '!', 297 '?', 298 '\'', 299 'T'. Merge ranks:
// 0 "▁ ▁", 1 "▁ t", 2 "h e", 3 "▁ a", 4 "a t", 5 "▁ c", 6 "▁t he", 7 "t h".
#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util.h"

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kPath = std::string(ETE_SOURCE_DIR) + "/tests/data/llama2_tokenizer.json";

const Tokenizer& llama2() {
    static const Tokenizer t = Tokenizer::load(kPath);
    return t;
}

nlohmann::json llama2_json() {
    return nlohmann::json::parse(read_file(kPath));
}

// The same file in the legacy=false converter's form: no normalizer, a Metaspace pre-tokenizer.
nlohmann::json metaspace_json(const nlohmann::json& extra) {
    nlohmann::json j = llama2_json();
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
    j["pre_tokenizer"].update(extra);
    return j;
}

TEST(Llama2Tokenizer, LoadsTheHfLayout) {
    const Tokenizer& t = llama2();
    EXPECT_FALSE(t.is_byte_level());
    EXPECT_EQ(t.vocab_size(), 300);
    EXPECT_EQ(t.num_merges(), 8u);
    EXPECT_EQ(t.bos_id(), 1);
    EXPECT_EQ(t.eos_id(), 2);
    EXPECT_EQ(t.token_to_id("<unk>"), 0);
    EXPECT_EQ(t.token_to_id("▁the"), 265);
    EXPECT_EQ(t.id_to_token(3 + 0xC3), "<0xC3>");
    EXPECT_EQ(t.merge(6), (std::pair<int32_t, int32_t>{260, 261}));  // "▁t he"
}

TEST(Llama2Tokenizer, HandCheckedEncodings) {
    const Tokenizer& t = llama2();
    // "▁the▁cat": ▁t (rank 1), he (2), at (4), ▁c (5), ▁the (6) -> ▁the ▁c at.
    EXPECT_EQ(t.encode("the cat"), (Ids{265, 264, 263}));
    // "▁other": "h e" (rank 2) beats "t h" (rank 7) though "t h" is further left -> ▁ o t he r.
    EXPECT_EQ(t.encode("other"), (Ids{267, 282, 287, 261, 285}));
    // 'T' is a vocab character; 'H' is not -> <0x48>.
    EXPECT_EQ(t.encode("Tea"), (Ids{267, 299, 272, 268}));
    EXPECT_EQ(t.encode("Hi"), (Ids{267, 3 + 0x48, 276}));
    EXPECT_EQ(t.encode(""), Ids{});
}

TEST(Llama2Tokenizer, CharactersOutsideTheVocabBecomeUtf8ByteTokens) {
    const Tokenizer& t = llama2();
    // é = C3 A9; 🙂 = F0 9F 99 82; each byte b is id 3 + b.
    EXPECT_EQ(t.encode("é"), (Ids{267, 3 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(t.encode("🙂"), (Ids{267, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82}));
    // Bytes do not merge with their neighbours: "▁caté" -> ▁c at <0xC3> <0xA9>.
    EXPECT_EQ(t.encode("caté"), (Ids{264, 263, 3 + 0xC3, 3 + 0xA9}));
}

TEST(Llama2Tokenizer, LeadingTrailingAndRepeatedSpaces) {
    const Tokenizer& t = llama2();
    // " the" -> "▁▁the": "▁ ▁" (rank 0) takes the first ▁, so "▁t" cannot form -> ▁▁ t he.
    EXPECT_EQ(t.encode(" the"), (Ids{259, 287, 261}));
    EXPECT_EQ(t.encode("the  "), (Ids{265, 259}));      // "▁the▁▁"
    EXPECT_EQ(t.encode("a  b"), (Ids{262, 259, 269}));  // ▁a ▁▁ b
    EXPECT_EQ(t.encode("a   b"), (Ids{262, 259, 267, 269}));  // leftmost "▁ ▁" first: ▁a ▁▁ ▁ b
}

TEST(Llama2Tokenizer, SpecialTokensMatchedInRawText) {
    const Tokenizer& t = llama2();
    // The Prepend normalizer runs on each stretch between added tokens (as in HF).
    EXPECT_EQ(t.encode("<s>the cat"), (Ids{1, 265, 264, 263}));
    EXPECT_EQ(t.encode("the</s>"), (Ids{265, 2}));
    EXPECT_EQ(t.encode("a<unk>"), (Ids{262, 0}));
    // HF decodes [<s>, ▁the, ...] to "<s> the cat": only the very first space is stripped.
    EXPECT_EQ(t.decode(Ids{1, 265, 264, 263}), "<s> the cat");
}

TEST(Llama2Tokenizer, DecodeInvertsEncode) {
    const Tokenizer& t = llama2();
    for (const std::string s :
         {"the cat", "Hello, World! 123", "  leading and trailing  ",
          "héllo wörld 🙂 日本語", "a\tb\nc\r\n", "Straße — naïve café", "x"}) {
        Ids ids = t.encode(s);
        EXPECT_EQ(t.decode(ids), s) << s;
    }
    // A byte run that is not valid UTF-8 decodes to U+FFFD per byte (HF's ByteFallback).
    EXPECT_EQ(t.decode(Ids{3 + 0xC3}), "\xEF\xBF\xBD");
    EXPECT_EQ(t.decode(Ids{265, 3 + 0xC3, 3 + 0x41}), "the\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Llama2Tokenizer, MetaspacePreTokenizerGivesTheSameIds) {
    const Tokenizer& n = llama2();
    Tokenizer m = Tokenizer::from_json(
        metaspace_json({{"prepend_scheme", "first"}, {"split", false}}).dump(), "metaspace");
    for (const std::string s :
         {"the cat", "é", "a  b", "a   b", "the  ", "other", "Hi 🙂 caté"}) {
        EXPECT_EQ(m.encode(s), n.encode(s)) << s;
        EXPECT_EQ(m.decode(m.encode(s)), s) << s;
    }
    // Where HF's two forms differ, each follows HF: "first" prefixes only at text offset 0 and
    // Metaspace never prefixes a stretch that already starts with "▁".
    EXPECT_EQ(m.encode("<s>the cat"), (Ids{1, 287, 261, 264, 263}));  // "the▁cat": t he ▁c at
    EXPECT_EQ(m.encode(" the"), (Ids{265}));
    Tokenizer always = Tokenizer::from_json(
        metaspace_json({{"prepend_scheme", "always"}, {"split", false}}).dump(), "always");
    EXPECT_EQ(always.encode("<s>the cat"), (Ids{1, 265, 264, 263}));
    // Older files: add_prefix_space instead of prepend_scheme, split defaults to true, which cuts
    // before each "▁" so "▁▁" cannot form: "▁a▁▁b" -> ▁a | ▁ | ▁b.
    Tokenizer old =
        Tokenizer::from_json(metaspace_json({{"add_prefix_space", true}}).dump(), "old");
    EXPECT_EQ(old.encode("a  b"), (Ids{262, 267, 267, 269}));
    EXPECT_EQ(old.encode("the cat"), (Ids{265, 264, 263}));
}

TEST(Llama2Tokenizer, UnkTokenWithoutByteFallback) {
    nlohmann::json j = llama2_json();
    j["model"]["byte_fallback"] = false;
    Tokenizer fused = Tokenizer::from_json(j.dump(), "fuse");
    EXPECT_EQ(fused.encode("éé a"), (Ids{267, 0, 262}));  // two unknown chars fuse into one <unk>
    j["model"]["fuse_unk"] = false;
    Tokenizer unfused = Tokenizer::from_json(j.dump(), "nofuse");
    EXPECT_EQ(unfused.encode("éé a"), (Ids{267, 0, 0, 262}));
    j["model"]["unk_token"] = nullptr;
    Tokenizer none = Tokenizer::from_json(j.dump(), "none");
    // HF drops them before merging: the word is ▁ ▁ a, so "▁ ▁" (rank 0) merges -> ▁▁ a.
    EXPECT_EQ(none.encode("éé a"), (Ids{259, 268}));
}

// The encoder cuts a piece before each "▁" that follows another character, which is exact only
// where no merge joins such a pair: with the merge "e ▁" (ranked first) there is no cut after an
// "e", "▁the▁cat" -> ▁t h e▁ c at, not ▁the | ▁c at.
TEST(Llama2Tokenizer, AMergeAcrossASpaceMarkIsHonoured) {
    nlohmann::json j = llama2_json();
    j["model"]["vocab"]["e▁"] = 300;
    j["model"]["merges"].insert(j["model"]["merges"].begin(), "e ▁");
    Tokenizer t = Tokenizer::from_json(j.dump(), "e-space");
    auto id = [&](const char* s) { return t.token_to_id(s).value_or(-1); };
    EXPECT_EQ(t.encode("the cat"), (Ids{id("▁t"), id("h"), 300, id("c"), id("at")}));
    EXPECT_EQ(llama2().encode("the cat"), (Ids{265, 264, 263}));  // the cut form, same answer
    // A byte-fallback token stands for any character: "<0x48> ▁" turns cutting off altogether
    // ("▁H▁i": ▁ <0x48> ▁ i -> ▁ <0x48>▁ i).
    j = llama2_json();
    j["model"]["vocab"]["<0x48>▁"] = 300;
    j["model"]["merges"].insert(j["model"]["merges"].begin(), "<0x48> ▁");
    Tokenizer b = Tokenizer::from_json(j.dump(), "byte-space");
    EXPECT_EQ(b.encode("H i"), (Ids{267, 300, 276}));
}

TEST(Llama2Tokenizer, SaveLoadRoundTrip) {
    fs::path dir = fs::temp_directory_path() / ("ete_llama2_tok_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const Tokenizer& t = llama2();
    Tokenizer m = Tokenizer::from_json(
        metaspace_json({{"prepend_scheme", "first"}, {"split", false}}).dump(), "metaspace");
    for (const Tokenizer* src : std::vector<const Tokenizer*>{&t, &m}) {
        const std::string path = (dir / "tokenizer.json").string();
        src->save(path);
        Tokenizer u = Tokenizer::load(path);
        EXPECT_EQ(u.to_json(), src->to_json());
        ASSERT_EQ(u.vocab_size(), src->vocab_size());
        for (int32_t id = 0; id < u.vocab_size(); ++id)
            EXPECT_EQ(u.id_to_token(id), src->id_to_token(id));
        for (size_t r = 0; r < u.num_merges(); ++r) EXPECT_EQ(u.merge(r), src->merge(r));
        for (const std::string s : {"<s>the cat", " the  é🙂", "a   b", "other</s>"}) {
            EXPECT_EQ(u.encode(s), src->encode(s)) << s;
            EXPECT_EQ(u.decode(u.encode(s)), src->decode(src->encode(s))) << s;
        }
    }
    // The written layout is HF's Llama-2 one.
    auto j = nlohmann::json::parse(t.to_json());
    EXPECT_EQ(j["normalizer"], llama2_json()["normalizer"]);
    EXPECT_EQ(j["decoder"], llama2_json()["decoder"]);
    EXPECT_EQ(j["post_processor"], llama2_json()["post_processor"]);
    EXPECT_TRUE(j["pre_tokenizer"].is_null());
    EXPECT_EQ(j["model"]["unk_token"], "<unk>");
    EXPECT_EQ(j["model"]["byte_fallback"], true);
    EXPECT_EQ(j["model"]["merges"][6], "▁t he");
    EXPECT_EQ(j["model"]["vocab"]["<0x0A>"], 3 + 0x0A);
    auto jm = nlohmann::json::parse(m.to_json());
    EXPECT_EQ(jm["pre_tokenizer"]["prepend_scheme"], "first");
    EXPECT_TRUE(jm["normalizer"].is_null());
    fs::remove_all(dir);
}

TEST(Llama2Tokenizer, ErrorsNameTheProblem) {
    nlohmann::json j = llama2_json();
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
    std::string e = error_of([&] { Tokenizer::from_json(j.dump(), "pc.json"); });
    EXPECT_NE(e.find("pc.json: normalizer.normalizers[1] has type 'Precompiled', which ETE does "
                     "not support"),
              std::string::npos)
        << e;

    j = metaspace_json({{"replacement", "__"}});
    e = error_of([&] { Tokenizer::from_json(j.dump(), "ms.json"); });
    EXPECT_NE(e.find("ms.json: pre_tokenizer.replacement must be one character"), std::string::npos)
        << e;

    j = llama2_json();
    j["model"]["unk_token"] = "<missing>";
    e = error_of([&] { Tokenizer::from_json(j.dump(), "unk.json"); });
    EXPECT_NE(e.find("unk_token '<missing>' is not in the vocab"), std::string::npos) << e;

    j = llama2_json();
    j["decoder"] = {{"type", "CTC"}};
    e = error_of([&] { Tokenizer::from_json(j.dump(), "dec.json"); });
    EXPECT_NE(e.find("dec.json: decoder has type 'CTC'"), std::string::npos) << e;
}

}  // namespace
}  // namespace ete
