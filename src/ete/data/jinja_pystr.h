// ete/data/jinja_pystr.h — Python's str operations on UTF-8 text, for the chat-template
// interpreter: code-point length and slicing, str.isspace, strip/split/splitlines, repr, and the
// case mappings (ASCII exactly; text with other cased letters is refused rather than mapped
// differently from Python).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ete::jinja {

std::u32string to_u32(std::string_view utf8);
std::string to_utf8(std::u32string_view cps);
size_t cp_length(std::string_view utf8);  // len(s)

bool py_isspace(char32_t c);      // str.isspace
bool py_isprintable(char32_t c);  // str.isprintable (what repr keeps unescaped)

// repr(s): single quotes unless s has ' and no ", escapes as Python writes them.
std::string py_repr(std::string_view s);

// s.strip(chars) / lstrip / rstrip; no chars: whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// s.split(sep, maxsplit) and s.rsplit(sep, maxsplit); no sep: runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
// s.splitlines(keepends) (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029).
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// s.replace(old, new, count) (count < 0: all).
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);

// str.lower/upper/capitalize/title and Jinja's title filter; `what` names the operation in the
// error for text with non-ASCII cased letters.
enum class CaseOp { Lower, Upper, Capitalize, PyTitle, JinjaTitle };
std::string py_case(std::string_view s, CaseOp op);

}  // namespace ete::jinja
