// tests/cli/tokenizer_cli_test.cpp — `ete tokenizer encode|decode` and `ete tokenize`'s flags on
// a real model's files (Llama-3.1's tokenizer.json and tokenizer_config.json).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

class TokenizerCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_tok_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        const std::string fam = ETE_SOURCE_DIR "/tests/golden/tokenizers/families/llama3_1";
        ASSERT_EQ(std::system(("xz -dc " + fam + ".tokenizer.json.xz > " + tok()).c_str()), 0);
        fs::copy_file(fam + ".tokenizer_config.json", dir_ / "tokenizer_config.json");
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string tok() const { return (dir_ / "tokenizer.json").string(); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    ShellResult ete(const std::string& args) const { return run_shell(ete_cmd(args)); }
    fs::path dir_;
};

TEST_F(TokenizerCli, EncodeAndDecodeLikeHf) {
    ShellResult r = ete("tokenizer encode --tokenizer " + tok() + " --text 'Hello world'");
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(r.out, "9906 1917\n");
    r = ete("tokenizer encode --tokenizer " + tok() +
            " --text 'Hello world' --add-special-tokens --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"], nlohmann::json({128000, 9906, 1917}));
    EXPECT_EQ(j["tokens"], nlohmann::json({"<|begin_of_text|>", "Hello", "Ġworld"}));
    r = ete("tokenizer decode --tokenizer " + tok() + " 128000 9906 1917");
    EXPECT_EQ(r.out, "<|begin_of_text|>Hello world\n");
    r = run_shell("echo '128000, 9906 1917' | " +
                  ete_cmd("tokenizer decode --skip-special-tokens --json --tokenizer " + tok()));
    EXPECT_EQ(r.out, "{\"text\":\"Hello world\"}\n");
    r = ete("tokenizer decode --tokenizer " + tok() + " 12x 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("token id '12x': expected an integer in [0, 128256)"), std::string::npos)
        << r.out;
}

TEST_F(TokenizerCli, InvalidUtf8WarnsOnceOrFailsWhenStrict) {
    write_file_atomic(path("bad.txt"), "caf\xc3\xa9 \xff\xfe ok \xe2\x82");
    ShellResult r = ete("tokenizer encode --tokenizer " + tok() + " " + path("bad.txt") + " 2>&1");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("3 invalid UTF-8 sequence(s), the first at byte 6"), std::string::npos)
        << r.out;
    // Encoded as HF sees the text: each invalid stretch is U+FFFD.
    write_file_atomic(path("fixed.txt"), "caf\u00e9 \uFFFD\uFFFD ok \uFFFD");
    const ShellResult same = ete("tokenizer encode --tokenizer " + tok() + " " + path("fixed.txt"));
    EXPECT_EQ(r.out.substr(r.out.find('\n') + 1), same.out);
    r = ete("tokenize " + path("bad.txt") + " --tokenizer " + tok() + " --out " + path("bad.tok") +
            " --strict-utf8 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("bad.txt: invalid UTF-8 at byte 6"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(path("bad.tok")));
}

TEST_F(TokenizerCli, TokenizeTakesBosAndEosFromTheModelFiles) {
    write_file_atomic(path("t.txt"), "Hello world");
    ShellResult r = ete("tokenize " + path("t.txt") + " --tokenizer " + tok() + " --out " +
                        path("t.tok") + " --add-special-tokens --append-eos 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    TokenShard s(path("t.tok"));
    std::vector<int32_t> ids(s.size());
    s.read(0, ids.size(), ids.data());
    // <|begin_of_text|> from the template, <|eot_id|> from tokenizer_config.json (the file's
    // own name-based guess would be <|end_of_text|>, 128001).
    EXPECT_EQ(ids, (std::vector<int32_t>{128000, 9906, 1917, 128009}));
}

}  // namespace
}  // namespace ete
