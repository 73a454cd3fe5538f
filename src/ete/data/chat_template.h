// ete/data/chat_template.h — a model's chat template as Hugging Face's apply_chat_template uses
// it: the template text from tokenizer_config.json and the variables it is rendered with.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "ete/data/jinja.h"

namespace ete {

struct ChatTemplate {
    std::string source;  // the Jinja text
    std::string where;   // "FILE" or "FILE (chat_template 'tool_use')", for messages
    // The tokenizer's special_tokens_map as transformers passes it: bos_token, eos_token,
    // unk_token, sep_token, pad_token, cls_token, mask_token (those set, as strings; AddedToken
    // dicts by their "content") and additional_special_tokens.
    nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// Reads `chat_template` from tokenizer_config.json: a string, or HF's list of
// {"name", "template"} ("tool_use" when with_tools and present, else "default"); without one, a
// chat_template.jinja beside the file (where transformers >= 4.50 saves it). Throws ete::Error
// naming the file.
ChatTemplate read_chat_template(const std::string& tokenizer_config_path, bool with_tools);

// The special tokens of a parsed tokenizer_config.json (ChatTemplate::special_tokens); `path`
// names it in errors.
nlohmann::ordered_json special_tokens_of(const nlohmann::json& config, const std::string& path);

// The variables apply_chat_template renders with: messages, tools (null when none), documents
// (null), add_generation_prompt, the special tokens, then `extra` (enable_thinking, ...; it may
// override any of them).
nlohmann::ordered_json chat_context(const ChatTemplate& t, const nlohmann::ordered_json& messages,
                                    const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                    const nlohmann::ordered_json& extra);

// The most keys one object may have in parse_ordered_json: real messages, tools and records
// have tens (a tool's schema properties included); at this size a key order costs ~0.5M string
// comparisons an object, ~0.1 s per MB of hostile text made of such objects.
inline constexpr size_t kMaxOrderedKeys = 1024;

// JSON text parsed keeping object key order (as Python's json does), with the nesting limit of
// core/json_file.h and objects of at most kMaxOrderedKeys keys; errors name `where`.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where);

}  // namespace ete
