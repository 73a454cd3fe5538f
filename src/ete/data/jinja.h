// ete/data/jinja.h — a Jinja2 subset that renders Hugging Face chat templates byte for byte as
// transformers' apply_chat_template does (jinja2 3.1 in an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, loopcontrols, HF's tojson, raise_exception, strftime_now and the
// {% generation %} block of its AssistantTracker).
//
// The subset (docs/tokenizers.md lists it): text, {{ }}, comments, whitespace control (- and +);
// if/elif/else, for (tuple targets, inline if filter, else, loop.*, break/continue), set (names,
// tuples, namespace attributes, block set), macros with defaults, generation; literals, lists,
// dicts, tuples, attribute/item access and slices, arithmetic, ~, comparisons (chained), in,
// and/or/not, conditional expressions, tests, filters, str/dict methods and the globals range,
// namespace, dict, raise_exception, strftime_now. Anything else — a statement, filter, test,
// method or function outside it, or a value Jinja would print with an address — is refused with
// ete::Error "chat template line N: ..." naming it: a template is never rendered differently.
//
// A template is code from a downloaded file, so rendering is bounded (Limits): loop iterations
// and macro calls together, macro depth, and the size of the output and of any one value.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ete::jinja {

struct Program;

struct Limits {
    int64_t max_steps = 2'000'000;         // loop iterations + macro calls + items built
    int max_depth = 64;                    // nested macro calls
    size_t max_output = size_t(64) << 20;  // bytes of output, and of any one string
    size_t max_items = 1'000'000;          // items of any one list
};

struct RenderOptions {
    Limits limits;
    std::optional<std::time_t> now;  // strftime_now's time (local); default: the clock
};

struct Rendered {
    std::string text;
    // Byte ranges [begin, end) of `text` produced inside {% generation %} blocks, in order (HF's
    // AssistantTracker reports the same ranges in characters).
    std::vector<std::pair<size_t, size_t>> generation_spans;
};

class Template {
  public:
    // Lexes and parses; throws ete::Error "chat template line N: ..." on a syntax error or a
    // construct outside the subset.
    explicit Template(std::string_view source);
    ~Template();
    Template(Template&&) noexcept;
    Template& operator=(Template&&) noexcept;

    // Renders with `context`'s keys as the template's variables (an object); JSON objects keep
    // their key order, as Python dicts loaded from JSON do. Throws ete::Error "chat template line
    // N: ..." (raise_exception's message, an undefined value used, a limit, ...).
    Rendered render(const nlohmann::ordered_json& context, const RenderOptions& opt = {}) const;

  private:
    std::unique_ptr<Program> prog_;
};

}  // namespace ete::jinja
