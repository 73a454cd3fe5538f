// ete/data/jinja_ast.h — tokens and syntax tree of the chat-template interpreter (jinja.h); the
// lexer (jinja_lexer.cpp) and parser (jinja_parser.cpp) produce them, the renderer
// (jinja_render.cpp) walks them. Every node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ete/data/jinja_value.h"

namespace ete::jinja {

struct Token {
    enum class Type : uint8_t {
        Data,        // text between tags, whitespace control already applied
        VarBegin,    // {{
        VarEnd,      // }}
        BlockBegin,  // {%
        BlockEnd,    // %}
        Name,
        String,  // text: the decoded value
        Int,
        Float,
        Op,  // text: "+", "//", "==", "(", ...
        Eof
    };
    Type type;
    std::string text;
    int line;
};

// The source as Jinja2's lexer sees it under Hugging Face's settings (trim_blocks, lstrip_blocks,
// keep_trailing_newline=False): newlines normalized to \n, one trailing newline dropped,
// whitespace control applied to the Data tokens, comments removed. Throws ete::Error with the
// line on a malformed tag.
std::vector<Token> lex(std::string_view source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind : uint8_t {
        Const,    // value
        Name,     // name
        List,     // args = items
        Tuple,    // args = items
        Dict,     // args = key0, value0, key1, ...
        GetAttr,  // args[0].name
        GetItem,  // args[0][args[1]]
        Slice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
        Call,     // args[0](args[1..], kwargs)
        Filter,   // args[0] | name(args[1..], kwargs)
        Test,     // args[0] is name(args[1..], kwargs)
        Not,      // not args[0]
        Neg,      // -args[0]
        Pos,      // +args[0]
        Binary,   // args[0] name args[1]: + - * / // % ** ~
        Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
        And,
        Or,
        Cond  // args[1] if args[0] else args[2] (args[2] null: undefined)
    };
    Kind kind;
    int line;
    Value value;
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroStmt {
    std::string name;
    std::vector<std::string> params;
    std::vector<ExprPtr> defaults;  // one per param, null when it has none
    Body body;
    int line = 0;
};

struct Stmt {
    enum class Kind : uint8_t {
        Text,        // text
        Print,       // {{ expr }}
        If,          // branches
        For,         // targets in expr [if cond] body [else else_body]
        Set,         // targets = expr, or attr: targets[0].attr = expr
        SetBlock,    // {% set targets[0] %}body{% endset %}
        Macro,       // macro
        Break,       // {% break %}
        Continue,    // {% continue %}
        Generation,  // {% generation %}body{% endgeneration %}
    };
    Kind kind;
    int line;
    std::string text;
    ExprPtr expr, cond;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<std::pair<ExprPtr, Body>> branches;  // If: (cond or null for else, body)
    Body body, else_body;
    std::unique_ptr<MacroStmt> macro;
};

// The template as the parser builds it; unknown statements, filters and tests are refused here,
// each naming the construct and its line.
struct Program {
    Body body;
};
Program parse(std::vector<Token> tokens);

}  // namespace ete::jinja
