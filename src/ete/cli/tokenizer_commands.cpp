// ete/cli/tokenizer_commands.cpp — `ete tokenizer train|encode|decode|chat` and `ete tokenize`.
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>

#include "ete/cli/commands.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/chat_template.h"
#include "ete/data/corpus.h"
#include "ete/data/tokenizer.h"
#include "ete/data/utf8.h"

namespace ete {
namespace {

std::string read_stdin() {
    return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

int32_t parse_id(const std::string& s, const Tokenizer& t) {
    size_t used = 0;
    long long v = -1;
    try {
        v = std::stoll(s, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    ETE_CHECK(used == s.size() && v >= 0 && v < t.vocab_size(),
              "token id '{}': expected an integer in [0, {})", s, t.vocab_size());
    return static_cast<int32_t>(v);
}

// KEY=VALUE of --set-var: VALUE as JSON when it parses (false, 3, "x", [..]), else the string.
std::pair<std::string, nlohmann::ordered_json> template_var(const std::string& kv) {
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    const bool name_ok =
        !key.empty() && (std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_') &&
        std::all_of(key.begin(), key.end(),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    ETE_CHECK(eq != std::string::npos && name_ok,
              "--set-var '{}': expected NAME=VALUE with NAME an identifier", kv);
    const std::string value = kv.substr(eq + 1);
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(value, nullptr, false);
    if (parsed.is_discarded()) return {key, value};
    return {key, parse_ordered_json(value, "--set-var " + key)};  // with the nesting limit
}

}  // namespace

int cmd_tokenizer_chat(const TokenizerChatArgs& a) {
    ETE_CHECK(!a.messages.empty(),
              "tokenizer chat: give the conversation with --messages FILE "
              "(\"-\": stdin)");
    const std::string where = a.messages == "-" ? "stdin" : a.messages;
    const nlohmann::ordered_json in =
        parse_ordered_json(a.messages == "-" ? read_stdin() : read_file(a.messages), where);
    nlohmann::ordered_json messages = in, tools;
    if (in.is_object()) {
        ETE_CHECK(in.contains("messages"),
                  "{}: expected an array of messages or an object with "
                  "\"messages\"",
                  where);
        messages = in["messages"];
        if (in.contains("tools")) tools = in["tools"];
    }
    ETE_CHECK(messages.is_array(), "{}: messages: expected an array", where);
    if (!a.tools.empty()) {
        tools = parse_ordered_json(read_file(a.tools), a.tools);
        if (tools.is_object() && tools.contains("tools")) tools = tools["tools"];
        ETE_CHECK(tools.is_array(), "{}: expected an array of tools", a.tools);
    }
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    for (const std::string& kv : a.set_vars) {
        auto [k, v] = template_var(kv);
        extra[k] = std::move(v);
    }
    const bool with_tools = !tools.is_null();
    const ChatTemplate t = read_chat_template(a.tokenizer_config, with_tools);
    // Errors of the template (syntax, raise_exception, limits) name the file it came from.
    std::string text;
    try {
        text = jinja::Template(t.source)
                   .render(chat_context(t, messages, tools, a.add_generation_prompt, extra))
                   .text;
    } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", t.where, e.what()));
    }
    if (!a.ids) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
    }
    // HF's apply_chat_template(tokenize=True) encodes with add_special_tokens=False: the
    // template writes the special tokens itself, and they are matched as added tokens.
    const auto dir = std::filesystem::path(a.tokenizer_config).parent_path();
    const Tokenizer tok = Tokenizer::load((dir / "tokenizer.json").string());
    const std::vector<int32_t> ids = tok.encode(text, false);
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += fmt::format("{}{}", k ? " " : "", ids[k]);
    std::puts(line.c_str());
    return 0;
}

int cmd_tokenizer_train(const TokenizerTrainArgs& a) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer tok = Tokenizer::train_files(a.inputs, a.vocab_size, {"<|endoftext|>"});
    tok.save(a.out);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log_info("tokenizer: {} tokens ({} merges) trained in {:.1f}s -> {}", tok.vocab_size(),
             tok.num_merges(), s, a.out);
    return 0;
}

int cmd_tokenize(const TokenizeArgs& a) {
    Tokenizer tok = Tokenizer::load(a.tokenizer);
    tokenize_text_file_to_shard(a.input, tok, a.out,
                                {a.append_eos, a.add_special_tokens, a.strict_utf8});
    return 0;  // it logs its own summary
}

int cmd_tokenizer_encode(const TokenizerCodecArgs& a) {
    ETE_CHECK(a.text.empty() != a.file.empty(),
              "tokenizer encode: give the text with --text or as a file (\"-\" for stdin), not "
              "both");
    const Tokenizer tok = Tokenizer::load(a.tokenizer);
    const std::string text =
        !a.file.empty() ? (a.file == "-" ? read_stdin() : read_file(a.file, UINT64_MAX)) : a.text;
    check_utf8_input(text, a.file.empty() ? "--text" : a.file, a.strict_utf8);
    const std::vector<int32_t> ids = tok.encode(text, a.add_special_tokens);
    if (a.json) {
        nlohmann::json tokens = nlohmann::json::array();
        for (int32_t id : ids) tokens.push_back(tok.id_to_token(id));
        nlohmann::json out = {{"ids", ids}, {"tokens", tokens}};
        std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += fmt::format("{}{}", k ? " " : "", ids[k]);
    std::puts(line.c_str());
    return 0;
}

int cmd_tokenizer_decode(const TokenizerCodecArgs& a) {
    const Tokenizer tok = Tokenizer::load(a.tokenizer);
    std::vector<std::string> words = a.ids;
    if (words.empty()) {
        const std::string in = read_stdin();
        size_t p = 0;
        while (true) {
            p = in.find_first_not_of(" \t\r\n,", p);
            if (p == std::string::npos) break;
            const size_t e = std::min(in.find_first_of(" \t\r\n,", p), in.size());
            words.push_back(in.substr(p, e - p));
            p = e;
        }
    }
    std::vector<int32_t> ids;
    for (const std::string& w : words) ids.push_back(parse_id(w, tok));
    const std::string text = tok.decode(ids, a.skip_special_tokens);
    if (a.json) {
        std::puts(nlohmann::json({{"text", text}}).dump().c_str());
    } else {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
    }
    return 0;
}

}  // namespace ete
