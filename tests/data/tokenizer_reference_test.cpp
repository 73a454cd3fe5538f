// tests/data/tokenizer_reference_test.cpp — ETE's encodings against reference tokenizers, on the
// goldens in tests/golden/tokenizers/ (written by tools/gen_tokenizer_goldens.py, which says how
// each reference ran and which known differences between SentencePiece and HF it accounts for):
//   llama2_legacy.json, llama2_metaspace.json  SentencePiece BPE (byte fallback) converted as
//                                              transformers' LlamaConverter does; ids from
//                                              SentencePiece's own encode()
//   gpt2.json, llama3.json                     byte-level BPE trained by ETE; ids from an
//                                              independent implementation of GPT-2's algorithm
//                                              with the GPT-2 / Llama-3 pre-tokenizer regexes
// For every test string: encode() gives the reference ids, decode(encode(s)) == s wherever the
// reference itself round-trips, and (byte-level) the regex pre-tokens are the reference's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

using Ids = std::vector<int32_t>;

const std::string kDir = std::string(ETE_SOURCE_DIR) + "/tests/golden/tokenizers/";

struct Case {
    std::string text;
    Ids ids;
    bool round_trip;
    std::optional<std::vector<std::string>> pieces;  // byte-level: regex pre-tokens of `text`
};

const nlohmann::json& expected() {
    static const nlohmann::json j = nlohmann::json::parse(read_file(kDir + "expected_ids.json"));
    return j;
}

std::vector<Case> cases_of(const std::string& file) {
    std::vector<Case> cases;
    for (const auto& entry : expected()["tokenizers"]) {
        if (entry["file"] != file) continue;
        for (const auto& c : entry["cases"]) {
            Case k{c["text"].get<std::string>(), c["ids"].get<Ids>(), c["round_trip"].get<bool>(),
                   std::nullopt};
            if (c.contains("pieces")) k.pieces = c["pieces"].get<std::vector<std::string>>();
            cases.push_back(std::move(k));
        }
    }
    return cases;
}

// "▁the|▁c|at": what a mismatch looks like in tokens, easier to read than ids.
std::string tokens_of(const Tokenizer& t, const Ids& ids) {
    std::string s;
    for (int32_t id : ids) {
        if (!s.empty()) s += '|';
        try {
            s += t.id_to_token(id);
        } catch (const Error&) {
            s += "?";  // not in the vocabulary
        }
    }
    return s;
}

// Checks every case of `file`; returns how many were round-trip checked.
size_t check_against_reference(const std::string& file) {
    const Tokenizer t = Tokenizer::load(kDir + file);
    const std::vector<Case> cases = cases_of(file);
    EXPECT_GE(cases.size(), 30u) << file << ": goldens missing from expected_ids.json";
    size_t round_trips = 0;
    for (const Case& c : cases) {
        if (c.pieces) {
            EXPECT_EQ(t.pretokenize(c.text), *c.pieces)
                << file << " pre-tokenizing \"" << c.text << "\"";
        }
        const Ids ids = t.encode(c.text);
        EXPECT_EQ(ids, c.ids) << file << " on \"" << c.text
                              << "\"\n  ete:       " << tokens_of(t, ids)
                              << "\n  reference: " << tokens_of(t, c.ids);
        if (c.round_trip) {
            EXPECT_EQ(t.decode(ids), c.text) << file;
            ++round_trips;
        }
    }
    return round_trips;
}

TEST(TokenizerReference, Llama2LegacyMatchesSentencePiece) {
    // Strings cut by <s>/</s>, or that lose a leading space, do not round-trip (as in HF).
    EXPECT_GE(check_against_reference("llama2_legacy.json"), 20u);
}

TEST(TokenizerReference, Llama2MetaspaceMatchesSentencePiece) {
    EXPECT_GE(check_against_reference("llama2_metaspace.json"), 20u);
}

TEST(TokenizerReference, Gpt2MatchesReferenceBpe) {
    const size_t n = check_against_reference("gpt2.json");
    EXPECT_EQ(n, cases_of("gpt2.json").size());  // byte-level: every string round-trips
}

TEST(TokenizerReference, Llama3MatchesReferenceBpe) {
    const size_t n = check_against_reference("llama3.json");
    EXPECT_EQ(n, cases_of("llama3.json").size());
}

TEST(TokenizerReference, EveryGoldenIsChecked) {
    std::set<std::string> files;
    for (const auto& entry : expected()["tokenizers"]) files.insert(entry["file"]);
    EXPECT_EQ(files, (std::set<std::string>{"gpt2.json", "llama2_legacy.json",
                                            "llama2_metaspace.json", "llama3.json"}));
}

}  // namespace
}  // namespace ete
