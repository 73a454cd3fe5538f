// ete/data/byte_level.h — GPT-2's byte-to-printable-unicode alphabet.
//
// Byte-level BPE works on raw bytes, but tokenizer.json stores tokens as text. GPT-2 maps each
// byte to one printable code point: the 188 bytes that are already printable (33..126, 161..172,
// 174..255) map to themselves, the other 68 map, in increasing byte order, to U+0100, U+0101, ...
// So space (0x20) becomes U+0120 'Ġ', '\n' becomes U+010A 'Ċ', byte 0 becomes U+0100 'Ā'.
#pragma once

#include <string>
#include <string_view>

namespace ete::data {

// The UTF-8 encoding of the code point that stands for byte `b`.
const std::string& byte_level_char(unsigned char b);

// Raw bytes -> the byte-level text stored in tokenizer.json.
std::string bytes_to_byte_level(std::string_view raw);

// Byte-level text -> raw bytes; false when `text` holds a code point outside the alphabet (or is
// not UTF-8), in which case `out` is unspecified.
bool byte_level_to_bytes(std::string_view text, std::string& out);

}  // namespace ete::data
