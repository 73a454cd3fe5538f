// tests/cli/tokenizer_chat_cli_test.cpp — `ete tokenizer chat` on Qwen3's real tokenizer files:
// the rendered text equals Jinja2's goldens (tests/data/jinja/real_templates.json) byte for byte,
// --set-var reaches the template, --ids equals ids assembled without ETE's encoder (the special
// tokens' ids from tokenizer_config.json, whole-word tokens from the vocab, and HF's ids for the
// message text from the family golden), HF's list form of chat_template picks "tool_use" with
// tools, and raise_exception is a one-line error with a non-zero exit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ete/core/file_util.h"
#include "shell.h"
#include "test_build.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
const std::string kFamilies = ETE_SOURCE_DIR "/tests/golden/tokenizers/families/";

class TokenizerChatCli : public ::testing::Test {
  protected:
    // Qwen3's tokenizer.json is decompressed once for the suite (about 3 s).
    static void SetUpTestSuite() {
        dir_ = fs::temp_directory_path() / ("ete_chat_cli_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
        ASSERT_EQ(std::system(("xz -dc " + kFamilies + "qwen3.tokenizer.json.xz > " +
                               (dir_ / "tokenizer.json").string())
                                  .c_str()),
                  0);
        fs::copy_file(kFamilies + "qwen3.tokenizer_config.json", dir_ / "tokenizer_config.json",
                      fs::copy_options::overwrite_existing);
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    void SetUp() override {
        goldens_ = Json::parse(read_file(ETE_SOURCE_DIR "/tests/data/jinja/real_templates.json"));
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    ShellResult chat(const std::string& args) const {
        return run_shell(ete_cmd("tokenizer chat --tokenizer-config " +
                                 path("tokenizer_config.json") + " " + args));
    }
    // The Qwen3 golden of a conversation.
    std::string golden(const std::string& conversation, bool gen, const Json& extra) const {
        for (const Json& c : goldens_["cases"])
            if (c["template"] == "qwen3" && c["conversation"] == conversation &&
                c["add_generation_prompt"] == gen && c["extra"] == extra)
                return c["expected"].get<std::string>();
        ADD_FAILURE() << "no golden for " << conversation;
        return "";
    }
    static inline fs::path dir_;
    Json goldens_;
};

TEST_F(TokenizerChatCli, PrintsTheTextAsJinja2RendersIt) {
    // An object with messages and tools, the generation prompt on.
    write_file_atomic(path("conv.json"), Json{{"messages", goldens_["conversations"]["tools"]},
                                              {"tools", goldens_["tools"]}}
                                             .dump());
    ShellResult r = chat("--messages " + path("conv.json") + " --add-generation-prompt");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, golden("tools", true, Json::object()));  // no newline added
    // A plain array from stdin; enable_thinking=false through --set-var.
    write_file_atomic(path("single.json"), goldens_["conversations"]["single_user"].dump());
    r = run_shell("cat " + path("single.json") + " | " +
                  ete_cmd("tokenizer chat --tokenizer-config " + path("tokenizer_config.json") +
                          " - --add-generation-prompt --set-var enable_thinking=false"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, golden("single_user", true, Json{{"enable_thinking", false}}));
    EXPECT_NE(r.out.find("<think>\n\n</think>\n\n"), std::string::npos) << r.out;
    // --tools given apart from the messages.
    write_file_atomic(path("tools.json"), goldens_["tools"].dump());
    write_file_atomic(path("msgs.json"), goldens_["conversations"]["tools"].dump());
    r = chat("--messages " + path("msgs.json") + " --tools " + path("tools.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out, golden("tools", false, Json::object()));
}

TEST_F(TokenizerChatCli, IdsMatchSpecialTokensAndHfIds) {
    write_file_atomic(path("m.json"), R"([{"role": "user", "content": "Hello world"}])");
    const ShellResult r = chat("--messages " + path("m.json") + " --add-generation-prompt --ids");
    ASSERT_EQ(r.code, 0) << r.out;
    // <|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n: the special tokens by
    // their ids in tokenizer_config.json, "user", "\n" (Ċ) and "assistant" whole in the vocab,
    // and "Hello world" as HF encodes it (the family golden).
    const Json config = Json::parse(read_file(path("tokenizer_config.json")));
    const auto special = [&](const std::string& content) {
        for (const auto& [id, tok] : config["added_tokens_decoder"].items())
            if (tok["content"] == content) return std::stoi(id);
        ADD_FAILURE() << content;
        return -1;
    };
    // (a sorted json: an ordered_json of 151k keys would take seconds to build)
    const nlohmann::json vocab =
        nlohmann::json::parse(read_file(path("tokenizer.json")))["model"]["vocab"];
    const Json family = Json::parse(read_file(kFamilies + "qwen3.golden.json"));
    Json hello;
    for (const Json& c : family["cases"])
        if (c["name"] == "hello_world") hello = c["ids"];
    ASSERT_EQ(hello.size(), 2u);
    std::vector<int> want = {special("<|im_start|>"), vocab["user"].get<int>(),
                             vocab["Ċ"].get<int>()};
    for (const Json& id : hello) want.push_back(id.get<int>());
    for (int id : {special("<|im_end|>"), vocab["Ċ"].get<int>(), special("<|im_start|>"),
                   vocab["assistant"].get<int>(), vocab["Ċ"].get<int>()})
        want.push_back(id);
    std::string line;
    for (size_t k = 0; k < want.size(); ++k) line += (k ? " " : "") + std::to_string(want[k]);
    EXPECT_EQ(r.out, line + "\n");
}

// `--ids` end to end for every family whose tokenizer_config.json (and so its own chat template)
// is shipped: the ids Hugging Face's apply_chat_template(tokenize=True) gives for a multi-turn
// conversation with a system prompt and the generation prompt on (tests/data/jinja/chat_ids.json,
// tools/gen_hf_chat_ids.mjs; every other render of tests/data/jinja is checked against it in
// process by tokenizer_family_test.cpp). date_string fixes the date Llama 3.2's template would
// take from the clock (the goldens' strftime_now time). Under the sanitizers, where loading a
// large tokenizer.json takes seconds, two families stand for all.
TEST_F(TokenizerChatCli, IdsEqualHfApplyChatTemplateForEveryShippedConfig) {
    const Json ids = Json::parse(read_file(ETE_SOURCE_DIR "/tests/data/jinja/chat_ids.json"));
    write_file_atomic(path("multi.json"), goldens_["conversations"]["system_multi_turn"].dump());
    const std::pair<std::string, std::string> families[] = {
        {"llama3", "llama3"},   {"llama3_1", "llama3_1"},       {"llama3_2", "llama3_2"},
        {"qwen2_5", "qwen2_5"}, {"deepseek_v3", "deepseek_v3"}, {"gpt4", "chatml"}};
    for (const auto& [family, tmpl] : families) {
        if (testing::under_sanitizers() && family != "llama3_2" && family != "deepseek_v3")
            continue;
        SCOPED_TRACE(family);
        const fs::path d = dir_ / family;
        fs::create_directories(d);
        ASSERT_EQ(std::system(("xz -dc " + kFamilies + family + ".tokenizer.json.xz > " +
                               (d / "tokenizer.json").string())
                                  .c_str()),
                  0);
        fs::copy_file(kFamilies + family + ".tokenizer_config.json", d / "tokenizer_config.json",
                      fs::copy_options::overwrite_existing);
        std::string want;
        for (const Json& g : ids["cases"]) {
            const Json& c = goldens_["cases"][g["case"].get<size_t>()];
            if (g["template"] != tmpl || c["conversation"] != "system_multi_turn" ||
                c["add_generation_prompt"] != true || c["tools"] != false || !c["extra"].empty())
                continue;
            for (const Json& id : g["ids"]) want += (want.empty() ? "" : " ") + id.dump();
        }
        ASSERT_FALSE(want.empty()) << "no golden for " << tmpl;
        const ShellResult r = run_shell(
            ete_cmd("tokenizer chat --tokenizer-config " + (d / "tokenizer_config.json").string() +
                    " --messages " + path("multi.json") +
                    " --add-generation-prompt --set-var 'date_string=\"01 Jan 2025\"' --ids"));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(r.out, want + "\n");
        fs::remove_all(d);
    }
}

TEST_F(TokenizerChatCli, ListFormPicksToolUseWithTools) {
    write_file_atomic(path("list_config.json"), R"({"bos_token": "<s>", "chat_template": [
        {"name": "default", "template": "D{{ messages|length }}{{ bos_token }}"},
        {"name": "tool_use", "template": "T{{ tools|length }}"}]})");
    write_file_atomic(path("m.json"), R"({"messages": [{"role": "user", "content": "x"}]})");
    write_file_atomic(path("tools.json"), R"([{"type": "function"}, {"type": "function"}])");
    const std::string base = "tokenizer chat --tokenizer-config " + path("list_config.json") +
                             " --messages " + path("m.json");
    EXPECT_EQ(run_shell(ete_cmd(base)).out, "D1<s>");
    EXPECT_EQ(run_shell(ete_cmd(base + " --tools " + path("tools.json"))).out, "T2");
}

TEST_F(TokenizerChatCli, TemplateErrorsAreOneLine) {
    const std::string gemma = read_file(ETE_SOURCE_DIR "/tests/data/jinja/templates/gemma2.jinja");
    write_file_atomic(path("gemma_config.json"),
                      Json{{"bos_token", "<bos>"}, {"chat_template", gemma}}.dump());
    write_file_atomic(path("bad.json"), R"([{"role": "user", "content": "a"},
                                            {"role": "user", "content": "b"}])");
    ShellResult r =
        run_shell(ete_cmd("tokenizer chat --tokenizer-config " + path("gemma_config.json") +
                          " --messages " + path("bad.json") + " 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.out, "ete: error: " + path("gemma_config.json") +
                         ": chat template line 1: raise_exception: Conversation roles must "
                         "alternate user/assistant/user/assistant/...\n");
    write_file_atomic(path("notjson.json"), "[{\"role\": ");
    r = chat("--messages " + path("notjson.json") + " 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.out.rfind("ete: error: " + path("notjson.json") + ": invalid JSON", 0), 0u)
        << r.out;
    r = chat("--messages " + path("bad.json") + " --set-var '1x=2' 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("--set-var '1x=2': expected NAME=VALUE"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ete
