// ete/data/jinja_parser.cpp — the parser's statements (jinja_parser.h): text, {{ }}, if, for,
// set, macro, generation, break/continue; anything else is refused naming it.
#include "ete/data/jinja_parser.h"

namespace ete::jinja {

Body Parser::body(const std::vector<std::string_view>& ends, std::string& end) {
    Depth d(*this);
    Body out;
    while (true) {
        const Token& t = cur();
        if (t.type == TT::Eof) {
            if (!ends.empty()) fail_at(t.line, fmt::format("missing '{{% {} %}}'", ends.back()));
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

StmtPtr Parser::statement(const std::string& name, int line) {
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

Body Parser::closed_body(const std::vector<std::string_view>& ends) {
    std::string end;
    Body b = body(ends, end);
    expect(TT::BlockEnd, "'%}'");
    return b;
}

StmtPtr Parser::if_stmt(int line) {
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

std::vector<std::string> Parser::targets() {
    std::vector<std::string> names{expect_name()};
    while (is_op(",")) {
        ++pos_;
        names.push_back(expect_name());
    }
    return names;
}

StmtPtr Parser::for_stmt(int line) {
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

StmtPtr Parser::set_stmt(int line) {
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

StmtPtr Parser::macro_stmt(int line) {
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

Program parse(std::vector<Token> tokens) {
    return Parser(std::move(tokens)).run();
}

}  // namespace ete::jinja
