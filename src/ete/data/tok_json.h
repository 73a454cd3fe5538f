// ete/data/tok_json.h — internal to the tokenizer: checked reads of tokenizer.json fields. Every
// failure names the file (`src`) and the field's place in it (`where`).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "ete/core/error.h"

namespace ete::tok {

using json = nlohmann::json;

inline const json* field(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

inline bool bool_field(const json& obj, const char* key, bool dflt, std::string_view src,
                       std::string_view where) {
    const json* v = field(obj, key);
    if (v == nullptr) return dflt;
    ETE_CHECK(v->is_boolean(), "{}: {}.{} must be true or false", src, where, key);
    return v->get<bool>();
}

inline std::string string_field(const json& obj, const char* key, std::string_view src,
                                std::string_view where) {
    const json* v = field(obj, key);
    ETE_CHECK(v != nullptr && v->is_string(), "{}: {}.{} must be a string", src, where, key);
    return v->get<std::string>();
}

inline size_t count_field(const json& obj, const char* key, size_t dflt, std::string_view src,
                          std::string_view where) {
    const json* v = field(obj, key);
    if (v == nullptr) return dflt;
    ETE_CHECK(v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0),
              "{}: {}.{} must be a non-negative integer", src, where, key);
    return v->get<size_t>();
}

inline std::string type_of(const json& obj, std::string_view src, std::string_view where) {
    ETE_CHECK(obj.is_object(), "{}: {} must be an object", src, where);
    const json* t = field(obj, "type");
    ETE_CHECK(t != nullptr && t->is_string(), "{}: {}.type must be a string", src, where);
    return t->get<std::string>();
}

// The items of a Sequence's array `key`, checked to be an array.
inline const json& sequence_items(const json& obj, const char* key, std::string_view src,
                                  std::string_view where) {
    const json* seq = field(obj, key);
    ETE_CHECK(seq != nullptr && seq->is_array(), "{}: {}.{} must be an array", src, where, key);
    return *seq;
}

// `s` with its line breaks and other control characters written as JSON escapes ("\n",
// "\u001b"; also U+0085, U+2028 and U+2029), so that a message quoting a token, a pattern or a
// type name from the file stays on one line.
inline std::string one_line(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        const bool nel = c == 0xC2 && i + 1 < s.size() && s[i + 1] == '\x85';
        const bool sep = c == 0xE2 && i + 2 < s.size() && s[i + 1] == '\x80' &&
                         (s[i + 2] == '\xA8' || s[i + 2] == '\xA9');
        if (nel || sep) {
            out += nel ? "\\u0085" : s[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
            i += nel ? 1 : 2;
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            out += fmt::format("\\u{:04x}", c);
        } else {
            out += s[i];
        }
    }
    return out;
}

// One character (a UTF-8 string of one code point), as HF's char fields are written.
std::string char_field(const json& obj, const char* key, std::string_view src,
                       std::string_view where);

}  // namespace ete::tok
