// ete/data/jinja_lexer.cpp — Jinja2's lexer under Hugging Face's environment (jinja_ast.h).
//
// Whitespace control follows jinja2/lexer.py (3.1) exactly: "{%-"/"{{-"/"{#-" strip all
// whitespace before the tag; "-%}"/"-}}"/"-#}" all whitespace after it; with lstrip_blocks the
// spaces and tabs between a line start and a "{%" or "{#" tag go (not before "{{", and not for
// "{%+"); with trim_blocks the one newline right after "%}" or "#}" goes (not after "+%}"). A
// tag ends only where its brackets balance, so "}}" inside a dict literal does not end it.
#include <fmt/format.h>

#include <cctype>

#include "ete/core/error.h"
#include "ete/data/jinja_ast.h"
#include "ete/data/jinja_pystr.h"
#include "ete/data/utf8.h"

namespace ete::jinja {
namespace {

[[noreturn]] void fail(int line, const std::string& msg) {
    throw Error(fmt::format("chat template line {}: {}", line, msg));
}

std::string normalize_newlines(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\r') {
            out += '\n';
            if (k + 1 < s.size() && s[k + 1] == '\n') ++k;
        } else {
            out += s[k];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
    return out;
}

// Whitespace as Python's str.isspace / re's \s see it, at byte k of s (0 if none).
size_t space_len(std::string_view s, size_t k) {
    const size_t n = utf8::char_len(s, k);
    return n && py_isspace(utf8::decode(s, k, n)) ? n : 0;
}

std::string rstrip_space(std::string_view s) {
    std::u32string cps = to_u32(s);
    while (!cps.empty() && py_isspace(cps.back())) cps.pop_back();
    return to_utf8(cps);
}

class Lexer {
  public:
    explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

    std::vector<Token> run() {
        bool line_starting = true;
        while (pos_ < src_.size()) {
            const size_t start = find_tag(pos_);
            std::string text = src_.substr(pos_, start - pos_);
            if (start == src_.size()) {
                data(text);
                break;
            }
            const char kind = src_[start + 1];  // '{', '%' or '#'
            const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
            if (sign == '-') {
                text = rstrip_space(text);
            } else if (sign != '+' && kind != '{') {        // lstrip_blocks
                const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0
                if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
                    all_space(std::string_view(text).substr(l_pos)))
                    text.resize(l_pos);
            }
            data(text);
            advance_to(start);
            const size_t body = start + 2 + (sign == '-' || sign == '+');
            if (kind == '#') {
                line_starting = comment(body);
            } else {
                line_starting = tag(body, kind == '{');
            }
        }
        out_.push_back({Token::Type::Eof, "", line_});
        return std::move(out_);
    }

  private:
    size_t find_tag(size_t from) const {
        for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
            if (k + 1 < src_.size() &&
                (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
                return k;
        }
        return src_.size();
    }
    static bool all_space(std::string_view s) {
        for (size_t k = 0; k < s.size();) {
            const size_t n = space_len(s, k);
            if (!n) return false;
            k += n;
        }
        return true;
    }
    void data(const std::string& text) {
        if (!text.empty()) out_.push_back({Token::Type::Data, text, line_});
    }
    void advance_to(size_t p) {
        for (; pos_ < p; ++pos_) line_ += src_[pos_] == '\n';
    }
    // After an end tag: "-" strips all whitespace, "+" none, else trim_blocks takes one "\n".
    // Returns whether what was consumed ends with a newline (Jinja's line_starting).
    bool after_end(char sign, size_t end) {
        advance_to(end);
        bool newline = false;
        if (sign == '-') {
            while (pos_ < src_.size()) {
                const size_t n = space_len(src_, pos_);
                if (!n) break;
                newline = src_[pos_] == '\n';
                advance_to(pos_ + n);
            }
        } else if (sign == 0 && pos_ < src_.size() && src_[pos_] == '\n') {
            advance_to(pos_ + 1);
            newline = true;
        }
        return newline;
    }
    bool comment(size_t body) {
        const int line = line_;
        const size_t close = src_.find("#}", body);
        if (close == std::string::npos) fail(line, "unclosed comment '{#'");
        const char before = close > body ? src_[close - 1] : '\0';
        const char sign = before == '-' ? '-' : before == '+' ? '+' : '\0';
        return after_end(sign, close + 2);
    }
    bool tag(size_t body, bool variable) {
        const int line = line_;
        out_.push_back({variable ? Token::Type::VarBegin : Token::Type::BlockBegin, "", line});
        advance_to(body);
        int depth = 0;
        const size_t first = out_.size();
        while (true) {
            while (pos_ < src_.size() && space_len(src_, pos_)) advance_to(pos_ + 1);
            if (pos_ >= src_.size())
                fail(line, variable ? "unclosed '{{'" : "unclosed '{%' (expected '%}')");
            if (depth == 0) {
                if (const int end = end_tag(variable); end >= 0) {
                    if (!variable && out_.size() > first && out_[first].text == "raw")
                        fail(line, "unsupported statement 'raw'");
                    out_.push_back(
                        {variable ? Token::Type::VarEnd : Token::Type::BlockEnd, "", line_});
                    const char sign = src_[pos_] == '-' ? '-' : src_[pos_] == '+' ? '+' : '\0';
                    // "}}" never takes the newline after it (trim_blocks is for blocks).
                    return after_end(variable && sign == '\0' ? '+' : sign, pos_ + size_t(end));
                }
            }
            token(depth);
        }
    }
    // Length of the end delimiter at pos_ ("-%}", "+%}", "%}", "-}}", "}}"), or -1.
    int end_tag(bool variable) const {
        const std::string_view rest = std::string_view(src_).substr(pos_);
        const std::string_view close = variable ? "}}" : "%}";
        if (rest.starts_with(close)) return 2;
        if (rest.size() >= 3 && rest.substr(1, 2) == close &&
            (rest[0] == '-' || (rest[0] == '+' && !variable)))
            return 3;
        return -1;
    }
    void token(int& depth) {
        const int line = line_;
        const char c = src_[pos_];
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t e = pos_;
            while (e < src_.size() &&
                   (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
                ++e;
            out_.push_back({Token::Type::Name, src_.substr(pos_, e - pos_), line});
            advance_to(e);
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            number(line);
        } else if (c == '\'' || c == '"') {
            string(line);
        } else {
            static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
            for (std::string_view op : kTwo) {
                if (std::string_view(src_).substr(pos_, 2) == op) {
                    out_.push_back({Token::Type::Op, std::string(op), line});
                    advance_to(pos_ + 2);
                    return;
                }
            }
            if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
                fail(line, fmt::format("unexpected character '{}'", c));
            if (c == '(' || c == '[' || c == '{') ++depth;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
            out_.push_back({Token::Type::Op, std::string(1, c), line});
            advance_to(pos_ + 1);
        }
    }
    void number(int line) {
        const bool after_dot =
            !out_.empty() && out_.back().type == Token::Type::Op && out_.back().text == ".";
        size_t e = pos_;
        const auto digits = [&] {
            while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                       (src_[e] == '_' && e + 1 < src_.size() &&
                                        std::isdigit(static_cast<unsigned char>(src_[e + 1])))))
                ++e;
        };
        digits();
        bool is_float = false;
        if (!after_dot && e + 1 < src_.size() && src_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
            ++e;
            digits();
            is_float = true;
        }
        if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
            size_t x = e + 1;
            if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
            if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
                e = x;
                digits();
                is_float = true;
            }
        }
        std::string text = src_.substr(pos_, e - pos_);
        std::erase(text, '_');
        out_.push_back({is_float ? Token::Type::Float : Token::Type::Int, text, line});
        advance_to(e);
    }
    void string(int line) {
        const char quote = src_[pos_];
        std::string value;
        size_t k = pos_ + 1;
        while (true) {
            if (k >= src_.size()) fail(line, "unterminated string");
            const char c = src_[k];
            if (c == quote) break;
            if (c != '\\') {
                value += c;
                ++k;
                continue;
            }
            k = escape(k + 1, value, line);
        }
        out_.push_back({Token::Type::String, value, line});
        advance_to(k + 1);
    }
    // Python's unicode-escape decoding of the escape after a backslash at src_[k - 1].
    size_t escape(size_t k, std::string& value, int line) {
        if (k >= src_.size()) fail(line, "unterminated string");
        const char e = src_[k];
        static constexpr std::string_view kFrom = "\\'\"abfnrtv\n", kTo = "\\'\"\a\b\f\n\r\t\v";
        if (const size_t at = kFrom.find(e); at != std::string_view::npos) {
            if (e != '\n') value += kTo[at];  // backslash-newline is a line continuation
            return k + 1;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            size_t n = 0;
            for (; n < 3 && k + n < src_.size() && src_[k + n] >= '0' && src_[k + n] <= '7'; ++n)
                cp = cp * 8 + uint32_t(src_[k + n] - '0');
            utf8::append(value, cp);
            return k + n;
        }
        const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (width) {
            uint32_t cp = 0;
            for (size_t n = 1; n <= width; ++n) {
                const char h = k + n < src_.size() ? src_[k + n] : '\0';
                if (!std::isxdigit(static_cast<unsigned char>(h)))
                    fail(line, fmt::format("truncated \\{} escape in a string", e));
                cp = cp * 16 +
                     uint32_t(std::isdigit(static_cast<unsigned char>(h))
                                  ? h - '0'
                                  : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                fail(line, fmt::format("escape \\{} of U+{:X} is not a character", e, cp));
            utf8::append(value, cp);
            return k + width + 1;
        }
        if (e == 'N') fail(line, "unsupported string escape '\\N{...}'");
        value += '\\';  // Python keeps an unknown escape as it is
        return k;
    }

    std::string src_;
    size_t pos_ = 0;
    int line_ = 1;
    std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
    return Lexer(source).run();
}

}  // namespace ete::jinja
