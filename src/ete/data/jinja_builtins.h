// ete/data/jinja_builtins.h — the filters, tests, methods and global functions the chat-template
// interpreter knows (jinja_filters.cpp, jinja_methods.cpp), with Jinja2 3.1's and Python's
// semantics. A name outside these tables is refused: filters and tests when the template is
// parsed, methods and functions when they are called.
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ete/data/jinja_value.h"

namespace ete::jinja {

struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

// Binds args to a Python signature: one slot per parameter name, empty when not given; too many
// positionals, unknown or doubled keywords are ete::Error naming `fname`.
std::vector<std::optional<Value>> bind(const Args& args, std::vector<std::string_view> params,
                                       std::string_view fname);

// Throws the error an undefined value carries ("undefined value" when it names none).
void check_defined(const Value& v);

bool is_filter(std::string_view name);
bool is_test(std::string_view name);

// What builtins need from the renderer: calling a macro or global from a filter (map('f') on a
// filter name), and the time for strftime_now.
struct BuiltinEnv {
    std::function<void(size_t)> count_steps;  // charges the renderer's iteration budget
    std::time_t now = 0;
    size_t max_items = 0;  // of any one list (range)
};

Value apply_filter(std::string_view name, const Value& subject, const Args& args,
                   const BuiltinEnv& env);
bool apply_test(std::string_view name, const Value& subject, const Args& args);

// Method names an attribute lookup binds ("startswith" of a str, "items" of a dict); mutating
// ones (list.append, dict.update, ...) are refused as the immutable sandbox refuses them.
bool is_method(const Value& self, std::string_view name);
Value call_method(const Value& self, std::string_view name, const Args& args,
                  const BuiltinEnv& env);

// range, namespace, dict, raise_exception, strftime_now.
bool is_global_function(std::string_view name);
Value call_global(std::string_view name, const Args& args, const BuiltinEnv& env);

// Python's obj[key] as Jinja's environment.getitem does it: a missing key or index is undefined.
Value get_item(const Value& obj, const Value& key);
Value get_attr(const Value& obj, const std::string& name);
// obj[start:stop:step] (absent parts undefined/none).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's binary operators (+ - * / // % ** ~) and comparisons (== != < <= > >= in notin);
// str/list results are bounded by `limits`.
struct Limits;
Value binary_op(const std::string& op, const Value& a, const Value& b, const Limits& limits);
bool compare_op(const std::string& op, const Value& a, const Value& b);

}  // namespace ete::jinja
