// ete/data/jinja_filters.cpp — Jinja2 3.1's filters and tests that chat templates use
// (jinja2/filters.py, jinja2/tests.py), and tojson as Hugging Face overrides it:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "ete/core/error.h"
#include "ete/data/jinja_builtins.h"
#include "ete/data/jinja_pystr.h"
#include "ete/data/utf8.h"

namespace ete::jinja {

std::vector<std::optional<Value>> bind(const Args& args, std::vector<std::string_view> params,
                                       std::string_view fname) {
    std::vector<std::optional<Value>> out(params.size());
    ETE_CHECK(args.pos.size() <= params.size(), "{}() takes at most {} arguments ({} given)", fname,
              params.size(), args.pos.size());
    for (size_t k = 0; k < args.pos.size(); ++k) out[k] = args.pos[k];
    for (const auto& [name, v] : args.kw) {
        const auto it = std::find(params.begin(), params.end(), name);
        ETE_CHECK(it != params.end(), "{}() got an unexpected keyword argument '{}'", fname, name);
        auto& slot = out[size_t(it - params.begin())];
        ETE_CHECK(!slot, "{}() got multiple values for argument '{}'", fname, name);
        slot = v;
    }
    return out;
}

namespace {

const std::set<std::string_view, std::less<>> kFilters = {
    "abs",   "capitalize", "count",  "d",          "default",    "dictsort", "first",
    "float", "indent",     "int",    "items",      "join",       "last",     "length",
    "list",  "lower",      "map",    "reject",     "rejectattr", "replace",  "reverse",
    "round", "safe",       "select", "selectattr", "sort",       "string",   "sum",
    "title", "tojson",     "trim",   "unique",     "upper"};

const std::set<std::string_view, std::less<>> kTests = {
    "boolean", "callable", "defined",  "divisibleby", "eq",   "equalto",   "even",
    "false",   "float",    "ge",       "gt",          "in",   "integer",   "iterable",
    "le",      "lower",    "lt",       "mapping",     "ne",   "none",      "number",
    "odd",     "sameas",   "sequence", "string",      "true", "undefined", "upper",
    "==",      "!=",       "<",        "<=",          ">",    ">="};

bool opt_bool(const std::optional<Value>& v, bool dflt) {
    return v ? truthy(*v) : dflt;
}

int64_t opt_int(const std::optional<Value>& v, int64_t dflt, std::string_view what) {
    if (!v || v->type == Value::Type::None) return dflt;
    ETE_CHECK(v->is_int_like(), "{} must be an integer, not '{}'", what, type_name(*v));
    return v->as_int();
}

std::string opt_str(const std::optional<Value>& v, std::string dflt, std::string_view what) {
    if (!v) return dflt;
    ETE_CHECK(v->is_string(), "{} must be a string, not '{}'", what, type_name(*v));
    return v->s;
}

const std::string& need_str(const Value& v, std::string_view what) {
    ETE_CHECK(v.is_string(), "{} of a '{}' (expected a string)", what, type_name(v));
    return v.s;
}

// Jinja's attribute getter for map/selectattr/sort: dotted parts, each an item lookup.
Value attr_path(const Value& item, const std::string& path) {
    Value v = item;
    for (const std::string& part : py_split(path, std::string("."), -1, false)) {
        if (v.is_undefined()) break;
        const bool digits =
            !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
        v = get_item(v, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    }
    return v;
}

// The key Jinja sorts and dedups by: case-insensitive strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
    if (!case_sensitive && v.is_string()) return Value::string(py_case(v.s, CaseOp::Lower));
    return v;
}

Value length(const Value& v) {
    switch (v.type) {
        case Value::Type::Undefined:
            return Value::integer(0);
        case Value::Type::String:
            return Value::integer(int64_t(cp_length(v.s)));
        case Value::Type::List:
            return Value::integer(int64_t(v.list->items.size()));
        case Value::Type::Dict:
            return Value::integer(int64_t(v.dict->items.size()));
        default:
            ETE_CHECK(false, "object of type '{}' has no len()", type_name(v));
    }
    return {};
}

Value round_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"precision", "method"}, "round");
    const int64_t p = opt_int(a[0], 0, "round's precision");
    const std::string method = opt_str(a[1], "common", "round's method");
    ETE_CHECK(method == "common" || method == "ceil" || method == "floor",
              "round: method must be 'common', 'ceil' or 'floor'");
    ETE_CHECK(v.is_number(), "round of a '{}' (expected a number)", type_name(v));
    if (method == "common") {
        if (v.is_int_like() && p >= 0) return Value::integer(v.as_int());  // Python: round(int)
        // Python rounds the exact binary value half to even, as printf does.
        char buf[400];
        std::snprintf(buf, sizeof buf, "%.*f", int(std::clamp<int64_t>(p, 0, 300)), v.as_double());
        ETE_CHECK(p >= 0, "round: a negative precision is not supported");
        return Value::number(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, double(p));
    const double x = v.as_double() * scale;
    return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value int_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"default", "base"}, "int");
    const Value dflt = a[0] ? *a[0] : Value::integer(0);
    const int64_t base = opt_int(a[1], 10, "int's base");
    if (v.is_int_like()) return Value::integer(v.as_int());
    if (v.type == Value::Type::Float) {
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return dflt;
        return Value::integer(int64_t(v.f));
    }
    if (!v.is_string()) return dflt;
    std::string s = py_strip(v.s, std::nullopt, true, true);
    std::erase(s, '_');
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(s.c_str(), &end, int(base));
    if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::integer(int64_t(d));
    return dflt;
}

Value float_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"default"}, "float");
    const Value dflt = a[0] ? *a[0] : Value::number(0.0);
    if (v.is_number()) return Value::number(v.as_double());
    if (!v.is_string()) return dflt;
    const std::string s = py_strip(v.s, std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || s.find_first_of("xXpP") != std::string::npos) return dflt;
    return Value::number(d);
}

Value indent_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"width", "first", "blank"}, "indent");
    std::string ind(4, ' ');
    if (a[0] && a[0]->is_string())
        ind = a[0]->s;
    else if (a[0])
        ind = std::string(size_t(std::max<int64_t>(0, opt_int(a[0], 4, "indent's width"))), ' ');
    const std::string s = to_str(v) + "\n";  // Jinja's quirk for splitlines
    const std::vector<std::string> lines = py_splitlines(s, false);
    std::string rv;
    if (opt_bool(a[2], false)) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
    } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t k = 1; k < lines.size(); ++k)
            rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
    }
    return Value::string(opt_bool(a[1], false) ? ind + rv : rv);
}

Value tojson_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
    ETE_CHECK(!opt_bool(a[0], false), "tojson: ensure_ascii=True is not supported");
    JsonStyle st;
    st.indent =
        a[1] && a[1]->type != Value::Type::None ? int(opt_int(a[1], -1, "tojson's indent")) : -1;
    ETE_CHECK(!a[1] || a[1]->type == Value::Type::None || st.indent >= 0,
              "tojson: a negative indent is not supported");
    if (a[2] && a[2]->type != Value::Type::None) {
        const Value& sep = *a[2];
        ETE_CHECK(sep.type == Value::Type::List && sep.list->items.size() == 2 &&
                      sep.list->items[0].is_string() && sep.list->items[1].is_string(),
                  "tojson: separators must be a pair of strings");
        st.item_sep = sep.list->items[0].s;
        st.key_sep = sep.list->items[1].s;
        ETE_CHECK(!st.item_sep.empty() && !st.key_sep.empty(),
                  "tojson: empty separators are not supported");
    }
    st.sort_keys = opt_bool(a[3], false);
    return Value::string(to_json(v, st));
}

// select/reject (by test) and selectattr/rejectattr (by attribute and test); Jinja's
// _select_or_reject: no test name means truthiness.
Value select_filter(std::string_view name, const Value& v, const Args& args) {
    const bool by_attr = name.ends_with("attr");
    const bool keep = name.starts_with("select");
    Args rest = args;
    ETE_CHECK(rest.kw.empty(), "{}: keyword arguments are not supported", name);
    std::string attr;
    if (by_attr) {
        ETE_CHECK(!rest.pos.empty(), "{}() needs an attribute name", name);
        attr = need_str(rest.pos[0], std::string(name) + "'s attribute");
        rest.pos.erase(rest.pos.begin());
    }
    std::string test;
    if (!rest.pos.empty()) {
        test = need_str(rest.pos[0], std::string(name) + "'s test");
        rest.pos.erase(rest.pos.begin());
        ETE_CHECK(is_test(test), "{}: unknown test '{}'", name, test);
    }
    std::vector<Value> out;
    for (const Value& item : iterate(v)) {
        const Value x = by_attr ? attr_path(item, attr) : item;
        const bool pass = test.empty() ? truthy(x) : apply_test(test, x, rest);
        if (pass == keep) out.push_back(item);
    }
    return Value::iterator(std::move(out));
}

Value map_filter(const Value& v, const Args& args, const BuiltinEnv& env) {
    std::vector<Value> out;
    const Value* attr = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, x] : args.kw) {
        if (k == "attribute")
            attr = &x;
        else if (k == "default")
            dflt = &x;
    }
    if (attr) {
        ETE_CHECK(args.pos.empty() && args.kw.size() == 1u + (dflt != nullptr),
                  "map(attribute=...) takes only 'default' besides");
        const std::string path = need_str(*attr, "map's attribute");
        for (const Value& item : iterate(v)) {
            Value x = attr_path(item, path);
            out.push_back(x.is_undefined() && dflt ? *dflt : x);
        }
        return Value::iterator(std::move(out));
    }
    ETE_CHECK(!args.pos.empty(), "map() needs a filter name or attribute=");
    const std::string filter = need_str(args.pos[0], "map's filter");
    ETE_CHECK(is_filter(filter), "map: unknown filter '{}'", filter);
    Args rest{{args.pos.begin() + 1, args.pos.end()}, args.kw};
    for (const Value& item : iterate(v)) out.push_back(apply_filter(filter, item, rest, env));
    return Value::iterator(std::move(out));
}

Value sort_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"reverse", "case_sensitive", "attribute"}, "sort");
    const bool rev = opt_bool(a[0], false), cs = opt_bool(a[1], false);
    const std::string attr = opt_str(a[2], "", "sort's attribute");
    std::vector<Value> items = iterate(v);
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t k = 0; k < items.size(); ++k)
        keyed.emplace_back(sort_key(attr.empty() ? items[k] : attr_path(items[k], attr), cs), k);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return rev ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
    });
    std::vector<Value> out;
    for (const auto& kv : keyed) out.push_back(items[kv.second]);
    return Value::sequence(std::move(out));
}

Value unique_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"case_sensitive", "attribute"}, "unique");
    const bool cs = opt_bool(a[0], false);
    const std::string attr = opt_str(a[1], "", "unique's attribute");
    std::vector<Value> out, seen;
    for (const Value& item : iterate(v)) {
        const Value key = sort_key(attr.empty() ? item : attr_path(item, attr), cs);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
            seen.push_back(key);
            out.push_back(item);
        }
    }
    return Value::iterator(std::move(out));
}

Value dictsort_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"case_sensitive", "by", "reverse"}, "dictsort");
    ETE_CHECK(v.type == Value::Type::Dict, "dictsort of a '{}' (expected a dict)", type_name(v));
    const bool cs = opt_bool(a[0], false), rev = opt_bool(a[2], false);
    const std::string by = opt_str(a[1], "key", "dictsort's by");
    ETE_CHECK(by == "key" || by == "value", "dictsort: by must be 'key' or 'value'");
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.dict->items)
        pairs.push_back(Value::sequence({Value::string(k), x}, SeqKind::Tuple));
    const size_t at = by == "key" ? 0 : 1;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
        const Value kx = sort_key(x.list->items[at], cs), ky = sort_key(y.list->items[at], cs);
        return rev ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
    });
    return Value::sequence(std::move(pairs));
}

Value first_last(bool first, const Value& v) {
    const Value none = Value::undefined(first ? "No first item, sequence was empty."
                                              : "No last item, sequence was empty.");
    if (v.type == Value::Type::Iterator) {
        ETE_CHECK(first, "last of a generator (it cannot be reversed)");
        if (v.iter->pos >= v.iter->items.size()) return none;
        return v.iter->items[v.iter->pos++];
    }
    const std::vector<Value> items = iterate(v);
    if (items.empty()) return none;
    return first ? items.front() : items.back();
}

Value reverse_filter(const Value& v) {
    if (v.is_string()) {
        std::u32string cps = to_u32(v.s);
        std::reverse(cps.begin(), cps.end());
        return Value::string(to_utf8(cps));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    // reversed() of a list, tuple or dict is an iterator; of a generator, Jinja makes a list.
    if (v.type == Value::Type::Iterator) return Value::sequence(std::move(items));
    return Value::iterator(std::move(items));
}

Value join_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"d", "attribute"}, "join");
    const std::string sep = a[0] ? to_str(*a[0]) : "";
    const std::string attr = opt_str(a[1], "", "join's attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
        out += (first ? "" : sep) + to_str(attr.empty() ? item : attr_path(item, attr));
        first = false;
    }
    return Value::string(std::move(out));
}

Value sum_filter(const Value& v, const Args& args) {
    const auto a = bind(args, {"attribute", "start"}, "sum");
    const std::string attr = opt_str(a[0], "", "sum's attribute");
    Value acc = a[1] ? *a[1] : Value::integer(0);
    for (const Value& item : iterate(v)) {
        const Value x = attr.empty() ? item : attr_path(item, attr);
        ETE_CHECK(acc.is_number() && x.is_number(), "sum of a '{}' (expected numbers)",
                  type_name(x));
        if (acc.is_int_like() && x.is_int_like()) {
            int64_t r = 0;
            ETE_CHECK(!__builtin_add_overflow(acc.as_int(), x.as_int(), &r), "integer overflow");
            acc = Value::integer(r);
        } else {
            acc = Value::number(acc.as_double() + x.as_double());
        }
    }
    return acc;
}

Value string_case(const Value& v, CaseOp op) {
    return Value::string(py_case(to_str(v), op));
}

}  // namespace

bool is_filter(std::string_view name) {
    return kFilters.count(name) > 0;
}
bool is_test(std::string_view name) {
    return kTests.count(name) > 0;
}

Value apply_filter(std::string_view name, const Value& v, const Args& args, const BuiltinEnv& env) {
    const auto no_args = [&] {
        ETE_CHECK(args.pos.empty() && args.kw.empty(), "{} takes no arguments", name);
    };
    if (name == "default" || name == "d") {
        const auto a = bind(args, {"default_value", "boolean"}, "default");
        const bool use = v.is_undefined() || (opt_bool(a[1], false) && !truthy(v));
        return use ? (a[0] ? *a[0] : Value::string("")) : v;
    }
    if (name == "length" || name == "count") return no_args(), length(v);
    if (name == "tojson") return tojson_filter(v, args);
    if (name == "map") return map_filter(v, args, env);
    if (name.starts_with("select") || name.starts_with("reject"))
        return select_filter(name, v, args);
    if (name == "join") return join_filter(v, args);
    if (name == "trim") {
        const auto a = bind(args, {"chars"}, "trim");
        std::optional<std::string> chars;
        if (a[0] && a[0]->type != Value::Type::None) chars = opt_str(a[0], "", "trim's chars");
        return Value::string(py_strip(to_str(v), chars, true, true));
    }
    if (name == "replace") {
        const auto a = bind(args, {"old", "new", "count"}, "replace");
        ETE_CHECK(a[0] && a[1], "replace() needs old and new");
        return Value::string(py_replace(to_str(v), to_str(*a[0]), to_str(*a[1]),
                                        opt_int(a[2], -1, "replace's count")));
    }
    if (name == "items") {
        no_args();
        if (v.is_undefined()) return Value::iterator({});
        ETE_CHECK(v.type == Value::Type::Dict, "Can only get item pairs from a mapping.");
        std::vector<Value> pairs;
        for (const auto& [k, x] : v.dict->items)
            pairs.push_back(Value::sequence({Value::string(k), x}, SeqKind::Tuple));
        return Value::iterator(std::move(pairs));
    }
    if (name == "list") return no_args(), Value::sequence(iterate(v));
    if (name == "first" || name == "last") return no_args(), first_last(name == "first", v);
    if (name == "string") return no_args(), Value::string(to_str(v));
    if (name == "safe") return no_args(), Value::string(to_str(v));
    if (name == "lower") return no_args(), string_case(v, CaseOp::Lower);
    if (name == "upper") return no_args(), string_case(v, CaseOp::Upper);
    if (name == "capitalize") return no_args(), string_case(v, CaseOp::Capitalize);
    if (name == "title") return no_args(), string_case(v, CaseOp::JinjaTitle);
    if (name == "int") return int_filter(v, args);
    if (name == "float") return float_filter(v, args);
    if (name == "round") return round_filter(v, args);
    if (name == "abs") {
        no_args();
        ETE_CHECK(v.is_number(), "abs of a '{}' (expected a number)", type_name(v));
        if (v.type == Value::Type::Float) return Value::number(std::fabs(v.f));
        ETE_CHECK(v.as_int() != INT64_MIN, "integer overflow");
        return Value::integer(std::abs(v.as_int()));
    }
    if (name == "indent") return indent_filter(v, args);
    if (name == "sort") return sort_filter(v, args);
    if (name == "unique") return unique_filter(v, args);
    if (name == "dictsort") return dictsort_filter(v, args);
    if (name == "reverse") return no_args(), reverse_filter(v);
    if (name == "sum") return sum_filter(v, args);
    ETE_CHECK(false, "unknown filter '{}'", name);
    return {};
}

bool apply_test(std::string_view name, const Value& v, const Args& args) {
    using T = Value::Type;
    const auto arg = [&]() -> const Value& {
        ETE_CHECK(args.pos.size() == 1 && args.kw.empty(), "test '{}' takes one argument", name);
        return args.pos[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.type == T::None;
    if (name == "boolean") return v.type == T::Bool;
    if (name == "true") return v.type == T::Bool && v.b;
    if (name == "false") return v.type == T::Bool && !v.b;
    if (name == "integer") return v.type == T::Int;
    if (name == "float") return v.type == T::Float;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.type == T::Dict;
    if (name == "callable") return v.type == T::Callable;
    if (name == "iterable")
        return v.is_undefined() || v.is_string() || v.type == T::List || v.type == T::Dict ||
               v.type == T::Iterator;
    if (name == "sequence")
        return v.is_undefined() || v.is_string() || v.type == T::List || v.type == T::Dict;
    if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
    if (name == "ne" || name == "!=") return !equal(v, arg());
    if (name == "lt" || name == "<") return compare(v, arg()) < 0;
    if (name == "le" || name == "<=") return compare(v, arg()) <= 0;
    if (name == "gt" || name == ">") return compare(v, arg()) > 0;
    if (name == "ge" || name == ">=") return compare(v, arg()) >= 0;
    if (name == "sameas") {
        const Value& o = arg();
        if (v.type != o.type) return false;
        if (v.type == T::None || v.type == T::Undefined) return true;
        if (v.type == T::Bool) return v.b == o.b;
        return (v.list && v.list == o.list) || (v.dict && v.dict == o.dict);
    }
    if (name == "in") {
        const Value& c = arg();
        if (c.is_string()) return c.s.find(need_str(v, "'in <string>'")) != std::string::npos;
        if (c.type == T::Dict) return v.is_string() && c.dict->find(v.s);
        for (const Value& x : iterate(c))
            if (equal(x, v)) return true;
        return false;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
        ETE_CHECK(v.is_int_like(), "test '{}' of a '{}' (expected an integer)", name, type_name(v));
        const int64_t d = name == "divisibleby" ? arg().as_int() : 2;
        ETE_CHECK(d != 0, "divisibleby 0");
        const int64_t m = ((v.as_int() % d) + d) % d;
        return name == "odd" ? m == 1 : m == 0;
    }
    if (name == "lower" || name == "upper") {
        const std::string s = to_str(v);
        return s == py_case(s, name == "lower" ? CaseOp::Lower : CaseOp::Upper) &&
               s != py_case(s, name == "lower" ? CaseOp::Upper : CaseOp::Lower);
    }
    ETE_CHECK(false, "unknown test '{}'", name);
    return false;
}

}  // namespace ete::jinja
