// ete/data/jinja_value.h — the values of the chat-template interpreter (jinja.h), with Python's
// semantics where Jinja2 borrows them: truthiness, == across int/float/bool, ordering, str() and
// repr() of every printable value, and the iterators Jinja's filters return.
//
// Lists, dicts and namespaces are shared by reference (a template cannot mutate a list or dict:
// Hugging Face renders in jinja2's ImmutableSandboxedEnvironment; a namespace's attributes can be
// set). Dicts keep insertion order, as Python's do; keys are strings (JSON's). Strings are UTF-8;
// lengths, indices and slices count code points, as Python's str does.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ete::jinja {

struct Value;
struct MacroStmt;

// What a sequence is in Python: a list, a tuple ("(1, 2)"), or a view that Jinja cannot print
// faithfully without its address or type name (dict.items(), range(...)).
enum class SeqKind : uint8_t { List, Tuple, View };

struct ListObj {
    std::vector<Value> items;
    SeqKind kind = SeqKind::List;
};

struct DictObj {
    std::vector<std::pair<std::string, Value>> items;  // insertion order
    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);  // replaces in place or appends
};

// A generator (what map/select/unique/... return) or a list_reverseiterator: consumed as it is
// iterated, always truthy, no len(); a second loop over it sees what the first one left.
struct IterObj {
    std::vector<Value> items;
    size_t pos = 0;
};

// A callable: a global function (range, namespace, ...), a method bound to a value
// ("startswith" of a string) or a macro.
struct CallableObj {
    std::string name;
    std::shared_ptr<Value> self;       // bound methods: the object
    const MacroStmt* macro = nullptr;  // macros
};

struct Value {
    enum class Type : uint8_t {
        Undefined,
        None,
        Bool,
        Int,
        Float,
        String,
        List,
        Dict,
        Namespace,
        Iterator,
        Callable
    };
    Type type = Type::Undefined;
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;  // String; Undefined: the name that was undefined (for errors)
    std::shared_ptr<ListObj> list;
    std::shared_ptr<DictObj> dict;  // Dict and Namespace
    std::shared_ptr<IterObj> iter;
    std::shared_ptr<CallableObj> fn;

    static Value undefined(std::string name = "") {
        Value v;
        v.s = std::move(name);
        return v;
    }
    static Value none() { return with_type(Type::None); }
    static Value boolean(bool x) {
        Value v = with_type(Type::Bool);
        v.b = x;
        return v;
    }
    static Value integer(int64_t x) {
        Value v = with_type(Type::Int);
        v.i = x;
        return v;
    }
    static Value number(double x) {
        Value v = with_type(Type::Float);
        v.f = x;
        return v;
    }
    static Value string(std::string x) {
        Value v = with_type(Type::String);
        v.s = std::move(x);
        return v;
    }
    static Value sequence(std::vector<Value> items, SeqKind kind = SeqKind::List);
    static Value mapping(std::shared_ptr<DictObj> d);
    static Value namespace_(std::shared_ptr<DictObj> attrs);
    static Value iterator(std::vector<Value> items);
    static Value callable(std::string name, const MacroStmt* macro = nullptr);
    static Value method(std::string name, const Value& self);
    static Value from_json(const nlohmann::ordered_json& j);

    bool is_undefined() const { return type == Type::Undefined; }
    bool is_string() const { return type == Type::String; }
    bool is_number() const { return type == Type::Int || type == Type::Float || is_bool(); }
    bool is_bool() const { return type == Type::Bool; }
    bool is_int_like() const { return type == Type::Int || type == Type::Bool; }
    int64_t as_int() const { return type == Type::Bool ? int64_t{b} : i; }
    double as_double() const { return type == Type::Float ? f : double(as_int()); }

  private:
    static Value with_type(Type t) {
        Value v;
        v.type = t;
        return v;
    }
};

// Python's type name of a value ("str", "int", "list", "dict", "NoneType", ...).
std::string type_name(const Value& v);

// Python's bool(v).
bool truthy(const Value& v);

// Python's ==: numbers by value (True == 1 == 1.0), strings, sequences and dicts deeply.
bool equal(const Value& a, const Value& b);

// Python's <, <=, >, >= as -1/0/1 of (a, b); numbers, strings (code points) and sequences
// (lexicographic) only, else ete::Error naming both types.
int compare(const Value& a, const Value& b);

// str(v) and repr(v) as Python prints them; values Python would print with an address or an
// internal type name (generators, dict views, functions) are refused with ete::Error.
std::string to_str(const Value& v);
std::string repr(const Value& v);

// Python's repr of a float ("1.0", "0.1", "1e+16", "inf").
std::string float_repr(double x);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys): indent
// < 0 is None. item_sep/key_sep empty: Python's defaults (", " or "," with an indent; ": ").
struct JsonStyle {
    int indent = -1;
    std::string item_sep, key_sep;
    bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

// The items a for loop visits: a sequence's, a dict's keys, a string's characters, an iterator's
// rest (consuming it). Undefined gives none; anything else is ete::Error ("'int' object is not
// iterable").
std::vector<Value> iterate(const Value& v);

}  // namespace ete::jinja
