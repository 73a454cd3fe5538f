// ete/core/json_file.h — JSON a user hands ETE (config.json, tokenizer.json, adapter_config.json,
// state.json, quantization state): parsed with a nesting limit, so a hostile file never reaches
// the readers that walk it recursively (a tokenizer.json whose normalizer Sequence nested 20,000
// deep overflowed the stack), and every error names the file.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "ete/core/error.h"

namespace ete {

// Real files nest under 10 levels (tokenizer.json: a Sequence of Sequences of a normalizer).
inline constexpr int kMaxJsonDepth = 64;

// Parses text; throws ete::Error "WHERE: invalid JSON (REASON)" for malformed text and for
// arrays or objects nested deeper than max_depth (nothing deeper is built).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          int max_depth = kMaxJsonDepth);
// nlohmann's SAX parse of text into `sax`, a handler that counts its nesting and stops beyond
// max_depth (too_deep()), with parse_json's errors. parse_json's tree builder is one such handler;
// the tokenizer.json reader (data/tok_json_stream.cpp) another.
template <typename Sax>
void sax_parse_json(std::string_view text, const std::string& where, Sax& sax, int max_depth) {
    try {
        nlohmann::json::sax_parse(text, &sax);
    } catch (const nlohmann::json::exception& e) {
        throw_error(fmt::format("{}: invalid JSON ({})", where, e.what()));
    }
    ETE_CHECK(!sax.too_deep(), "{}: invalid JSON (arrays and objects nested deeper than {} levels)",
              where, max_depth);
}
// parse_json of the file's contents (core/file_util.h read_file), named by its path.
nlohmann::json read_json_file(const std::string& path, int max_depth = kMaxJsonDepth);

// What a bad value looks like in an error: its JSON, cut at 64 characters (a million-digit
// number would make a megabyte-long line).
std::string json_excerpt(const nlohmann::json& v);

// j[key] as T, strictly — every reader of a user's file takes numbers through here, so nothing
// is narrowed: an integer where an integer belongs, in T's range (not 2.5, not 2^32 + 4, not
// "64", not true), a finite number for floats, a boolean for flags, a string for strings. A
// missing key gives the fallback; an explicit null does too unless nullable is false. Errors:
// "WHERE: field 'KEY' = VALUE: expected ...".
template <typename T>
T json_get(const nlohmann::json& j, const char* key, T fallback, const std::string& where,
           bool nullable = true) {
    if (!j.is_object() || !j.contains(key)) return fallback;
    const nlohmann::json& v = j[key];
    auto bad = [&](const char* expected) {
        throw_error(
            fmt::format("{}: field '{}' = {}: expected {}", where, key, json_excerpt(v), expected));
    };
    if (v.is_null()) {
        if (!nullable) bad("a value, not null");
        return fallback;
    }
    if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_boolean()) bad("true or false");
        return v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
        if (!v.is_number_integer()) bad("an integer");
        if (v.is_number_unsigned()) {
            if (v.get<uint64_t>() > uint64_t(std::numeric_limits<T>::max())) bad("an int in range");
        } else if (v.get<int64_t>() < int64_t(std::numeric_limits<T>::min()) ||
                   v.get<int64_t>() > int64_t(std::numeric_limits<T>::max())) {
            bad("an int in range");
        }
        return T(v.get<int64_t>());
    } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number() || !std::isfinite(v.get<double>())) bad("a finite number");
        if (std::fabs(v.get<double>()) > double(std::numeric_limits<T>::max()))
            bad("a number in range");
        return T(v.get<double>());
    } else {
        if (!v.is_string()) bad("a string");
        return v.get<T>();
    }
}

// A metadata string holding a plain decimal integer in [lo, hi] ("64", not "64.5", " 64", "0x40"
// or "abc"); else an ete::Error "WHERE: 'TEXT': expected an integer in [lo, hi]".
int64_t parse_int_field(const std::string& text, int64_t lo, int64_t hi, const std::string& where);
// "true" or "false"; else an ete::Error naming where.
bool parse_bool_field(const std::string& text, const std::string& where);

}  // namespace ete
