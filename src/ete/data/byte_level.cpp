// ete/data/byte_level.cpp — the GPT-2 byte <-> printable code point tables.
#include "ete/data/byte_level.h"

#include <array>
#include <cstdint>

namespace ete::data {
namespace {

bool is_printable_byte(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

std::string utf8_encode(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

struct Tables {
    std::array<std::string, 256> to_char;
    std::array<int16_t, 512> from_cp;  // code point (all < 0x144) -> byte, or -1
    Tables() {
        from_cp.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            uint32_t cp = is_printable_byte(b) ? static_cast<uint32_t>(b) : next++;
            to_char[b] = utf8_encode(cp);
            from_cp[cp] = static_cast<int16_t>(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) {
    return tables().to_char[b];
}

std::string bytes_to_byte_level(std::string_view raw) {
    const Tables& t = tables();
    std::string out;
    out.reserve(raw.size() * 2);
    for (char c : raw) out += t.to_char[static_cast<unsigned char>(c)];
    return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
    const Tables& t = tables();
    out.clear();
    size_t i = 0;
    while (i < text.size()) {
        auto c0 = static_cast<unsigned char>(text[i]);
        uint32_t cp;
        if (c0 < 0x80) {
            cp = c0;
            i += 1;
        } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
            // Every alphabet code point is below U+0800, so two-byte sequences suffice.
            auto c1 = static_cast<unsigned char>(text[i + 1]);
            if ((c1 & 0xC0) != 0x80) return false;
            cp = ((c0 & 0x1Fu) << 6) | (c1 & 0x3Fu);
            if (cp < 0x80) return false;  // overlong encoding
            i += 2;
        } else {
            return false;
        }
        if (cp >= t.from_cp.size() || t.from_cp[cp] < 0) return false;
        out += static_cast<char>(t.from_cp[cp]);
    }
    return true;
}

}  // namespace ete::data
