// ete/data/jinja_parser.h — the chat-template parser's class, shared by its two halves:
// statements (jinja_parser.cpp) and expressions (jinja_parser_expr.cpp). Internal to data/.
//
// Recursive descent over the lexer's tokens (jinja_ast.h), with Jinja2 3.1's grammar and operator
// precedence (jinja2/parser.py): conditional expression < or < and < not < comparison < + - < ~
// < * / // % < ** < unary - + < primary with its postfix (. [] ()) and filters / tests, so that
// `'a' + x | trim` filters x alone.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "ete/core/error.h"
#include "ete/data/jinja_ast.h"

namespace ete::jinja {

class Parser {
    using TT = Token::Type;
    static constexpr int kMaxNesting = 200;  // expression and statement nesting (the stack)

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
    Body body(const std::vector<std::string_view>& ends, std::string& end);
    StmtPtr statement(const std::string& name, int line);
    Body closed_body(const std::vector<std::string_view>& ends);
    StmtPtr if_stmt(int line);
    std::vector<std::string> targets();
    StmtPtr for_stmt(int line);
    StmtPtr set_stmt(int line);
    StmtPtr macro_stmt(int line);

    // ---- expressions ----
    // Jinja's parse_tuple: expressions separated by commas make a tuple.
    ExprPtr tuple_expr(bool with_cond);
    ExprPtr expression(bool with_cond);
    ExprPtr or_expr();
    ExprPtr and_expr();
    ExprPtr not_expr();
    ExprPtr compare();
    ExprPtr binary_chain(const std::vector<std::string_view>& ops, ExprPtr (Parser::*next)());
    ExprPtr math1() { return binary_chain({"+", "-"}, &Parser::concat); }
    ExprPtr concat() { return binary_chain({"~"}, &Parser::math2); }
    ExprPtr math2() { return binary_chain({"*", "/", "//", "%"}, &Parser::power); }
    ExprPtr power() { return binary_chain({"**"}, &Parser::unary_filtered); }
    ExprPtr unary_filtered() { return unary(true); }
    ExprPtr unary(bool with_filter);
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

}  // namespace ete::jinja
