// tests/data/tokenizer_specials_test.cpp — BOS/EOS from the model's config files, and streaming
// decode (DecodeStream) on real files from tests/golden/tokenizers/families/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ete/core/file_util.h"
#include "ete/data/decode_stream.h"
#include "ete/data/sft.h"
#include "ete/data/tokenizer.h"
#include "test_util.h"

namespace ete {
namespace tokenizer_specials_test {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kFamilies = ETE_SOURCE_DIR "/tests/golden/tokenizers/families/";

// A model dir holding <family>'s tokenizer.json and, optionally, its tokenizer_config.json.
fs::path family_dir(const std::string& family, bool with_config) {
    const fs::path dir = fs::temp_directory_path() /
                         fmt::format("ete_specials_{}_{}_{}", family, with_config, ::getpid());
    fs::create_directories(dir);
    const std::string cmd = fmt::format("xz -dc '{}{}.tokenizer.json.xz' > '{}'", kFamilies, family,
                                        (dir / "tokenizer.json").string());
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    if (with_config) {
        fs::copy_file(kFamilies + family + ".tokenizer_config.json", dir / "tokenizer_config.json",
                      fs::copy_options::overwrite_existing);
    }
    return dir;
}

TEST(TokenizerSpecials, EosComesFromTheModelsConfigFiles) {
    // Llama-3.1's file has <|end_of_text|> (128001); its tokenizer_config says <|eot_id|>.
    const fs::path bare = family_dir("llama3_1", false), dir = family_dir("llama3_1", true);
    const Tokenizer names = Tokenizer::load((bare / "tokenizer.json").string());
    EXPECT_EQ(names.eos_id(), 128001);
    EXPECT_EQ(names.eos_source(), "names");
    const Tokenizer t = Tokenizer::load((dir / "tokenizer.json").string());
    EXPECT_EQ(t.eos_id(), 128009);
    EXPECT_EQ(t.bos_id(), 128000);
    EXPECT_EQ(t.eos_source(), "tokenizer_config.json");
    EXPECT_EQ(t.stop_ids(), (Ids{128009}));
    // generation_config.json adds its eos ids to the stop list; it sets eos only when
    // tokenizer_config.json does not.
    write_file_atomic((dir / "generation_config.json").string(),
                      R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
    EXPECT_EQ(Tokenizer::load((dir / "tokenizer.json").string()).stop_ids(),
              (Ids{128009, 128001, 128008}));
    write_file_atomic((bare / "generation_config.json").string(), R"({"eos_token_id": 128008})");
    const Tokenizer g = Tokenizer::load((bare / "tokenizer.json").string());
    EXPECT_EQ(g.eos_id(), 128008);
    EXPECT_EQ(g.eos_source(), "generation_config.json");
    // The post-processor's template puts <|begin_of_text|> first.
    EXPECT_EQ(t.special_prefix(), (Ids{128000}));
    EXPECT_EQ(t.encode("Hello world", true), (Ids{128000, 9906, 1917}));
    // Qwen has no BOS (null in its config) and ends with <|im_end|>.
    const fs::path q = family_dir("qwen3", true);
    const Tokenizer qt = Tokenizer::load((q / "tokenizer.json").string());
    EXPECT_EQ(qt.bos_id(), -1);
    EXPECT_EQ(qt.id_to_token(qt.eos_id()), "<|im_end|>");
    EXPECT_EQ(qt.id_to_token(qt.pad_id()), "<|endoftext|>");
    // A config naming a token the tokenizer lacks is an error that names the file and key.
    write_file_atomic((q / "tokenizer_config.json").string(), R"({"eos_token": "<nope>"})");
    const std::string e = error_of([&] { Tokenizer::load((q / "tokenizer.json").string()); });
    EXPECT_NE(e.find("tokenizer_config.json: eos_token \"<nope>\" is not a token"),
              std::string::npos)
        << e;
    for (const fs::path& d : {bare, dir, q}) fs::remove_all(d);
}

// What a stream prints for `ids` after `context`, one string per step, then finish().
std::vector<std::string> stream(const Tokenizer& t, const Ids& context, const Ids& ids) {
    DecodeStream s(t, context, true);
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(s.step(id));
    out.push_back(s.finish());
    return out;
}

TEST(DecodeStream, KeepsTheSpaceAtThePromptAndHoldsIncompleteCharacters) {
    const fs::path dir = family_dir("llama2", false);  // SentencePiece style, byte fallback
    const Tokenizer t = Tokenizer::load((dir / "tokenizer.json").string());
    const Ids hello = t.encode("Hello"), world = t.encode(" world");
    ASSERT_EQ(world.size(), 2u);  // "▁" and "▁world": the leading space is its own piece
    const int32_t w = *t.token_to_id("▁world");
    // Decoded alone, "▁world" loses its space (the decoder strips one at the start).
    EXPECT_EQ(t.decode(Ids{w}), "world");
    EXPECT_EQ(stream(t, hello, {w}), (std::vector<std::string>{" world", ""}));
    // "€" is three byte-fallback tokens: nothing prints until the character is whole.
    const Ids euro = {*t.token_to_id("<0xE2>"), *t.token_to_id("<0x82>"), *t.token_to_id("<0xAC>")};
    EXPECT_EQ(stream(t, hello, euro), (std::vector<std::string>{"", "", "€", ""}));
    // A run that never completes is not dropped: it prints as U+FFFD once text follows, and at
    // the end.
    const Ids torn = {*t.token_to_id("<0xE2>"), *t.token_to_id("<0x82>"), w};
    EXPECT_EQ(stream(t, hello, torn), (std::vector<std::string>{"", "", "\uFFFD\uFFFD world", ""}));
    EXPECT_EQ(stream(t, hello, {euro[0]}), (std::vector<std::string>{"", "\uFFFD"}));
    // The concatenation of the steps is the decode of the whole sequence after the prompt.
    Ids all = hello;
    std::string printed;
    DecodeStream s(t, hello, true);
    for (int32_t id : t.encode(" naïve café 東京 🙂 done")) {
        all.push_back(id);
        printed += s.step(id);
    }
    printed += s.finish();
    EXPECT_EQ("Hello" + printed, t.decode(all));
    fs::remove_all(dir);
}

TEST(TokenizerSpecials, SftExamplesStartWithTheTemplatePrefixAndEndWithTheConfigEos) {
    const fs::path dir = family_dir("llama3_1", true);
    const Tokenizer t = Tokenizer::load((dir / "tokenizer.json").string());
    const std::string path = (dir / "sft.jsonl").string();
    write_file_atomic(path, "{\"prompt\": \"Hello\", \"completion\": \" world\"}\n");
    SftDataset d(path, t, 8, {}, 1, 0.0);
    std::vector<int32_t> in(8), tg(8);
    d.fill_example(0, in.data(), tg.data());
    // <|begin_of_text|> Hello | world <|eot_id|>: the prefix and the prompt are context only.
    EXPECT_EQ(Ids(in.begin(), in.begin() + 3), (Ids{128000, 9906, 1917}));
    EXPECT_EQ(Ids(tg.begin(), tg.begin() + 3), (Ids{kSftIgnoreIndex, 1917, 128009}));
    fs::remove_all(dir);
}

}  // namespace tokenizer_specials_test
}  // namespace ete
