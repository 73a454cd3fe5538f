// tests/data/jinja_test.cpp — the chat-template interpreter (data/jinja.h) against Jinja2 3.1.2
// in Hugging Face's environment: construct-level goldens and real chat templates rendered by
// tools/gen_jinja_goldens.py (tests/data/jinja/), byte for byte with the {% generation %} spans;
// constructs outside the subset refused by name; hostile templates stopped by the limits.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ete/core/error.h"
#include "ete/data/jinja.h"

namespace ete::jinja {
namespace {

using Json = nlohmann::ordered_json;
const std::string kDir = ETE_SOURCE_DIR "/tests/data/jinja/";

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

Json load(const std::string& name) {
    return Json::parse(slurp(kDir + name));
}

// Renders, or returns the error message prefixed by "ERROR: ".
struct Outcome {
    bool ok = false;
    Rendered rendered;
    std::string error;
};

Outcome attempt(const std::string& source, const Json& context, std::time_t now) {
    Outcome o;
    try {
        RenderOptions opt;
        opt.now = now;
        o.rendered = Template(source).render(context, opt);
        o.ok = true;
    } catch (const Error& e) {
        o.error = e.what();
    }
    return o;
}

// One golden: the expected text and spans, or an error (raise_exception's message in it).
void check_case(const std::string& label, const std::string& source, const Json& context,
                const Json& c, std::time_t now) {
    SCOPED_TRACE(label);
    const Outcome o = attempt(source, context, now);
    if (c.contains("expected") && !c.value("ete_refuses", false)) {
        ASSERT_TRUE(o.ok) << o.error;
        EXPECT_EQ(o.rendered.text, c["expected"].get<std::string>());
        std::vector<std::pair<size_t, size_t>> spans;
        for (const auto& s : c.value("spans", Json::array()))
            spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
        EXPECT_EQ(o.rendered.generation_spans, spans);
        return;
    }
    ASSERT_FALSE(o.ok) << "rendered " << o.rendered.text << " where Jinja2 gave "
                       << c.value("error", std::string("an address"));
    EXPECT_EQ(o.error.find('\n'), std::string::npos) << o.error;
    EXPECT_EQ(o.error.rfind("chat template line ", 0), 0u) << o.error;
    if (c.value("raised", false)) {
        const std::string msg = c["error"].get<std::string>().substr(strlen("TemplateError: "));
        EXPECT_NE(o.error.find("raise_exception: " + msg), std::string::npos) << o.error;
    }
}

TEST(Jinja, ConstructGoldensMatchJinja2) {
    const Json g = load("constructs.json");
    ASSERT_GE(g["cases"].size(), 80u);
    for (const Json& c : g["cases"])
        check_case(c["name"].get<std::string>(), c["template"].get<std::string>(), c["context"], c,
                   g["now"].get<std::time_t>());
}

TEST(Jinja, RealChatTemplatesMatchJinja2) {
    const Json g = load("real_templates.json");
    ASSERT_GE(g["cases"].size(), 250u);
    size_t rendered = 0, raised = 0;
    for (const Json& c : g["cases"]) {
        const std::string name = c["template"].get<std::string>();
        const Json& t = g["templates"][name];
        Json context = {{"messages", g["conversations"][c["conversation"].get<std::string>()]},
                        {"tools", c["tools"].get<bool>() ? g["tools"] : Json()},
                        {"documents", nullptr},
                        {"add_generation_prompt", c["add_generation_prompt"]}};
        for (const auto& [k, v] : t["special_tokens"].items()) context[k] = v;
        for (const auto& [k, v] : c["extra"].items()) context[k] = v;
        const std::string label =
            fmt::format("{} / {} / gen={} {}", name, c["conversation"].get<std::string>(),
                        c["add_generation_prompt"].get<bool>(), c["extra"].dump());
        check_case(label, slurp(kDir + t["file"].get<std::string>()), context, c,
                   g["now"].get<std::time_t>());
        rendered += c.contains("expected");
        raised += c.value("raised", false);
    }
    EXPECT_GE(rendered, 200u);
    EXPECT_GE(raised, 10u);  // Gemma's alternation, Llama's single tool call, Mistral's ids, ...
}

// A construct outside the subset is refused naming it and its line, never rendered otherwise.
TEST(Jinja, RefusesConstructsOutsideTheSubsetByName) {
    const std::pair<std::string, std::string> cases[] = {
        {"{% include 'x.html' %}", "line 1: unsupported statement 'include'"},
        {"a\n{% raw %}{{ x }}{% endraw %}", "line 2: unsupported statement 'raw'"},
        {"{% filter upper %}x{% endfilter %}", "unsupported statement 'filter'"},
        {"{% macro m() %}{% endmacro %}{% call m() %}{% endcall %}",
         "unsupported statement 'call'"},
        {"{% extends 'base' %}", "unsupported statement 'extends'"},
        {"{% with a = 1 %}{% endwith %}", "unsupported statement 'with'"},
        {"{% do x %}", "unsupported statement 'do'"},
        {"{% for x in y recursive %}{% endfor %}", "unsupported 'recursive' for loop"},
        {"\n\n{{ x|wordwrap }}", "line 3: unknown filter 'wordwrap'"},
        {"{{ x is escaped }}", "unknown test 'escaped'"},
        {"{% set x | upper %}a{% endset %}", "unsupported filtered block 'set'"},
        {"{{ f(*xs) }}", "unsupported '*args'"},
        {"{{ '%s' % 1 }}", "string formatting with '%' is not supported"},
        {"{{ 'Été'|upper }}", "upper() of text with the non-ASCII letter U+00C9"},
        {"{{ 'x'|tojson(ensure_ascii=true) }}", "ensure_ascii=True is not supported"},
        {"{{ [1]|map('upper') }}", "printing a generator"},
        {"{{ {'a': 1}.keys() }}", "printing a dict view"},
        {"{{ range }}", "printing the function 'range'"},
        {"{{ '\\N{BULLET}' }}", "unsupported string escape"},
        {"{{ 'a'.zfill(3) }}", "'str object' has no attribute 'zfill'"},
        {"{% break %}", "'break' outside a for loop"},
        {"{% endfor %}", "unexpected 'endfor'"},
        {"{% set xs = [] %}{{ xs.append(1) }}",
         "access to the method 'append' of a list is refused"},
        {"{{ loop.cycle('a') }}", "'loop' is undefined"},
    };
    for (const auto& [source, expected] : cases) {
        const Outcome o = attempt(source, Json::object(), 0);
        EXPECT_FALSE(o.ok) << source;
        EXPECT_NE(o.error.find(expected), std::string::npos) << source << " -> " << o.error;
        EXPECT_EQ(o.error.rfind("chat template line ", 0), 0u) << o.error;
    }
}

TEST(Jinja, ErrorsNameTheLine) {
    const Outcome o =
        attempt("{% for m in messages %}\n{{ m.content }}\n{{ m.content + 1 }}\n{% endfor %}",
                Json{{"messages", Json::array({{{"content", "x"}}})}}, 0);
    ASSERT_FALSE(o.ok);
    EXPECT_EQ(o.error, "chat template line 3: unsupported operand type(s) for +: 'str' and 'int'");
    const Outcome u =
        attempt("\n{{ messages[0].x.y }}", Json{{"messages", Json::array({Json::object()})}}, 0);
    EXPECT_EQ(u.error, "chat template line 2: 'dict object' has no attribute 'x'");
}

// Hostile templates end quickly with a clear error instead of running away.
// Each kind of hostile template stops at its limit with an error naming it. The limits are the
// defaults scaled down 100x (the same checks; what the defaults are is asserted first), so the
// sanitizer build does not spend its time building 64 MiB strings.
TEST(Jinja, HostileTemplatesHitTheLimits) {
    const Limits d;
    EXPECT_EQ(d.max_steps, 2'000'000);
    EXPECT_EQ(d.max_depth, 64);
    EXPECT_EQ(d.max_output, size_t(64) << 20);
    EXPECT_EQ(d.max_items, size_t(1'000'000));
    RenderOptions opt;
    opt.now = 0;
    opt.limits.max_steps = 20'000;
    opt.limits.max_output = size_t(1) << 20;
    opt.limits.max_items = 10'000;
    const std::pair<std::string, std::string> cases[] = {
        {"{% for i in range(1000000000) %}{% endfor %}", "more than 20000 loop iterations"},
        {"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
         "more than 20000 loop iterations"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
         "macro calls nested deeper than 64 ('f')"},
        {"{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
         "{{ f(60) }}",
         "more than 20000 loop iterations, macro calls"},
        {"{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}{{ ns.s }}",
         "a string of more than 1048576 bytes"},
        {"{{ 'x' * 100000000000 }}", "a string of more than 1048576 bytes"},
        {"{% for i in range(300) %}{{ 'y' * 30000 }}{% endfor %}", "output of more than"},
        {"{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
         "nested deeper than 200 levels"},
        {"{% set xs = [1] %}{% set ns = namespace(l=xs) %}{% for i in range(64) %}"
         "{% set ns.l = ns.l + ns.l %}{% endfor %}",
         "a list of more than 10000 items"},
    };
    for (const auto& [source, expected] : cases) {
        std::string error = "<no error>";
        try {
            Template(source).render(Json::object(), opt);
        } catch (const Error& e) {
            error = e.what();
        }
        EXPECT_NE(error.find(expected), std::string::npos) << source.substr(0, 80) << ": " << error;
    }
}

TEST(Jinja, LimitsAreConfigurable) {
    RenderOptions opt;
    opt.limits.max_steps = 20;  // range(n) counts its n items, the loop its n iterations
    const Template t("{% for i in range(n) %}{{ i }}{% endfor %}");
    EXPECT_EQ(t.render(Json{{"n", 10}}, opt).text, "0123456789");
    EXPECT_THROW(t.render(Json{{"n", 11}}, opt), Error);
}

}  // namespace
}  // namespace ete::jinja
