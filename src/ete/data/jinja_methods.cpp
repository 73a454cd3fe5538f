// ete/data/jinja_methods.cpp — attribute and item access as Jinja's sandboxed environment does
// it, the Python str/dict/list methods templates call, and the global functions (range,
// namespace, dict, and Hugging Face's raise_exception and strftime_now).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "ete/core/error.h"
#include "ete/data/jinja_builtins.h"
#include "ete/data/jinja_pystr.h"
#include "ete/data/unicode.h"

namespace ete::jinja {
namespace {

using T = Value::Type;

constexpr std::string_view kStrMethods[] = {
    "startswith", "endswith", "split",      "rsplit",  "strip",   "lstrip",    "rstrip", "lower",
    "upper",      "title",    "capitalize", "replace", "find",    "rfind",     "count",  "join",
    "format",     "isdigit",  "isalpha",    "isalnum", "isspace", "splitlines"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get"};
constexpr std::string_view kListMethods[] = {"index", "count"};
constexpr std::string_view kMutating[] = {"append", "extend",  "insert",     "pop",
                                          "remove", "clear",   "sort",       "reverse",
                                          "update", "popitem", "setdefault", "copy"};

template <size_t N>
bool in(const std::string_view (&names)[N], std::string_view name) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

std::string describe(const Value& v) {
    return type_name(v) + " object";
}

// Python's slice.indices for a sequence of n.
std::vector<size_t> slice_indices(int64_t n, const Value& start, const Value& stop,
                                  const Value& step) {
    const auto given = [](const Value& v) { return !v.is_undefined() && v.type != T::None; };
    const auto as_int = [](const Value& v, std::string_view what) {
        ETE_CHECK(v.is_int_like(), "slice {} must be an integer, not '{}'", what, type_name(v));
        return v.as_int();
    };
    const int64_t st = given(step) ? as_int(step, "step") : 1;
    ETE_CHECK(st != 0, "slice step cannot be zero");
    const auto clamp = [&](const Value& v, int64_t dflt, std::string_view what) {
        if (!given(v)) return dflt;
        int64_t x = as_int(v, what);
        if (x < 0) x += n;
        if (st > 0) return std::clamp<int64_t>(x, 0, n);
        return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(start, st > 0 ? 0 : n - 1, "start");
    const int64_t e = clamp(stop, st > 0 ? n : -1, "stop");
    std::vector<size_t> out;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) out.push_back(size_t(k));
    return out;
}

std::optional<std::string> opt_string(const std::optional<Value>& v, std::string_view what) {
    if (!v || v->type == T::None) return std::nullopt;
    ETE_CHECK(v->is_string(), "{} must be a string or None, not '{}'", what, type_name(*v));
    return v->s;
}

bool prefix_match(const Value& self, const Value& arg, bool start) {
    const auto one = [&](const Value& p) {
        ETE_CHECK(p.is_string(), "{}with's argument must be a string or tuple of strings",
                  start ? "starts" : "ends");
        return start ? self.s.starts_with(p.s) : self.s.ends_with(p.s);
    };
    if (arg.type == T::List && arg.list->kind == SeqKind::Tuple)
        return std::any_of(arg.list->items.begin(), arg.list->items.end(), one);
    return one(arg);
}

bool all_of_category(const std::string& s, bool (*pred)(char32_t)) {
    const std::u32string cps = to_u32(s);
    return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

bool is_alpha(char32_t c) {
    using unicode::Category;
    const Category k = unicode::category(c);
    return k == Category::Lu || k == Category::Ll || k == Category::Lt || k == Category::Lm ||
           k == Category::Lo;
}
bool is_digit(char32_t c) {
    return unicode::category(c) == unicode::Category::Nd;
}

// str.format with automatic ({}), numbered ({0}) or named ({x}) fields, no format specs.
std::string str_format(const std::string& fmt_s, const Args& args) {
    std::string out;
    size_t auto_index = 0;
    for (size_t k = 0; k < fmt_s.size(); ++k) {
        const char c = fmt_s[k];
        if ((c == '{' || c == '}') && k + 1 < fmt_s.size() && fmt_s[k + 1] == c) {
            out += c;
            ++k;
            continue;
        }
        ETE_CHECK(c != '}', "format: single '}}' in the format string");
        if (c != '{') {
            out += c;
            continue;
        }
        const size_t close = fmt_s.find('}', k);
        ETE_CHECK(close != std::string::npos, "format: unclosed '{{' in the format string");
        const std::string field = fmt_s.substr(k + 1, close - k - 1);
        ETE_CHECK(field.find_first_of(":!.[") == std::string::npos,
                  "format: field '{{{}}}' with a format spec or conversion is not supported",
                  field);
        const Value* v = nullptr;
        if (field.empty() || field.find_first_not_of("0123456789") == std::string::npos) {
            const size_t at = field.empty() ? auto_index++ : std::stoul(field);
            ETE_CHECK(at < args.pos.size(), "format: no argument {}", at);
            v = &args.pos[at];
        } else {
            for (const auto& [name, x] : args.kw)
                if (name == field) v = &x;
            ETE_CHECK(v, "format: no argument '{}'", field);
        }
        out += to_str(*v);
        k = close;
    }
    return out;
}

Value list_of_strings(const std::vector<std::string>& parts) {
    std::vector<Value> out;
    for (const std::string& p : parts) out.push_back(Value::string(p));
    return Value::sequence(std::move(out));
}

Value str_method(const Value& self, std::string_view name, const Args& args) {
    const std::string& s = self.s;
    if (name == "startswith" || name == "endswith") {
        ETE_CHECK(args.pos.size() == 1 && args.kw.empty(), "{}() takes one argument here", name);
        return Value::boolean(prefix_match(self, args.pos[0], name == "startswith"));
    }
    if (name == "split" || name == "rsplit") {
        const auto a = bind(args, {"sep", "maxsplit"}, name);
        const int64_t maxsplit = a[1] ? a[1]->as_int() : -1;
        return list_of_strings(py_split(s, opt_string(a[0], "sep"), maxsplit, name == "rsplit"));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const auto a = bind(args, {"chars"}, name);
        return Value::string(
            py_strip(s, opt_string(a[0], "chars"), name != "rstrip", name != "lstrip"));
    }
    if (name == "lower" || name == "upper" || name == "title" || name == "capitalize") {
        bind(args, {}, name);
        const CaseOp op = name == "lower"   ? CaseOp::Lower
                          : name == "upper" ? CaseOp::Upper
                          : name == "title" ? CaseOp::PyTitle
                                            : CaseOp::Capitalize;
        return Value::string(py_case(s, op));
    }
    if (name == "replace") {
        const auto a = bind(args, {"old", "new", "count"}, name);
        ETE_CHECK(a[0] && a[1] && a[0]->is_string() && a[1]->is_string(),
                  "replace() needs two strings");
        return Value::string(py_replace(s, a[0]->s, a[1]->s, a[2] ? a[2]->as_int() : -1));
    }
    if (name == "find" || name == "rfind" || name == "count") {
        ETE_CHECK(args.pos.size() == 1 && args.pos[0].is_string() && args.kw.empty(),
                  "{}() takes one string here", name);
        const std::string& sub = args.pos[0].s;
        if (name == "count")
            return Value::integer(sub.empty() ? int64_t(cp_length(s)) + 1
                                              : int64_t(py_split(s, sub, -1, false).size() - 1));
        const size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
        return Value::integer(at == std::string::npos ? -1 : int64_t(cp_length(s.substr(0, at))));
    }
    if (name == "join") {
        ETE_CHECK(args.pos.size() == 1 && args.kw.empty(), "join() takes one argument");
        std::string out;
        bool first = true;
        for (const Value& x : iterate(args.pos[0])) {
            ETE_CHECK(x.is_string(), "join: sequence item of type '{}' (expected str)",
                      type_name(x));
            out += (first ? "" : s) + x.s;
            first = false;
        }
        return Value::string(std::move(out));
    }
    if (name == "format") return Value::string(str_format(s, args));
    if (name == "splitlines") {
        const auto a = bind(args, {"keepends"}, name);
        return list_of_strings(py_splitlines(s, a[0] && truthy(*a[0])));
    }
    bind(args, {}, name);
    if (name == "isdigit") return Value::boolean(all_of_category(s, is_digit));
    if (name == "isalpha") return Value::boolean(all_of_category(s, is_alpha));
    if (name == "isalnum")
        return Value::boolean(
            all_of_category(s, [](char32_t c) { return is_alpha(c) || is_digit(c); }));
    return Value::boolean(all_of_category(s, py_isspace));  // isspace
}

Value dict_method(const Value& self, std::string_view name, const Args& args) {
    if (name == "get") {
        const auto a = bind(args, {"key", "default"}, "get");
        ETE_CHECK(a[0].has_value(), "get() needs a key");
        const Value* v = a[0]->is_string() ? self.dict->find(a[0]->s) : nullptr;
        return v ? *v : (a[1] ? *a[1] : Value::none());
    }
    bind(args, {}, name);
    std::vector<Value> out;
    for (const auto& [k, v] : self.dict->items) {
        if (name == "keys")
            out.push_back(Value::string(k));
        else if (name == "values")
            out.push_back(v);
        else
            out.push_back(Value::sequence({Value::string(k), v}, SeqKind::Tuple));
    }
    return Value::sequence(std::move(out), SeqKind::View);
}

}  // namespace

bool is_method(const Value& self, std::string_view name) {
    if (self.type == T::String) return in(kStrMethods, name);
    if (self.type == T::Dict) return in(kDictMethods, name) || in(kMutating, name);
    if (self.type == T::List) return in(kListMethods, name) || in(kMutating, name);
    return false;
}

Value call_method(const Value& self, std::string_view name, const Args& args, const BuiltinEnv&) {
    ETE_CHECK(!in(kMutating, name),
              "access to the method '{}' of a {} is refused (Hugging Face renders templates in "
              "an immutable sandbox)",
              name, type_name(self));
    if (self.type == T::String) return str_method(self, name, args);
    if (self.type == T::Dict) return dict_method(self, name, args);
    ETE_CHECK(args.pos.size() == 1 && args.kw.empty(), "{}() takes one argument", name);
    const auto& items = self.list->items;
    if (name == "count")
        return Value::integer(std::count_if(items.begin(), items.end(),
                                            [&](const Value& x) { return equal(x, args.pos[0]); }));
    for (size_t k = 0; k < items.size(); ++k)
        if (equal(items[k], args.pos[0])) return Value::integer(int64_t(k));
    ETE_CHECK(false, "{} is not in list", repr(args.pos[0]));
    return {};
}

Value get_attr(const Value& obj, const std::string& name) {
    if (is_method(obj, name)) return Value::method(name, obj);
    if (obj.type == T::Dict || obj.type == T::Namespace) {
        if (const Value* v = obj.dict->find(name)) return *v;
    }
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", describe(obj), name));
}

Value get_item(const Value& obj, const Value& key) {
    if (obj.type == T::Dict && key.is_string()) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
    }
    if ((obj.type == T::List || obj.type == T::String) && key.is_int_like()) {
        const int64_t n =
            obj.type == T::List ? int64_t(obj.list->items.size()) : int64_t(cp_length(obj.s));
        const int64_t k = key.as_int() < 0 ? key.as_int() + n : key.as_int();
        if (k >= 0 && k < n) {
            if (obj.type == T::List) return obj.list->items[size_t(k)];
            const std::u32string cps = to_u32(obj.s);
            return Value::string(to_utf8(std::u32string_view(cps).substr(size_t(k), 1)));
        }
        return Value::undefined(fmt::format("'{}' has no element {}", describe(obj), key.as_int()));
    }
    if (key.is_string()) return get_attr(obj, key.s);  // Jinja falls back to the attribute
    return Value::undefined(fmt::format("'{}' has no element {}", describe(obj), repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    if (obj.type == T::String) {
        const std::u32string cps = to_u32(obj.s);
        std::u32string out;
        for (size_t k : slice_indices(int64_t(cps.size()), start, stop, step)) out += cps[k];
        return Value::string(to_utf8(out));
    }
    if (obj.type == T::List && obj.list->kind != SeqKind::View) {
        std::vector<Value> out;
        for (size_t k : slice_indices(int64_t(obj.list->items.size()), start, stop, step))
            out.push_back(obj.list->items[k]);
        return Value::sequence(std::move(out), obj.list->kind);
    }
    return Value::undefined(fmt::format("'{}' cannot be sliced", describe(obj)));
}

bool is_global_function(std::string_view name) {
    return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
           name == "strftime_now";
}

Value call_global(std::string_view name, const Args& args, const BuiltinEnv& env) {
    if (name == "raise_exception") {
        const auto a = bind(args, {"message"}, name);
        std::string msg = a[0] ? to_str(*a[0]) : "";
        msg = py_replace(msg, "\n", "\\n", -1);
        ETE_CHECK(false, "raise_exception: {}", msg);
    }
    if (name == "namespace" || name == "dict") {
        auto d = std::make_shared<DictObj>();
        ETE_CHECK(args.pos.size() <= 1, "{}() takes at most one positional argument", name);
        if (!args.pos.empty()) {
            ETE_CHECK(args.pos[0].type == T::Dict, "{}() of a '{}' (expected a dict)", name,
                      type_name(args.pos[0]));
            *d = *args.pos[0].dict;
        }
        for (const auto& [k, v] : args.kw) d->set(k, v);
        return name == "dict" ? Value::mapping(d) : Value::namespace_(d);
    }
    if (name == "range") {
        ETE_CHECK(!args.pos.empty() && args.pos.size() <= 3 && args.kw.empty(),
                  "range() takes 1 to 3 integers");
        for (const Value& v : args.pos)
            ETE_CHECK(v.is_int_like(), "range() of a '{}' (expected an integer)", type_name(v));
        const int64_t a = args.pos.size() > 1 ? args.pos[0].as_int() : 0;
        const int64_t b = args.pos.size() > 1 ? args.pos[1].as_int() : args.pos[0].as_int();
        const int64_t st = args.pos.size() > 2 ? args.pos[2].as_int() : 1;
        ETE_CHECK(st != 0, "range() step must not be zero");
        const int64_t n =
            st > 0 ? (b > a ? (b - a + st - 1) / st : 0) : (a > b ? (a - b - st - 1) / -st : 0);
        env.count_steps(size_t(n));  // a huge range is a runaway template
        ETE_CHECK(uint64_t(n) <= env.max_items, "a list of more than {} items", env.max_items);
        std::vector<Value> out;
        for (int64_t k = 0; k < n; ++k) out.push_back(Value::integer(a + k * st));
        return Value::sequence(std::move(out), SeqKind::View);
    }
    if (name == "strftime_now") {
        const auto a = bind(args, {"format"}, name);
        ETE_CHECK(a[0] && a[0]->is_string(), "strftime_now() needs a format string");
        std::tm tm{};
        const std::time_t now = env.now;
        localtime_r(&now, &tm);
        char buf[512];
        const size_t n = std::strftime(buf, sizeof buf, a[0]->s.c_str(), &tm);
        ETE_CHECK(n > 0 || a[0]->s.empty(), "strftime_now: format '{}' gives no text", a[0]->s);
        return Value::string(std::string(buf, n));
    }
    ETE_CHECK(false, "'{}' is not a function", name);
    return {};
}

}  // namespace ete::jinja
