// ete/data/jinja_ops.cpp — the interpreter's operators with Python's semantics (jinja_builtins.h):
// int/float arithmetic with overflow checks, floor division and modulo signs, str and list
// concatenation and repetition (bounded by the limits), ~, comparisons and `in`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"
#include "ete/data/jinja.h"
#include "ete/data/jinja_builtins.h"

namespace ete::jinja {

void check_defined(const Value& v) {
    ETE_CHECK(!v.is_undefined(), "{}", v.s.empty() ? "undefined value" : v.s);
}

namespace {

double floor_mod(double a, double b) {
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

Value repeat(const Value& seq, int64_t n, const Limits& limits) {
    n = std::max<int64_t>(n, 0);
    if (seq.is_string()) {
        ETE_CHECK(seq.s.empty() || uint64_t(n) <= limits.max_output / seq.s.size(),
                  "a string of more than {} bytes", limits.max_output);
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.s;
        return Value::string(std::move(out));
    }
    const auto& items = seq.list->items;
    ETE_CHECK(items.empty() || uint64_t(n) <= limits.max_items / items.size(),
              "a list of more than {} items", limits.max_items);
    std::vector<Value> out;
    for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
    return Value::sequence(std::move(out), seq.list->kind);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, const Limits& limits) {
    if (op == "~") return Value::string(to_str(a) + to_str(b));
    check_defined(a);
    check_defined(b);
    const auto unsupported = [&] {
        ETE_CHECK(false, "unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                  type_name(b));
    };
    const bool seq_a =
        a.is_string() || (a.type == Value::Type::List && a.list->kind != SeqKind::View);
    if (op == "+" && seq_a && a.type == b.type) {
        if (a.is_string()) return Value::string(a.s + b.s);
        if (a.list->kind != b.list->kind) unsupported();
        std::vector<Value> items = a.list->items;
        items.insert(items.end(), b.list->items.begin(), b.list->items.end());
        return Value::sequence(std::move(items), a.list->kind);
    }
    if (op == "*" && seq_a && b.is_int_like()) return repeat(a, b.as_int(), limits);
    if (op == "*" && a.is_int_like() && (b.is_string() || b.type == Value::Type::List))
        return binary_op(op, b, a, limits);
    if (op == "%" && a.is_string()) ETE_CHECK(false, "string formatting with '%' is not supported");
    if (!a.is_number() || !b.is_number()) unsupported();
    const bool ints = a.is_int_like() && b.is_int_like();
    const int64_t x = a.as_int(), y = b.as_int();
    const double p = a.as_double(), q = b.as_double();
    int64_t r = 0;
    if (ints && (op == "+" || op == "-" || op == "*")) {
        const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                              : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                          : __builtin_mul_overflow(x, y, &r);
        ETE_CHECK(!overflow, "integer overflow");
        return Value::integer(r);
    }
    if (op == "+") return Value::number(p + q);
    if (op == "-") return Value::number(p - q);
    if (op == "*") return Value::number(p * q);
    if (op == "**") {
        if (ints && y >= 0) {
            int64_t acc = 1;
            for (int64_t k = 0; k < y && acc != 0 && x != 1; ++k) {
                ETE_CHECK(!__builtin_mul_overflow(acc, x, &r), "integer overflow");
                acc = r;
            }
            return Value::integer(acc);
        }
        return Value::number(std::pow(p, q));
    }
    ETE_CHECK(ints ? y != 0 : q != 0, "division by zero");
    if (op == "/") return Value::number(p / q);
    if (op == "//") {
        if (!ints) return Value::number(std::floor(p / q));
        ETE_CHECK(!(x == INT64_MIN && y == -1), "integer overflow");
        return Value::integer(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
    }
    if (ints) {
        ETE_CHECK(!(x == INT64_MIN && y == -1), "integer overflow");
        const int64_t m = x % y;
        return Value::integer(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    return Value::number(floor_mod(p, q));
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in" || op == "notin") {
        bool found = false;
        if (b.is_string()) {
            ETE_CHECK(a.is_string(), "'in <string>' requires a string as left operand, not '{}'",
                      type_name(a));
            found = b.s.find(a.s) != std::string::npos;
        } else if (b.type == Value::Type::Dict) {
            found = a.is_string() && b.dict->find(a.s);
        } else if (b.type == Value::Type::Iterator) {
            while (!found && b.iter->pos < b.iter->items.size())
                found = equal(b.iter->items[b.iter->pos++], a);
        } else {
            for (const Value& x : iterate(b)) found = found || equal(x, a);
        }
        return op == "in" ? found : !found;
    }
    check_defined(a);
    check_defined(b);
    const int c = compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
}

}  // namespace ete::jinja
