// ete/data/utf8.cpp — lossy UTF-8 repair.
#include "ete/data/utf8.h"

namespace ete::utf8 {

size_t invalid_len(std::string_view s, size_t i) {
    const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = at(0);
    const size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                     : c >= 0xE0 && c <= 0xEF ? 3
                     : c >= 0xF0 && c <= 0xF4 ? 4
                                              : 0;
    if (n == 0) return 1;  // a continuation byte or a byte that never starts a sequence
    // The second byte's allowed range depends on the lead byte; later bytes are 80..BF.
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    size_t k = 1;
    for (; k < n && i + k < s.size(); ++k) {
        const unsigned char d = at(k);
        const bool ok = k == 1 ? d >= lo && d <= hi : is_cont(d);
        if (!ok) break;
    }
    return k;
}

bool valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const size_t n = char_len(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

std::string repair(std::string_view s, Repair* stats) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = char_len(s, i);
        if (n != 0) {
            out.append(s.substr(i, n));
            i += n;
            continue;
        }
        if (stats != nullptr) {
            if (stats->replaced == 0) stats->first_offset = i;
            ++stats->replaced;
        }
        out += kReplacement;
        i += invalid_len(s, i);
    }
    return out;
}

}  // namespace ete::utf8
