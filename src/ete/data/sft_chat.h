// ete/data/sft_chat.h — SFT chat records rendered with a model's own chat template
// (data.sft_chat_template), with the loss on the assistant turns only.
//
// A record {"messages": [...], "tools": [...] (optional)} is rendered as Hugging Face's
// apply_chat_template(messages, tools=tools, tokenize=False) renders it (data/jinja.h; the
// tool_use template of a list-form chat_template when the record has tools), and each of its
// bytes is trained on or not:
//  - a template with {% generation %} blocks: exactly the text inside them (HF's
//    return_assistant_tokens_mask);
//  - otherwise, by rendering prefixes: for assistant message i, P_i = the conversation before it
//    with the generation prompt (what a server sends the model to get that turn) must be a
//    prefix of the whole rendering R (else the record is refused, naming the message). The turn
//    is trained from the end of P_i through the first end-of-turn marker after it — the text of
//    one of the tokenizer's stop tokens (<|im_end|>, <|eot_id|>, <end_of_turn>, </s>, <|end|>,
//    ...) — or to the end of R when none follows. So the role header (part of the prompt) is
//    context; the content, a reasoning block, tool calls and the end-of-turn token are
//    targets; what follows (a newline, the next turn) is context.
// The template writes the special tokens itself (BOS included): the text is encoded without the
// tokenizer's post-processor and no EOS is appended, as apply_chat_template(tokenize=True).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ete/data/chat_template.h"
#include "ete/data/tokenizer.h"

namespace ete {

struct SftSegment {
    std::string text;
    bool trained;
};

// A record's segments, or the reason it is malformed.
struct SftRendered {
    std::vector<SftSegment> segments;
    std::string error;
    // Rendered by a model's chat template: it wrote the special tokens (no post-processor
    // prefix, no EOS appended).
    bool templated = false;
};

class SftChatTemplate {
  public:
    // plain: the template for records without tools; with_tools: for records with tools (the
    // same text unless the config lists a tool_use template). stops: end-of-turn marker texts.
    SftChatTemplate(const ChatTemplate& plain, const ChatTemplate& with_tools,
                    std::vector<std::string> stops);
    ~SftChatTemplate();
    // The raw JSONL line of a chat record (parsed again keeping key order, which a template's
    // tojson shows). Template errors (raise_exception, a limit) make the record malformed.
    SftRendered render(const std::string& line) const;
    const std::string& where() const { return plain_.where; }

  private:
    struct Compiled;
    ChatTemplate plain_, tools_;
    std::unique_ptr<Compiled> compiled_;
    std::vector<std::string> stops_;
};

// data.sft_chat_template: "model" (the chat_template of the tokenizer_config.json beside
// `tokenizer_json`), or a path — a tokenizer_config.json, or a file holding the Jinja text
// itself (the special tokens then come from the tokenizer_config.json beside the tokenizer, if
// any). The end-of-turn markers are the texts of tok's stop tokens. Throws naming the file and
// `option` (the setting's name: the config key, or `ete eval`'s --chat-template).
std::shared_ptr<const SftChatTemplate> load_sft_chat_template(
    const std::string& setting, const std::string& tokenizer_json, const Tokenizer& tok,
    const std::string& option = "data.sft_chat_template");

}  // namespace ete
