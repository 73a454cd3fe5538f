// ete/data/unicode_tables.h — internal: the generated tables of ete::unicode and their lookups.
//
// Only unicode_category.cpp and unicode_normalize.cpp include this. The data itself is
// unicode_tables.inc, written by tools/gen_unicode_tables.mjs (its header says how to rerun it).
// Every per-code-point property is a two-stage table: Index[cp >> Shift] names a block of
// 1 << Shift values in Data, so identical blocks (most of the code space) are stored once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ete/data/unicode.h"

namespace ete::unicode::detail {

// One class of the range pool: its 16.0 ranges and the ADDED/REMOVED ranges against 14.0.
struct ClassEntry {
    std::string_view name;
    uint32_t offset, count;
    uint32_t added_offset, added_count;
    uint32_t removed_offset, removed_count;
};

// Normalization flags (bit set = the quick check is not Yes for that form).
enum NormFlag : uint8_t {
    kNfdNo = 1,
    kNfkdNo = 2,
    kNfcNo = 4,
    kNfcMaybe = 8,
    kNfkcNo = 16,
    kNfkcMaybe = 32,
};

// Normalization properties shared by many code points. The decompositions are full (applied
// recursively), as slices of kDecompositionPool; length 0 = none. Hangul syllables have none
// here: they decompose algorithmically.
struct NormEntry {
    uint8_t ccc;    // canonical combining class
    uint8_t flags;  // NormFlag bits
    uint16_t canonical_offset;
    uint8_t canonical_length;
    uint16_t compat_offset;
    uint8_t compat_length;  // the full compatibility decomposition (also set when canonical)
};

// A primary composite: first + second compose to composite (sorted by first, then second).
struct Composition {
    char32_t first, second, composite;
};

// The lowercase table's value for U+0130, whose lowercase is two characters.
inline constexpr uint8_t kLowerSpecial = 255;

#include "ete/data/unicode_tables.inc"

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;

// The value of a two-stage table at cp (cp <= kMaxCodePoint).
template <int Shift, typename T, size_t NI, size_t ND>
inline T two_stage(const uint16_t (&index)[NI], const T (&data)[ND], char32_t cp) {
    static_assert((NI << Shift) == kMaxCodePoint + 1, "the index covers every code point");
    const size_t block = index[cp >> Shift];
    return data[(block << Shift) | (cp & ((char32_t(1) << Shift) - 1))];
}

inline const NormEntry& norm_entry(char32_t cp) {
    return kNormEntries[two_stage<kNormShift>(kNormIndex, kNormData, cp)];
}

}  // namespace ete::unicode::detail
