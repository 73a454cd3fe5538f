// tests/data/sft_chat_test.cpp — SFT chat records through a model's own chat template
// (data/sft_chat.h): the labelled bytes of multi-turn Qwen3 and Llama 3.1 records equal those
// of the committed goldens (tools/gen_sft_chat_goldens.py: the real templates under Jinja2 in
// Hugging Face's environment, the labelling rule implemented again in Python), the tokens that
// get targets decode to exactly the labelled text, {% generation %} blocks are taken as they are,
// and templates that cannot be labelled are refused by record.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/core/file_util.h"
#include "ete/data/sft.h"
#include "ete/data/sft_chat.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

const std::string kFamilies = std::string(ETE_SOURCE_DIR) + "/tests/golden/tokenizers/families/";

// A tokenizer dir of a family: tokenizer.json and its tokenizer_config.json.
fs::path family_dir(const std::string& family) {
    const fs::path dir =
        fs::temp_directory_path() / fmt::format("ete_sft_chat_{}_{}", family, ::getpid());
    fs::create_directories(dir);
    const std::string cmd = fmt::format("xz -dc '{}{}.tokenizer.json.xz' > '{}'", kFamilies, family,
                                        (dir / "tokenizer.json").string());
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    fs::copy_file(kFamilies + family + ".tokenizer_config.json", dir / "tokenizer_config.json",
                  fs::copy_options::overwrite_existing);
    return dir;
}

OJson goldens() {
    return OJson::parse(read_file(std::string(ETE_SOURCE_DIR) + "/tests/data/jinja/sft_chat.json"));
}

// The text and the trained byte spans of rendered segments.
std::pair<std::string, std::vector<std::pair<size_t, size_t>>> flatten(const SftRendered& r) {
    std::string text;
    std::vector<std::pair<size_t, size_t>> spans;
    for (const SftSegment& s : r.segments) {
        if (s.trained) spans.push_back({text.size(), text.size() + s.text.size()});
        text += s.text;
    }
    return {text, spans};
}

TEST(SftChat, LabelledBytesOfRealTemplatesMatchTheGoldens) {
    for (const OJson& g : goldens()) {
        const std::string family = g["family"];
        const fs::path dir = family_dir(family);
        const Tokenizer tok = Tokenizer::load((dir / "tokenizer.json").string());
        const auto t = load_sft_chat_template("model", (dir / "tokenizer.json").string(), tok);
        const SftRendered r = t->render(g["record"].dump());
        ASSERT_EQ(r.error, "") << family;
        EXPECT_TRUE(r.templated);
        const auto [text, spans] = flatten(r);
        EXPECT_EQ(text, g["text"].get<std::string>()) << family;
        std::vector<std::pair<size_t, size_t>> want;
        for (const OJson& s : g["spans"]) want.push_back({s[0], s[1]});
        EXPECT_EQ(spans, want) << family;
        fs::remove_all(dir);
    }
}

// The dataset: tokens encoded from the template's own text (its BOS once, no EOS appended), and
// the positions with targets predict exactly the labelled text, end-of-turn tokens included.
TEST(SftChat, TargetsDecodeToTheLabelledText) {
    for (const OJson& g : goldens()) {
        const std::string family = g["family"];
        const fs::path dir = family_dir(family);
        const Tokenizer tok = Tokenizer::load((dir / "tokenizer.json").string());
        SftOptions opt;
        opt.chat_template = load_sft_chat_template("model", (dir / "tokenizer.json").string(), tok);
        write_file_atomic((dir / "d.jsonl").string(), g["record"].dump() + "\n");
        const int T = 256;
        SftDataset ds((dir / "d.jsonl").string(), tok, T, opt, 0, 0.0);
        std::vector<int32_t> in(T), tgt(T);
        ds.fill_example(0, in.data(), tgt.data());
        std::vector<int32_t> targets;
        std::string labelled;
        for (int j = 0; j < T; ++j)
            if (tgt[size_t(j)] != kSftIgnoreIndex) targets.push_back(tgt[size_t(j)]);
        const std::string text = g["text"];
        for (const OJson& s : g["spans"])
            labelled += text.substr(size_t(s[0]), size_t(s[1]) - size_t(s[0]));
        EXPECT_EQ(tok.decode(targets), labelled) << family;
        // The input starts with what the template wrote (Llama's <|begin_of_text|> once).
        const std::vector<int32_t> whole = tok.encode(text, false);
        ASSERT_LE(whole.size(), size_t(T));
        EXPECT_EQ(std::vector<int32_t>(in.begin(), in.begin() + int64_t(whole.size()) - 1),
                  std::vector<int32_t>(whole.begin(), whole.end() - 1))
            << family;
        fs::remove_all(dir);
    }
}

ChatTemplate inline_template(const std::string& source) {
    ChatTemplate t;
    t.source = source;
    t.where = "inline";
    return t;
}

const char* kChat =
    R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},)"
    R"( {"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]})";

TEST(SftChat, GenerationBlocksAreTheLabels) {
    const ChatTemplate t = inline_template(
        "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
        "{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n"
        "{% endfor %}");
    const SftChatTemplate s(t, t, {"</s>"});
    const auto [text, spans] = flatten(s.render(kChat));
    // (trim_blocks, as HF sets it: the newline after a block tag goes.)
    EXPECT_EQ(text, "<user>hi<assistant>yo</s><user>bye<assistant>ciao</s>");
    const size_t a = text.find("yo</s>"), b = text.find("ciao</s>");
    EXPECT_EQ(spans, (std::vector<std::pair<size_t, size_t>>{{a, a + 6}, {b, b + 8}}));
}

// Without a stop token in the text, a turn ends where the conversation through it ends.
TEST(SftChat, ATurnWithoutAStopTokenEndsWhereItsConversationEnds) {
    const ChatTemplate t = inline_template(
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}");
    const SftChatTemplate s(t, t, {"<eos>"});
    const auto [text, spans] = flatten(s.render(kChat));
    EXPECT_EQ(text, "[user] hi\n[assistant] yo\n[user] bye\n[assistant] ciao\n");
    // "yo\n" (the conversation through it ends there) and "ciao\n" (to the end).
    const size_t a = text.find("yo\n"), b = text.find("ciao\n");
    EXPECT_EQ(spans, (std::vector<std::pair<size_t, size_t>>{{a, a + 3}, {b, b + 5}}));
}

TEST(SftChat, RecordsThatCannotBeLabelledAreRefusedByName) {
    // The message count first: every prefix renders differently.
    const ChatTemplate counted = inline_template(
        "{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}");
    const SftRendered r = SftChatTemplate(counted, counted, {}).render(kChat);
    EXPECT_NE(r.error.find("message 1: the template renders the conversation before it "
                           "differently"),
              std::string::npos)
        << r.error;
    const ChatTemplate strict = inline_template(
        "{% if messages[0].role != 'system' %}{{ raise_exception('a system prompt is required') }}"
        "{% endif %}");
    const SftRendered e = SftChatTemplate(strict, strict, {}).render(kChat);
    EXPECT_NE(e.error.find("a system prompt is required"), std::string::npos) << e.error;
    EXPECT_NE(SftChatTemplate(strict, strict, {}).render(R"({"messages": []})").error, "");
    EXPECT_NE(SftChatTemplate(strict, strict, {}).render(R"({"messages": [{"content": 1}]})").error,
              "");
}

// Records, messages files and tools keep their key order (tojson prints it) and an object of more
// than kMaxOrderedKeys keys is refused before the ordered parse, whose cost is the square of an
// object's size (100,000 keys took 14 s).
TEST(SftChat, KeyOrderIsKeptAndAnObjectOfTooManyKeysIsRefused) {
    const OJson kept = parse_ordered_json(R"({"b": 1, "a": {"z": 2, "y": 3}})", "x.json");
    EXPECT_EQ(kept.dump(), R"({"b":1,"a":{"z":2,"y":3}})");
    const auto object_of = [](size_t n) {
        std::string s = "{";
        for (size_t k = 0; k < n; ++k) s += fmt::format("{}\"k{}\": {}", k ? ", " : "", k, k);
        return s + "}";
    };
    EXPECT_EQ(parse_ordered_json(object_of(kMaxOrderedKeys), "x.json").size(), kMaxOrderedKeys);
    const std::string wide = R"({"messages": [{"role": "user", "content": "hi", "meta": )" +
                             object_of(kMaxOrderedKeys + 1) + "}]}";
    try {
        parse_ordered_json(wide, "m.json");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_EQ(
            std::string(e.what()).rfind(fmt::format("m.json: an object with {} keys (at most {}",
                                                    kMaxOrderedKeys + 1, kMaxOrderedKeys),
                                        0),
            0u)
            << e.what();
    }
    const ChatTemplate t = inline_template("{{ messages[0].content }}");
    EXPECT_EQ(SftChatTemplate(t, t, {}).render(wide).error.rfind("record: an object with", 0), 0u);
}

TEST(SftChat, SettingsNameTheFile) {
    const fs::path dir = family_dir("qwen3");
    const Tokenizer tok = Tokenizer::load((dir / "tokenizer.json").string());
    const std::string tj = (dir / "tokenizer.json").string();
    try {
        load_sft_chat_template((dir / "nope.jinja").string(), tj, tok);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("nope.jinja': file not found"), std::string::npos)
            << e.what();
    }
    write_file_atomic((dir / "bad.jinja").string(), "{% for x in %}");
    try {
        load_sft_chat_template((dir / "bad.jinja").string(), tj, tok);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.jinja: chat template line 1"), std::string::npos)
            << e.what();
    }
    fs::remove_all(dir);
}

}  // namespace
}  // namespace ete
