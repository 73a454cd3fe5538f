// ete/data/utf8.h — UTF-8 decoding, encoding and lossy repair, as Rust's std (and so HF) do it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ete::utf8 {

inline bool is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
inline size_t char_len(std::string_view s, size_t i) {
    const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = at(0);
    if (c < 0x80) return 1;
    const size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                     : c >= 0xE0 && c <= 0xEF ? 3
                     : c >= 0xF0 && c <= 0xF4 ? 4
                                              : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if (!is_cont(at(k))) return 0;
    }
    const unsigned char d = at(1);
    if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F)) return 0;
    if ((c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F)) return 0;
    return n;
}

// The code point of the valid sequence of `len` bytes at s[i] (len from char_len).
inline char32_t decode(std::string_view s, size_t i, size_t len) {
    const auto b = [&](size_t k) {
        return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]));
    };
    switch (len) {
        case 1:
            return b(0);
        case 2:
            return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
        case 3:
            return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
        default:
            return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) |
                   (b(3) & 0x3F);
    }
}

inline void append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of the invalid stretch at s[i] that one U+FFFD stands for: the longest prefix of a valid
// sequence ("maximal subpart", as Rust's from_utf8_lossy and the Unicode standard count), at
// least 1.
size_t invalid_len(std::string_view s, size_t i);

struct Repair {
    size_t replaced = 0;                           // U+FFFD characters inserted
    size_t first_offset = std::string_view::npos;  // byte offset of the first invalid byte
};

// `s` with each maximal invalid subpart replaced by U+FFFD (Rust's String::from_utf8_lossy).
std::string repair(std::string_view s, Repair* stats = nullptr);
bool valid(std::string_view s);

}  // namespace ete::utf8
