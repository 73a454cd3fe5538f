// ete/data/jinja_parser.cpp — recursive descent over the lexer's tokens (jinja_ast.h), with
// Jinja2 3.1's grammar and operator precedence (jinja2/parser.py): conditional expression < or <
// and < not < comparison < + - < ~ < * / // % < ** < unary - + < primary with its postfix
// (. [] ()) and filters / tests, so that `'a' + x | trim` filters x alone.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "ete/core/error.h"
#include "ete/data/jinja_ast.h"
#include "ete/data/jinja_builtins.h"

namespace ete::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expression and statement nesting (the parser's stack)

using TT = Token::Type;

class Parser {
  public:
    explicit Parser(std::vector<Token> t) : toks_(std::move(t)) {}

    Program run() {
        Program p;
        std::string end;
        p.body = body({}, end);
        return p;
    }

  private:
    [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, msg); }
    [[noreturn]] static void fail_at(int line, const std::string& msg) {
        throw Error(fmt::format("chat template line {}: {}", line, msg));
    }
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
    bool is_op(std::string_view op) const { return cur().type == TT::Op && cur().text == op; }
    bool is_name(std::string_view n) const { return cur().type == TT::Name && cur().text == n; }
    static std::string describe(const Token& t) {
        switch (t.type) {
            case TT::Eof:
                return "end of template";
            case TT::BlockEnd:
                return "'%}'";
            case TT::VarEnd:
                return "'}}'";
            case TT::String:
                return "a string";
            default:
                return "'" + t.text + "'";
        }
    }
    void expect_op(std::string_view op) {
        if (!is_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
        ++pos_;
    }
    void expect(TT type, std::string_view what) {
        if (cur().type != type) fail(fmt::format("expected {}, got {}", what, describe(cur())));
        ++pos_;
    }
    std::string expect_name() {
        if (cur().type != TT::Name) fail(fmt::format("expected a name, got {}", describe(cur())));
        return toks_[pos_++].text;
    }
    struct Depth {
        Parser& p;
        explicit Depth(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxNesting)
                p.fail(fmt::format("nested deeper than {} levels", kMaxNesting));
        }
        ~Depth() { --p.depth_; }
    };
    static StmtPtr stmt(Stmt::Kind k, int line) {
        auto s = std::make_unique<Stmt>();
        s->kind = k;
        s->line = line;
        return s;
    }
    static ExprPtr node(Expr::Kind k, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = line;
        return e;
    }

    // ---- statements ----

    // Statements up to a block whose name is in `ends` (returned in `end`, its tag consumed up to
    // the name); the top level ends at Eof.
    Body body(const std::vector<std::string_view>& ends, std::string& end) {
        Depth d(*this);
        Body out;
        while (true) {
            const Token& t = cur();
            if (t.type == TT::Eof) {
                if (!ends.empty())
                    fail_at(t.line, fmt::format("missing '{{% {} %}}'", ends.back()));
                return out;
            }
            if (t.type == TT::Data) {
                auto s = stmt(Stmt::Kind::Text, t.line);
                s->text = t.text;
                out.push_back(std::move(s));
                ++pos_;
            } else if (t.type == TT::VarBegin) {
                ++pos_;
                auto s = stmt(Stmt::Kind::Print, t.line);
                s->expr = tuple_expr(true);
                expect(TT::VarEnd, "'}}'");
                out.push_back(std::move(s));
            } else {
                ++pos_;
                const std::string name = expect_name();
                for (std::string_view e : ends) {
                    if (name == e) {
                        end = name;
                        return out;
                    }
                }
                out.push_back(statement(name, t.line));
            }
        }
    }
    StmtPtr statement(const std::string& name, int line) {
        if (name == "if") return if_stmt(line);
        if (name == "for") return for_stmt(line);
        if (name == "set") return set_stmt(line);
        if (name == "macro") return macro_stmt(line);
        if (name == "generation") {
            if (macro_depth_ > 0) fail_at(line, "'generation' inside a macro is not supported");
            auto s = stmt(Stmt::Kind::Generation, line);
            expect(TT::BlockEnd, "'%}'");
            s->body = closed_body({"endgeneration"});
            return s;
        }
        if (name == "break" || name == "continue") {
            if (loop_depth_ == 0) fail_at(line, fmt::format("'{}' outside a for loop", name));
            expect(TT::BlockEnd, "'%}'");
            return stmt(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
        }
        if (name.starts_with("end") || name == "elif" || name == "else")
            fail_at(line, fmt::format("unexpected '{}'", name));
        fail_at(line, fmt::format("unsupported statement '{}'", name));
    }
    Body closed_body(const std::vector<std::string_view>& ends) {
        std::string end;
        Body b = body(ends, end);
        expect(TT::BlockEnd, "'%}'");
        return b;
    }
    StmtPtr if_stmt(int line) {
        auto s = stmt(Stmt::Kind::If, line);
        ExprPtr cond = tuple_expr(true);
        while (true) {
            expect(TT::BlockEnd, "'%}'");
            std::string end;
            Body b = body({"elif", "else", "endif"}, end);
            s->branches.emplace_back(std::move(cond), std::move(b));
            if (end == "endif") {
                expect(TT::BlockEnd, "'%}'");
                return s;
            }
            if (end == "else") {
                expect(TT::BlockEnd, "'%}'");
                s->branches.emplace_back(nullptr, closed_body({"endif"}));
                return s;
            }
            cond = tuple_expr(true);
        }
    }
    std::vector<std::string> targets() {
        std::vector<std::string> names{expect_name()};
        while (is_op(",")) {
            ++pos_;
            names.push_back(expect_name());
        }
        return names;
    }
    StmtPtr for_stmt(int line) {
        auto s = stmt(Stmt::Kind::For, line);
        s->targets = targets();
        if (!is_name("in")) fail(fmt::format("expected 'in', got {}", describe(cur())));
        ++pos_;
        s->expr = tuple_expr(false);
        if (is_name("if")) {
            ++pos_;
            s->cond = expression(true);
        }
        if (is_name("recursive")) fail("unsupported 'recursive' for loop");
        expect(TT::BlockEnd, "'%}'");
        ++loop_depth_;
        std::string end;
        s->body = body({"else", "endfor"}, end);
        --loop_depth_;
        expect(TT::BlockEnd, "'%}'");
        if (end == "else") s->else_body = closed_body({"endfor"});
        return s;
    }
    StmtPtr set_stmt(int line) {
        auto s = stmt(Stmt::Kind::Set, line);
        s->targets = targets();
        if (s->targets.size() == 1 && is_op(".")) {
            ++pos_;
            s->attr = expect_name();
        }
        if (is_op("=")) {
            ++pos_;
            s->expr = tuple_expr(true);
            expect(TT::BlockEnd, "'%}'");
            return s;
        }
        if (is_op("|")) fail("unsupported filtered block 'set'");
        if (s->targets.size() != 1 || !s->attr.empty()) fail("expected '=' in 'set'");
        s->kind = Stmt::Kind::SetBlock;
        expect(TT::BlockEnd, "'%}'");
        s->body = closed_body({"endset"});
        return s;
    }
    StmtPtr macro_stmt(int line) {
        auto s = stmt(Stmt::Kind::Macro, line);
        s->macro = std::make_unique<MacroStmt>();
        MacroStmt& m = *s->macro;
        m.name = expect_name();
        m.line = line;
        expect_op("(");
        while (!is_op(")")) {
            if (!m.params.empty()) expect_op(",");
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) fail("unsupported '*args' / '**kwargs' in a macro");
            m.params.push_back(expect_name());
            if (is_op("=")) {
                ++pos_;
                m.defaults.push_back(expression(true));
            } else {
                m.defaults.push_back(nullptr);
            }
        }
        ++pos_;
        expect(TT::BlockEnd, "'%}'");
        const int saved_loops = loop_depth_;
        loop_depth_ = 0;
        ++macro_depth_;
        m.body = closed_body({"endmacro"});
        --macro_depth_;
        loop_depth_ = saved_loops;
        return s;
    }

    // ---- expressions ----

    // Jinja's parse_tuple: expressions separated by commas make a tuple.
    ExprPtr tuple_expr(bool with_cond) {
        const int line = cur().line;
        ExprPtr first = expression(with_cond);
        if (!is_op(",")) return first;
        auto t = node(Expr::Kind::Tuple, line);
        t->args.push_back(std::move(first));
        while (is_op(",")) {
            ++pos_;
            if (cur().type == TT::VarEnd || cur().type == TT::BlockEnd || is_name("if") ||
                is_op(")") || is_op("]"))
                break;
            t->args.push_back(expression(with_cond));
        }
        return t;
    }
    ExprPtr expression(bool with_cond) {
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
    ExprPtr or_expr() {
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
    ExprPtr and_expr() {
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
    ExprPtr not_expr() {
        if (!is_name("not")) return compare();
        Depth d(*this);
        auto n = node(Expr::Kind::Not, cur().line);
        ++pos_;
        n->args.push_back(not_expr());
        return n;
    }
    ExprPtr compare() {
        const int line = cur().line;
        ExprPtr e = math1();
        std::unique_ptr<Expr> c;
        while (true) {
            std::string op;
            if (cur().type == TT::Op &&
                (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
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
    ExprPtr binary_chain(const std::vector<std::string_view>& ops, ExprPtr (Parser::*next)()) {
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
    ExprPtr math1() { return binary_chain({"+", "-"}, &Parser::concat); }
    ExprPtr concat() { return binary_chain({"~"}, &Parser::math2); }
    ExprPtr math2() { return binary_chain({"*", "/", "//", "%"}, &Parser::power); }
    ExprPtr power() { return binary_chain({"**"}, &Parser::unary_filtered); }
    ExprPtr unary_filtered() { return unary(true); }
    ExprPtr unary(bool with_filter) {
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
    ExprPtr primary();
    ExprPtr postfix(ExprPtr e);
    ExprPtr filters(ExprPtr e);
    ExprPtr subscript(ExprPtr e);
    void call_args(Expr& call);
    ExprPtr sequence(Expr::Kind kind, std::string_view close);

    std::vector<Token> toks_;
    size_t pos_ = 0;
    int depth_ = 0, loop_depth_ = 0, macro_depth_ = 0;
};

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

}  // namespace

Program parse(std::vector<Token> tokens) {
    return Parser(std::move(tokens)).run();
}

}  // namespace ete::jinja
