// ete/data/unicode_normalize.cpp — NFC, NFD, NFKC, NFKD and Lowercase, as HF tokenizers does them.
//
// Normalization (UAX #15) with Unicode 9.0 data, HF's: decompose each character fully (canonical
// or compatibility mappings, Hangul algorithmically), sort each run of non-starters stably by
// combining class, then for NFC/NFKC recompose each character with the last starter unless a
// character in between blocks it.
//
// Speed: text splits into segments at "boundaries", characters with combining class 0 whose quick
// check for the form is Yes (the generator checks that their decompositions begin with such a
// character too). A segment is normalized by itself, and only when the quick check finds work in
// it (a No or Maybe character, or non-starters out of order); all other bytes are copied. ASCII is
// a boundary in every form, so ASCII runs are skipped a word at a time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ete/core/error.h"
#include "ete/data/unicode.h"
#include "ete/data/unicode_tables.h"
#include "ete/data/utf8.h"

namespace ete::unicode {

namespace {

using detail::norm_entry;
using detail::NormEntry;

// ---- UTF-8 ----

struct Decoded {
    char32_t cp;
    uint32_t len;  // 0: not valid UTF-8
};

// The code point at s[i] (utf8.h's checks: no overlong forms, surrogates or values above
// U+10FFFF).
Decoded decode(std::string_view s, size_t i) {
    const size_t n = utf8::char_len(s, i);
    return {n == 0 ? 0 : utf8::decode(s, i, n), static_cast<uint32_t>(n)};
}

Decoded decode_checked(std::string_view s, size_t i, const char* what) {
    const Decoded d = decode(s, i);
    ETE_CHECK(d.len != 0, "unicode::{}: invalid UTF-8 at byte {}", what, i);
    return d;
}

void append_utf8(std::string& out, char32_t cp) {
    utf8::append(out, cp);
}

// The end of the run of ASCII bytes that starts at s[i].
size_t ascii_end(std::string_view s, size_t i) {
    constexpr uint64_t kHigh = 0x8080808080808080ULL;
    while (i + 8 <= s.size()) {
        uint64_t w;
        std::memcpy(&w, s.data() + i, 8);
        if (w & kHigh) break;
        i += 8;
    }
    while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
    return i;
}

// ---- Hangul (Unicode ch. 3.12) ----

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// ---- one segment ----

struct Form {
    const char* name;
    uint8_t not_yes;  // NormFlag bits that make the quick check No or Maybe
    bool compat;
    bool compose;
};

constexpr Form kNfd{"nfd", detail::kNfdNo, false, false};
constexpr Form kNfkd{"nfkd", detail::kNfkdNo, true, false};
constexpr Form kNfc{"nfc", detail::kNfcNo | detail::kNfcMaybe, false, true};
constexpr Form kNfkc{"nfkc", detail::kNfkcNo | detail::kNfkcMaybe, true, true};

struct Char {
    char32_t cp;
    uint8_t ccc;
};

void decompose(char32_t cp, bool compat, std::vector<Char>& buf) {
    if (cp - kSBase < kSCount) {
        const char32_t s = cp - kSBase;
        buf.push_back({kLBase + s / kNCount, 0});
        buf.push_back({kVBase + (s % kNCount) / kTCount, 0});
        if (s % kTCount != 0) buf.push_back({kTBase + s % kTCount, 0});
        return;
    }
    const NormEntry& e = norm_entry(cp);
    const uint8_t len = compat ? e.compat_length : e.canonical_length;
    if (len == 0) {
        buf.push_back({cp, e.ccc});
        return;
    }
    const char32_t* d =
        detail::kDecompositionPool + (compat ? e.compat_offset : e.canonical_offset);
    for (uint8_t k = 0; k < len; ++k) buf.push_back({d[k], norm_entry(d[k]).ccc});
}

// Canonical ordering: each run of non-starters sorted stably by combining class.
void reorder(std::vector<Char>& buf) {
    const auto by_ccc = [](const Char& a, const Char& b) { return a.ccc < b.ccc; };
    for (size_t i = 0; i < buf.size();) {
        if (buf[i].ccc == 0) {
            ++i;
            continue;
        }
        size_t j = i + 1;
        while (j < buf.size() && buf[j].ccc != 0) ++j;
        if (j - i > 1) std::stable_sort(buf.begin() + i, buf.begin() + j, by_ccc);
        i = j;
    }
}

// The primary composite of a + b, or 0.
char32_t compose_pair(char32_t a, char32_t b) {
    if (a - kLBase < kLCount && b - kVBase < kVCount) {
        return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    }
    if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - (kTBase + 1) < kTCount - 1) {
        return a + (b - kTBase);
    }
    const auto* end = std::end(detail::kCompositions);
    const auto* it = std::lower_bound(
        std::begin(detail::kCompositions), end, std::pair{a, b},
        [](const detail::Composition& c, std::pair<char32_t, char32_t> key) {
            return c.first < key.first || (c.first == key.first && c.second < key.second);
        });
    return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// Canonical composition in place: each character joins the last starter when nothing between
// them blocks it (a starter, or a non-starter of the same or a higher class).
void compose(std::vector<Char>& buf) {
    size_t starter = SIZE_MAX;  // index (in the output prefix) of the last starter
    uint8_t last_ccc = 0;       // class of the last output character; 0 = it is the starter
    size_t w = 0;
    for (size_t i = 0; i < buf.size(); ++i) {
        const Char c = buf[i];
        if (starter != SIZE_MAX && (last_ccc == 0 || last_ccc < c.ccc)) {
            if (const char32_t k = compose_pair(buf[starter].cp, c.cp)) {
                buf[starter].cp = k;
                continue;
            }
        }
        if (c.ccc == 0) starter = w;
        last_ccc = c.ccc;
        buf[w++] = c;
    }
    buf.resize(w);
}

void normalize_segment(std::string_view seg, const Form& form, std::vector<Char>& buf,
                       std::string& out) {
    buf.clear();
    for (size_t i = 0; i < seg.size();) {
        const Decoded d = decode(seg, i);  // already validated by the caller
        decompose(d.cp, form.compat, buf);
        i += d.len;
    }
    reorder(buf);
    if (form.compose) compose(buf);
    for (const Char& c : buf) append_utf8(out, c.cp);
}

// ---- whole strings ----

// Copies the clean parts of `in` and normalizes the segments where the quick check finds work.
class Normalizer {
  public:
    Normalizer(std::string_view in, const Form& form) : in_(in), form_(form) {}

    std::string run() {
        size_t pos = ascii_end(in_, 0);
        if (pos == in_.size()) return std::string(in_);
        seg_ = pos == 0 ? 0 : pos - 1;
        uint8_t last_ccc = 0;
        while (pos < in_.size()) {
            if (static_cast<unsigned char>(in_[pos]) < 0x80) {
                boundary(pos);
                pos = ascii_end(in_, pos);
                seg_ = pos - 1;
                last_ccc = 0;
                continue;
            }
            const Decoded d = decode_checked(in_, pos, form_.name);
            const NormEntry& e = norm_entry(d.cp);
            if (e.ccc == 0 && !(e.flags & form_.not_yes)) {
                boundary(pos);
            } else if ((e.flags & form_.not_yes) || (e.ccc != 0 && last_ccc > e.ccc)) {
                dirty_ = true;
            }
            last_ccc = e.ccc;
            pos += d.len;
        }
        boundary(in_.size());
        if (copied_ == 0) return std::string(in_);
        out_.append(in_.substr(copied_));
        return std::move(out_);
    }

  private:
    // A segment ends before `pos`: normalize it if it needs work; a new one starts at pos.
    void boundary(size_t pos) {
        if (dirty_) {
            if (out_.empty()) out_.reserve(in_.size() + in_.size() / 8 + 16);
            out_.append(in_.substr(copied_, seg_ - copied_));
            normalize_segment(in_.substr(seg_, pos - seg_), form_, buf_, out_);
            copied_ = pos;
            dirty_ = false;
        }
        seg_ = pos;
    }

    std::string_view in_;
    const Form& form_;
    std::string out_;
    std::vector<Char> buf_;
    size_t copied_ = 0;  // in_[0, copied_) is already in out_
    size_t seg_ = 0;     // start of the current segment
    bool dirty_ = false;
};

// Appends the run of ASCII at s[pos], lowercased; returns its end.
size_t lowercase_ascii_run(std::string_view s, size_t pos, std::string& out) {
    const size_t end = ascii_end(s, pos);
    const size_t o = out.size();
    out.resize(o + (end - pos));
    char* dst = out.data() + o;
    for (size_t k = pos; k < end; ++k) {
        const auto b = static_cast<unsigned char>(s[k]);
        *dst++ = static_cast<char>(static_cast<unsigned>(b - 'A') < 26u ? b + 32 : b);
    }
    return end;
}

}  // namespace

std::string nfc(std::string_view utf8) {
    return Normalizer(utf8, kNfc).run();
}
std::string nfd(std::string_view utf8) {
    return Normalizer(utf8, kNfd).run();
}
std::string nfkc(std::string_view utf8) {
    return Normalizer(utf8, kNfkc).run();
}
std::string nfkd(std::string_view utf8) {
    return Normalizer(utf8, kNfkd).run();
}

std::string lowercase(std::string_view utf8) {
    std::string out;
    out.reserve(utf8.size() + 8);
    for (size_t pos = 0; pos < utf8.size();) {
        if (static_cast<unsigned char>(utf8[pos]) < 0x80) {
            pos = lowercase_ascii_run(utf8, pos, out);
            continue;
        }
        const Decoded d = decode_checked(utf8, pos, "lowercase");
        const uint8_t id =
            detail::two_stage<detail::kLowerShift>(detail::kLowerIndex, detail::kLowerData, d.cp);
        if (id == 0) {
            out.append(utf8.substr(pos, d.len));
        } else if (id == detail::kLowerSpecial) {
            out.append("i\xCC\x87");  // U+0130 -> U+0069 U+0307
        } else {
            append_utf8(
                out, static_cast<char32_t>(static_cast<int32_t>(d.cp) + detail::kLowerDeltas[id]));
        }
        pos += d.len;
    }
    return out;
}

}  // namespace ete::unicode
