// ete/data/sft_chat.cpp
#include "ete/data/sft_chat.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/data/jinja.h"

namespace ete {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

struct SftChatTemplate::Compiled {
    jinja::Template plain, tools;
};

SftChatTemplate::SftChatTemplate(const ChatTemplate& plain, const ChatTemplate& with_tools,
                                 std::vector<std::string> stops)
    : plain_(plain),
      tools_(with_tools),
      compiled_(new Compiled{jinja::Template(plain.source), jinja::Template(with_tools.source)}),
      stops_(std::move(stops)) {
    stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

SftChatTemplate::~SftChatTemplate() = default;

namespace {

// Segments of text with the byte ranges `spans` (sorted, disjoint) trained.
std::vector<SftSegment> split(const std::string& text,
                              const std::vector<std::pair<size_t, size_t>>& spans) {
    std::vector<SftSegment> out;
    size_t at = 0;
    for (const auto& [b, e] : spans) {
        if (b > at) out.push_back({text.substr(at, b - at), false});
        if (e > b) out.push_back({text.substr(b, e - b), true});
        at = std::max(at, e);
    }
    if (at < text.size()) out.push_back({text.substr(at), false});
    return out;
}

// The end of the first stop marker at or after `from`, or npos.
size_t turn_end(const std::string& text, size_t from, const std::vector<std::string>& stops) {
    size_t best = std::string::npos;
    for (const std::string& s : stops) {
        const size_t p = text.find(s, from);
        if (p != std::string::npos && (best == std::string::npos || p + s.size() < best))
            best = p + s.size();
    }
    return best;
}

}  // namespace

SftRendered SftChatTemplate::render(const std::string& line) const {
    OJson rec;
    try {
        rec = parse_ordered_json(line, "record");
    } catch (const Error& e) {
        return {{}, e.what()};
    }
    if (!rec.is_object() || !rec.contains("messages") || !rec["messages"].is_array() ||
        rec["messages"].empty())
        return {{}, "'messages' is not a non-empty array"};
    const OJson& messages = rec["messages"];
    for (size_t m = 0; m < messages.size(); ++m)
        if (!messages[m].is_object() || !messages[m].contains("role") ||
            !messages[m]["role"].is_string())
            return {{}, fmt::format("message {}: expected an object with a string 'role'", m)};
    const OJson tools = rec.contains("tools") ? rec["tools"] : OJson();
    const bool with_tools = !tools.is_null();
    const ChatTemplate& t = with_tools ? tools_ : plain_;
    const jinja::Template& tmpl = with_tools ? compiled_->tools : compiled_->plain;
    auto render_upto = [&](size_t n, bool prompt) {
        const OJson part(messages.begin(), messages.begin() + std::ptrdiff_t(n));
        return tmpl.render(chat_context(t, part, tools, prompt, OJson::object()));
    };
    try {
        const jinja::Rendered all = render_upto(messages.size(), false);
        if (!all.generation_spans.empty()) return {split(all.text, all.generation_spans), "", true};
        std::vector<std::pair<size_t, size_t>> spans;
        for (size_t i = 0; i < messages.size(); ++i) {
            if (messages[i]["role"] != "assistant") continue;
            const std::string prefix = render_upto(i, true).text;
            if (all.text.compare(0, prefix.size(), prefix) != 0)
                return {{},
                        fmt::format("message {}: the template renders the conversation before it "
                                    "differently on its own, so its turn cannot be found; use a "
                                    "template with {{% generation %}} blocks",
                                    i)};
            const size_t b = std::max(prefix.size(), spans.empty() ? 0 : spans.back().second);
            size_t e = turn_end(all.text, b, stops_);
            // Where the conversation through this turn renders as a prefix of the whole, the
            // turn ends there at the latest (a template whose end-of-turn is no stop token).
            if (i + 1 < messages.size()) {
                const std::string upto = render_upto(i + 1, false).text;
                if (upto.size() > b && all.text.compare(0, upto.size(), upto) == 0)
                    e = std::min(e, upto.size());
            }
            spans.push_back({b, e == std::string::npos ? all.text.size() : e});
        }
        return {split(all.text, spans), "", true};
    } catch (const Error& e) {
        return {{}, fmt::format("{}: {}", t.where, e.what())};
    }
}

std::shared_ptr<const SftChatTemplate> load_sft_chat_template(const std::string& setting,
                                                              const std::string& tokenizer_json,
                                                              const Tokenizer& tok,
                                                              const std::string& option) {
    const fs::path beside = fs::path(tokenizer_json).parent_path() / "tokenizer_config.json";
    ChatTemplate plain, tools;
    if (setting == "model" || fs::path(setting).extension() == ".json") {
        const std::string path = setting == "model" ? beside.string() : setting;
        ETE_CHECK(fs::exists(path),
                  "{} = {}: '{}' not found (expected the tokenizer_config.json saved with the "
                  "tokenizer)",
                  option, setting, path);
        plain = read_chat_template(path, false);
        tools = read_chat_template(path, true);
    } else {
        ETE_CHECK(fs::exists(setting),
                  "{} '{}': file not found (expected \"ete\", \"model\", a tokenizer_config.json "
                  "or a Jinja template file)",
                  option, setting);
        if (fs::exists(beside))
            plain.special_tokens =
                special_tokens_of(read_json_file(beside.string()), beside.string());
        plain.source = read_file(setting);
        plain.where = setting;
        tools = plain;
    }
    std::vector<std::string> stops;
    for (int32_t id : tok.stop_ids()) stops.push_back(tok.id_to_token(id));
    if (tok.eos_id() >= 0) stops.push_back(tok.id_to_token(tok.eos_id()));
    try {
        return std::make_shared<const SftChatTemplate>(plain, tools, std::move(stops));
    } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", plain.where, e.what()));
    }
}

}  // namespace ete
