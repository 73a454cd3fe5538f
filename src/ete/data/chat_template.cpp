// ete/data/chat_template.cpp — chat_template and special tokens from tokenizer_config.json
// (chat_template.h), following transformers' PreTrainedTokenizerBase.get_chat_template and
// special_tokens_map.
#include "ete/data/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/json_file.h"

namespace ete {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

namespace {

// The most keys of one object, anywhere in v (the nesting limit bounds the recursion).
size_t widest_object(const nlohmann::json& v) {
    size_t widest = v.is_object() ? v.size() : 0;
    if (v.is_structured())
        for (const nlohmann::json& e : v) widest = std::max(widest, widest_object(e));
    return widest;
}

}  // namespace

OJson parse_ordered_json(std::string_view text, const std::string& where) {
    // The nesting limit and a one-line error for malformed text, in a sorted json first: an
    // ordered_json finds each key it inserts by a linear search, so an object of n keys costs n^2
    // (a messages file with one object of 100,000 keys took 14 s, of a million ~25 minutes).
    const size_t widest = widest_object(parse_json(text, where));
    ETE_CHECK(widest <= kMaxOrderedKeys,
              "{}: an object with {} keys (at most {}: chat messages, tools and records keep "
              "their key order, which costs the square of an object's size)",
              where, widest, kMaxOrderedKeys);
    return OJson::parse(text);
}

namespace {

// A special token: a string, or an AddedToken dict ({"content": ..., "__type": "AddedToken"}).
std::string token_text(const nlohmann::json& v, const std::string& where, const std::string& key) {
    if (v.is_string()) return v.get<std::string>();
    ETE_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(),
              "{}: {} = {}: expected a string or an AddedToken with \"content\"", where, key,
              v.dump().substr(0, 64));
    return v["content"].get<std::string>();
}

std::string pick_template(const nlohmann::json& ct, bool with_tools, std::string& where) {
    if (ct.is_string()) return ct.get<std::string>();
    ETE_CHECK(ct.is_array(),
              "{}: chat_template: expected a string or a list of {{\"name\", "
              "\"template\"}}",
              where);
    const nlohmann::json* chosen = nullptr;
    const nlohmann::json* fallback = nullptr;
    for (const nlohmann::json& e : ct) {
        ETE_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() &&
                      e.contains("template") && e["template"].is_string(),
                  "{}: chat_template: each entry needs a string name and template", where);
        if (e["name"] == "tool_use" && with_tools) chosen = &e;
        if (e["name"] == "default") fallback = &e;
    }
    if (!chosen) chosen = fallback;
    ETE_CHECK(chosen, "{}: chat_template has no 'default' template{}", where,
              with_tools ? " and no 'tool_use' one" : "");
    where += fmt::format(" (chat_template '{}')", (*chosen)["name"].get<std::string>());
    return (*chosen)["template"].get<std::string>();
}

}  // namespace

ChatTemplate read_chat_template(const std::string& path, bool with_tools) {
    // Key order does not matter here (a sorted json: Gemma 3's has 6,415 added tokens).
    const nlohmann::json config = read_json_file(path);
    ETE_CHECK(config.is_object(), "{}: expected a JSON object", path);
    ChatTemplate t;
    t.where = path;
    if (config.contains("chat_template") && !config["chat_template"].is_null()) {
        t.source = pick_template(config["chat_template"], with_tools, t.where);
    } else {
        const fs::path beside = fs::path(path).parent_path() / "chat_template.jinja";
        ETE_CHECK(fs::exists(beside), "{}: no chat_template (and no chat_template.jinja beside it)",
                  path);
        t.source = read_file(beside.string());
        t.where = beside.string();
    }
    t.special_tokens = special_tokens_of(config, path);
    return t;
}

OJson special_tokens_of(const nlohmann::json& config, const std::string& path) {
    OJson out = OJson::object();
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
        if (config.contains(key) && !config[key].is_null())
            out[key] = token_text(config[key], path, key);
    }
    if (config.contains("additional_special_tokens") &&
        config["additional_special_tokens"].is_array()) {
        OJson list = OJson::array();
        for (const nlohmann::json& v : config["additional_special_tokens"])
            list.push_back(token_text(v, path, "additional_special_tokens"));
        out["additional_special_tokens"] = list;
    }
    return out;
}

OJson chat_context(const ChatTemplate& t, const OJson& messages, const OJson& tools,
                   bool add_generation_prompt, const OJson& extra) {
    OJson c = {{"messages", messages},
               {"tools", tools},
               {"documents", nullptr},
               {"add_generation_prompt", add_generation_prompt}};
    for (const auto& [k, v] : t.special_tokens.items()) c[k] = v;
    for (const auto& [k, v] : extra.items()) c[k] = v;
    return c;
}

}  // namespace ete
