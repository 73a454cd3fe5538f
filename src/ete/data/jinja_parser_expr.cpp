// ete/data/jinja_parser_expr.cpp — the parser's expressions (jinja_parser.h), in Jinja2's
// precedence; unknown filters and tests are refused here, when the template is parsed.
#include <cerrno>
#include <cstdlib>

#include "ete/data/jinja_builtins.h"
#include "ete/data/jinja_parser.h"

namespace ete::jinja {

ExprPtr Parser::tuple_expr(bool with_cond) {
    const int line = cur().line;
    ExprPtr first = expression(with_cond);
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::Tuple, line);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
        ++pos_;
        if (cur().type == TT::VarEnd || cur().type == TT::BlockEnd || is_name("if") || is_op(")") ||
            is_op("]"))
            break;
        t->args.push_back(expression(with_cond));
    }
    return t;
}

ExprPtr Parser::expression(bool with_cond) {
    Depth d(*this);
    ExprPtr e = or_expr();
    while (with_cond && is_name("if")) {
        auto c = node(Expr::Kind::Cond, cur().line);
        ++pos_;
        c->args.push_back(or_expr());
        c->args.insert(c->args.begin() + 1, std::move(e));
        if (is_name("else")) {
            ++pos_;
            c->args.push_back(expression(true));
        } else {
            c->args.push_back(nullptr);
        }
        e = std::move(c);
    }
    return e;
}

ExprPtr Parser::or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
        auto o = node(Expr::Kind::Or, cur().line);
        ++pos_;
        o->args.push_back(std::move(e));
        o->args.push_back(and_expr());
        e = std::move(o);
    }
    return e;
}

ExprPtr Parser::and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
        auto a = node(Expr::Kind::And, cur().line);
        ++pos_;
        a->args.push_back(std::move(e));
        a->args.push_back(not_expr());
        e = std::move(a);
    }
    return e;
}

ExprPtr Parser::not_expr() {
    if (!is_name("not")) return compare();
    Depth d(*this);
    auto n = node(Expr::Kind::Not, cur().line);
    ++pos_;
    n->args.push_back(not_expr());
    return n;
}

ExprPtr Parser::compare() {
    const int line = cur().line;
    ExprPtr e = math1();
    std::unique_ptr<Expr> c;
    while (true) {
        std::string op;
        if (cur().type == TT::Op &&
            (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
             cur().text == ">" || cur().text == ">=")) {
            op = cur().text;
            ++pos_;
        } else if (is_name("in")) {
            op = "in";
            ++pos_;
        } else if (is_name("not") && peek().type == TT::Name && peek().text == "in") {
            op = "notin";
            pos_ += 2;
        } else {
            break;
        }
        if (!c) {
            c = node(Expr::Kind::Compare, line);
            c->args.push_back(std::move(e));
        }
        c->ops.push_back(op);
        c->args.push_back(math1());
    }
    return c ? std::move(c) : std::move(e);
}

ExprPtr Parser::binary_chain(const std::vector<std::string_view>& ops, ExprPtr (Parser::*next)()) {
    ExprPtr e = (this->*next)();
    while (cur().type == TT::Op) {
        bool match = false;
        for (std::string_view op : ops) match = match || cur().text == op;
        if (!match) break;
        auto b = node(Expr::Kind::Binary, cur().line);
        b->name = toks_[pos_++].text;
        b->args.push_back(std::move(e));
        b->args.push_back((this->*next)());
        e = std::move(b);
    }
    return e;
}

ExprPtr Parser::unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
        e = node(is_op("-") ? Expr::Kind::Neg : Expr::Kind::Pos, cur().line);
        ++pos_;
        e->args.push_back(unary(false));
    } else {
        e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters(std::move(e)) : std::move(e);
}

ExprPtr Parser::primary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == TT::Name) {
        ++pos_;
        static const std::pair<std::string_view, int> kConsts[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (const auto& [n, v] : kConsts) {
            if (t.text != n) continue;
            auto c = node(Expr::Kind::Const, line);
            c->value = v == 2 ? Value::none() : Value::boolean(v == 1);
            return c;
        }
        auto n = node(Expr::Kind::Name, line);
        n->name = t.text;
        return n;
    }
    if (t.type == TT::String) {
        std::string s;
        while (cur().type == TT::String) s += toks_[pos_++].text;  // adjacent strings join
        auto c = node(Expr::Kind::Const, line);
        c->value = Value::string(std::move(s));
        return c;
    }
    if (t.type == TT::Int || t.type == TT::Float) {
        ++pos_;
        auto c = node(Expr::Kind::Const, line);
        errno = 0;
        if (t.type == TT::Int) {
            const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
            if (errno == ERANGE) fail_at(line, fmt::format("integer {} is too large", t.text));
            c->value = Value::integer(v);
        } else {
            c->value = Value::number(std::strtod(t.text.c_str(), nullptr));
        }
        return c;
    }
    if (is_op("(")) {
        ++pos_;
        if (is_op(")")) {
            ++pos_;
            return node(Expr::Kind::Tuple, line);
        }
        ExprPtr e = tuple_expr(true);
        expect_op(")");
        return e;
    }
    if (is_op("[")) return sequence(Expr::Kind::List, "]");
    if (is_op("{")) return sequence(Expr::Kind::Dict, "}");
    fail(fmt::format("unexpected {}", describe(t)));
}

ExprPtr Parser::sequence(Expr::Kind kind, std::string_view close) {
    auto e = node(kind, cur().line);
    ++pos_;
    while (!is_op(close)) {
        if (!e->args.empty()) expect_op(",");
        if (is_op(close)) break;
        e->args.push_back(expression(true));
        if (kind == Expr::Kind::Dict) {
            expect_op(":");
            e->args.push_back(expression(true));
        }
    }
    ++pos_;
    return e;
}

ExprPtr Parser::postfix(ExprPtr e) {
    while (true) {
        if (is_op(".")) {
            const int line = cur().line;
            ++pos_;
            if (cur().type == TT::Int) {
                auto g = node(Expr::Kind::GetItem, line);
                auto k = node(Expr::Kind::Const, line);
                k->value = Value::integer(std::strtoll(toks_[pos_++].text.c_str(), nullptr, 10));
                g->args.push_back(std::move(e));
                g->args.push_back(std::move(k));
                e = std::move(g);
                continue;
            }
            auto g = node(Expr::Kind::GetAttr, line);
            g->name = expect_name();
            g->args.push_back(std::move(e));
            e = std::move(g);
        } else if (is_op("[")) {
            e = subscript(std::move(e));
        } else if (is_op("(")) {
            auto c = node(Expr::Kind::Call, cur().line);
            c->args.push_back(std::move(e));
            call_args(*c);
            e = std::move(c);
        } else {
            return e;
        }
    }
}

ExprPtr Parser::subscript(ExprPtr e) {
    const int line = cur().line;
    ++pos_;
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (!is_op("]")) {
        if (is_op(":")) {
            if (++part > 2) fail("too many ':' in a slice");
            slice = true;
            ++pos_;
            continue;
        }
        if (parts[part]) fail(fmt::format("expected ']', got {}", describe(cur())));
        parts[part] = part == 0 && !slice ? tuple_expr(true) : expression(true);
    }
    ++pos_;
    if (!slice && !parts[0]) fail_at(line, "empty subscript '[]'");
    auto g = node(slice ? Expr::Kind::Slice : Expr::Kind::GetItem, line);
    g->args.push_back(std::move(e));
    g->args.push_back(std::move(parts[0]));
    if (slice) {
        g->args.push_back(std::move(parts[1]));
        g->args.push_back(std::move(parts[2]));
    }
    return g;
}

void Parser::call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
        if (!first) expect_op(",");
        first = false;
        if (is_op(")")) break;
        if (is_op("*") || is_op("**")) fail("unsupported '*args' / '**kwargs' in a call");
        if (cur().type == TT::Name && peek().type == TT::Op && peek().text == "=") {
            std::string key = toks_[pos_].text;
            pos_ += 2;
            call.kwargs.emplace_back(std::move(key), expression(true));
        } else {
            if (!call.kwargs.empty()) fail("positional argument after a keyword argument");
            call.args.push_back(expression(true));
        }
    }
    ++pos_;
}

ExprPtr Parser::filters(ExprPtr e) {
    while (true) {
        if (is_op("|")) {
            auto f = node(Expr::Kind::Filter, cur().line);
            ++pos_;
            f->name = expect_name();
            if (!is_filter(f->name)) fail_at(f->line, fmt::format("unknown filter '{}'", f->name));
            f->args.push_back(std::move(e));
            if (is_op("(")) call_args(*f);
            e = std::move(f);
        } else if (is_name("is")) {
            const int line = cur().line;
            ++pos_;
            const bool negated = is_name("not");
            if (negated) ++pos_;
            auto t = node(Expr::Kind::Test, line);
            t->name = expect_name();
            if (!is_test(t->name)) fail_at(line, fmt::format("unknown test '{}'", t->name));
            t->args.push_back(std::move(e));
            const bool arg_follows =
                cur().type == TT::String || cur().type == TT::Int || cur().type == TT::Float ||
                is_op("[") || is_op("{") ||
                (cur().type == TT::Name && !is_name("else") && !is_name("or") && !is_name("and") &&
                 !is_name("is") && !is_name("if"));
            if (is_op("(")) {
                call_args(*t);
            } else if (arg_follows) {
                t->args.push_back(postfix(primary()));
            }
            e = std::move(t);
            if (negated) {
                auto n = node(Expr::Kind::Not, line);
                n->args.push_back(std::move(e));
                e = std::move(n);
            }
        } else if (is_op("(")) {
            auto c = node(Expr::Kind::Call, cur().line);
            c->args.push_back(std::move(e));
            call_args(*c);
            e = std::move(c);
        } else {
            return e;
        }
    }
}

}  // namespace ete::jinja
