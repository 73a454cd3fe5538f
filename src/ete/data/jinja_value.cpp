// ete/data/jinja_value.cpp — Python semantics of the interpreter's values (jinja_value.h).
#include "ete/data/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "ete/core/error.h"
#include "ete/data/jinja_pystr.h"

namespace ete::jinja {

const Value* DictObj::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

void DictObj::set(const std::string& key, Value v) {
    for (auto& [k, old] : items) {
        if (k == key) {
            old = std::move(v);
            return;
        }
    }
    items.emplace_back(key, std::move(v));
}

Value Value::sequence(std::vector<Value> items, SeqKind kind) {
    Value v = with_type(Type::List);
    v.list = std::make_shared<ListObj>(ListObj{std::move(items), kind});
    return v;
}

Value Value::mapping(std::shared_ptr<DictObj> d) {
    Value v = with_type(Type::Dict);
    v.dict = std::move(d);
    return v;
}

Value Value::namespace_(std::shared_ptr<DictObj> attrs) {
    Value v = with_type(Type::Namespace);
    v.dict = std::move(attrs);
    return v;
}

Value Value::iterator(std::vector<Value> items) {
    Value v = with_type(Type::Iterator);
    v.iter = std::make_shared<IterObj>(IterObj{std::move(items), 0});
    return v;
}

Value Value::callable(std::string name, const MacroStmt* macro) {
    Value v = with_type(Type::Callable);
    v.fn = std::make_shared<CallableObj>(CallableObj{std::move(name), nullptr, macro});
    return v;
}

Value Value::method(std::string name, const Value& self) {
    Value v = with_type(Type::Callable);
    v.fn = std::make_shared<CallableObj>(
        CallableObj{std::move(name), std::make_shared<Value>(self), nullptr});
    return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
    using T = nlohmann::ordered_json::value_t;
    switch (j.type()) {
        case T::null:
            return none();
        case T::boolean:
            return boolean(j.get<bool>());
        case T::number_integer:
            return integer(j.get<int64_t>());
        case T::number_unsigned: {
            const uint64_t u = j.get<uint64_t>();
            ETE_CHECK(u <= uint64_t(INT64_MAX), "integer {} is out of range (at most {})", u,
                      INT64_MAX);
            return integer(int64_t(u));
        }
        case T::number_float:
            return number(j.get<double>());
        case T::string:
            return string(j.get<std::string>());
        case T::array: {
            std::vector<Value> items;
            items.reserve(j.size());
            for (const auto& e : j) items.push_back(from_json(e));
            return sequence(std::move(items));
        }
        case T::object: {
            auto d = std::make_shared<DictObj>();
            for (const auto& [k, e] : j.items()) d->items.emplace_back(k, from_json(e));
            return mapping(std::move(d));
        }
        default:
            ETE_CHECK(false, "JSON value of type {} cannot be a template value", j.type_name());
    }
    return {};
}

std::string type_name(const Value& v) {
    using T = Value::Type;
    switch (v.type) {
        case T::Undefined:
            return "Undefined";
        case T::None:
            return "NoneType";
        case T::Bool:
            return "bool";
        case T::Int:
            return "int";
        case T::Float:
            return "float";
        case T::String:
            return "str";
        case T::List:
            return v.list->kind == SeqKind::Tuple  ? "tuple"
                   : v.list->kind == SeqKind::View ? "view"
                                                   : "list";
        case T::Dict:
            return "dict";
        case T::Namespace:
            return "Namespace";
        case T::Iterator:
            return "generator";
        case T::Callable:
            return v.fn->macro ? "Macro" : "function";
    }
    return "?";
}

bool truthy(const Value& v) {
    using T = Value::Type;
    switch (v.type) {
        case T::Undefined:
        case T::None:
            return false;
        case T::Bool:
            return v.b;
        case T::Int:
            return v.i != 0;
        case T::Float:
            return v.f != 0;
        case T::String:
            return !v.s.empty();
        case T::List:
            return !v.list->items.empty();
        case T::Dict:
            return !v.dict->items.empty();
        default:
            return true;  // namespaces, generators, callables
    }
}

bool equal(const Value& a, const Value& b) {
    using T = Value::Type;
    if (a.is_number() && b.is_number()) {
        if (a.type == T::Float || b.type == T::Float) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.type != b.type) return false;
    switch (a.type) {
        case T::Undefined:
        case T::None:
            return true;
        case T::String:
            return a.s == b.s;
        case T::List: {
            if ((a.list->kind == SeqKind::Tuple) != (b.list->kind == SeqKind::Tuple)) return false;
            const auto &x = a.list->items, &y = b.list->items;
            if (x.size() != y.size()) return false;
            for (size_t k = 0; k < x.size(); ++k)
                if (!equal(x[k], y[k])) return false;
            return true;
        }
        case T::Dict: {
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto& [k, v] : a.dict->items) {
                const Value* w = b.dict->find(k);
                if (!w || !equal(v, *w)) return false;
            }
            return true;
        }
        case T::Namespace:
            return a.dict == b.dict;
        case T::Iterator:
            return a.iter == b.iter;
        default:
            return a.fn == b.fn;
    }
}

int compare(const Value& a, const Value& b) {
    using T = Value::Type;
    if (a.is_number() && b.is_number()) {
        if (a.type == T::Float || b.type == T::Float) {
            const double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : (x > y ? 1 : 0);
        }
        return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) return a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
    if (a.type == T::List && b.type == T::List && a.list->kind == b.list->kind &&
        a.list->kind != SeqKind::View) {
        const auto &x = a.list->items, &y = b.list->items;
        for (size_t k = 0; k < x.size() && k < y.size(); ++k)
            if (!equal(x[k], y[k])) return compare(x[k], y[k]);
        return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    ETE_CHECK(false, "cannot order '{}' and '{}'", type_name(a), type_name(b));
    return 0;
}

std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string sci(buf, res.ptr);  // "-d.ddde+XX", shortest round trip
    std::string sign;
    if (sci[0] == '-') {
        sign = "-";
        sci.erase(0, 1);
    }
    const size_t epos = sci.find('e');
    const int exp = std::stoi(sci.substr(epos + 1));
    std::string digits = sci.substr(0, epos);
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int decpt = exp + 1;  // x = 0.DIGITS * 10^decpt
    const int nd = int(digits.size());
    if (decpt <= -4 || decpt > 16) {
        std::string m = digits.substr(0, 1);
        if (nd > 1) m += "." + digits.substr(1);
        return fmt::format("{}{}e{}{:02d}", sign, m, exp < 0 ? '-' : '+', std::abs(exp));
    }
    if (decpt <= 0) return sign + "0." + std::string(size_t(-decpt), '0') + digits;
    if (decpt >= nd) return sign + digits + std::string(size_t(decpt - nd), '0') + ".0";
    return sign + digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
}

namespace {

void refuse_print(const Value& v) {
    if (v.type == Value::Type::Iterator)
        ETE_CHECK(false, "printing a generator (Jinja prints its address; add |list)");
    if (v.type == Value::Type::Callable)
        ETE_CHECK(false, "printing the function '{}' (Jinja prints its address)", v.fn->name);
    if (v.type == Value::Type::List && v.list->kind == SeqKind::View)
        ETE_CHECK(false, "printing a dict view or range (add |list)");
}

}  // namespace

std::string repr(const Value& v) {
    using T = Value::Type;
    refuse_print(v);
    switch (v.type) {
        case T::Undefined:
            return "Undefined";
        case T::String:
            return py_repr(v.s);
        case T::List: {
            const bool tuple = v.list->kind == SeqKind::Tuple;
            std::string out = tuple ? "(" : "[";
            for (size_t k = 0; k < v.list->items.size(); ++k)
                out += (k ? ", " : "") + repr(v.list->items[k]);
            if (tuple && v.list->items.size() == 1) out += ",";
            return out + (tuple ? ")" : "]");
        }
        case T::Dict: {
            std::string out = "{";
            for (size_t k = 0; k < v.dict->items.size(); ++k)
                out += (k ? ", " : "") + py_repr(v.dict->items[k].first) + ": " +
                       repr(v.dict->items[k].second);
            return out + "}";
        }
        default:
            return to_str(v);
    }
}

std::string to_str(const Value& v) {
    using T = Value::Type;
    refuse_print(v);
    switch (v.type) {
        case T::Undefined:
            return "";
        case T::None:
            return "None";
        case T::Bool:
            return v.b ? "True" : "False";
        case T::Int:
            return std::to_string(v.i);
        case T::Float:
            return float_repr(v.f);
        case T::String:
            return v.s;
        case T::Namespace:
            return "<Namespace " + repr(Value::mapping(v.dict)) + ">";
        default:
            return repr(v);
    }
}

namespace {

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20)
                    out += fmt::format("\\u{:04x}", c);
                else
                    out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

void dump(const Value& v, const JsonStyle& st, int level, std::string& out) {
    using T = Value::Type;
    const std::string item_sep = !st.item_sep.empty() ? st.item_sep : (st.indent >= 0 ? "," : ", ");
    const std::string key_sep = !st.key_sep.empty() ? st.key_sep : ": ";
    const auto newline = [&](int lvl) {
        if (st.indent >= 0) out += "\n" + std::string(size_t(st.indent * lvl), ' ');
    };
    switch (v.type) {
        case T::None:
            out += "null";
            return;
        case T::Bool:
            out += v.b ? "true" : "false";
            return;
        case T::Int:
            out += std::to_string(v.i);
            return;
        case T::Float:
            out += std::isnan(v.f)   ? "NaN"
                   : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity")
                                     : float_repr(v.f);
            return;
        case T::String:
            out += json_string(v.s);
            return;
        case T::List:
            if (v.list->kind != SeqKind::View) {
                if (v.list->items.empty()) {
                    out += "[]";
                    return;
                }
                out += "[";
                for (size_t k = 0; k < v.list->items.size(); ++k) {
                    if (k) out += item_sep;
                    newline(level + 1);
                    dump(v.list->items[k], st, level + 1, out);
                }
                newline(level);
                out += "]";
                return;
            }
            break;
        case T::Dict: {
            if (v.dict->items.empty()) {
                out += "{}";
                return;
            }
            std::vector<const std::pair<std::string, Value>*> items;
            for (const auto& kv : v.dict->items) items.push_back(&kv);
            if (st.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](auto* a, auto* b) { return a->first < b->first; });
            out += "{";
            for (size_t k = 0; k < items.size(); ++k) {
                if (k) out += item_sep;
                newline(level + 1);
                out += json_string(items[k]->first) + key_sep;
                dump(items[k]->second, st, level + 1, out);
            }
            newline(level);
            out += "}";
            return;
        }
        default:
            break;
    }
    ETE_CHECK(false, "tojson: object of type '{}' is not JSON serializable", type_name(v));
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
    std::string out;
    dump(v, style, 0, out);
    return out;
}

std::vector<Value> iterate(const Value& v) {
    using T = Value::Type;
    switch (v.type) {
        case T::Undefined:
            return {};
        case T::List:
            return v.list->items;
        case T::Dict: {
            std::vector<Value> keys;
            for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
            return keys;
        }
        case T::String: {
            std::vector<Value> chars;
            for (char32_t c : to_u32(v.s)) chars.push_back(Value::string(to_utf8({&c, 1})));
            return chars;
        }
        case T::Iterator: {
            std::vector<Value> rest(v.iter->items.begin() + ptrdiff_t(v.iter->pos),
                                    v.iter->items.end());
            v.iter->pos = v.iter->items.size();
            return rest;
        }
        default:
            ETE_CHECK(false, "'{}' object is not iterable", type_name(v));
    }
    return {};
}

}  // namespace ete::jinja
