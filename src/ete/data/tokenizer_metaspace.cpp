// ete/data/tokenizer_metaspace.cpp — SentencePiece-style ("metaspace", Llama-2) BPE: tables,
// normalization ("▁" for spaces, prefix), BPE over code points with <0xNN> byte fallback, decode.
#include <fmt/format.h>

#include "ete/core/error.h"
#include "ete/data/piece_cache.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

constexpr std::string_view kMeta = "\xE2\x96\x81";             // U+2581 '▁'
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

bool is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
size_t utf8_char_len(std::string_view s, size_t i) {
    const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned char c = at(0);
    if (c < 0x80) return 1;
    size_t n = c >= 0xC2 && c <= 0xDF   ? 2
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

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_char_len(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// "<0xNN>" (either case, as HF's ByteFallback decoder accepts) -> the byte, else -1.
int byte_token_value(std::string_view tok) {
    if (tok.size() != 6 || !tok.starts_with("<0x") || tok[5] != '>') return -1;
    int hi = hex_digit(tok[3]), lo = hex_digit(tok[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

void Tokenizer::finalize_metaspace(std::string_view source) {
    byte_id_.fill(-1);
    fallback_id_.fill(-1);
    token_id_.clear();
    bytes_id_.clear();
    for (int32_t id = 0; id < vocab_size(); ++id) {
        if (kind_[id] == TokenKind::Unused) continue;
        auto [it, fresh] = token_id_.emplace(bytes_[id], id);
        ETE_CHECK(fresh, "{}: token '{}' appears twice (ids {} and {})", source, it->first,
                  it->second, id);
        if (kind_[id] == TokenKind::Model) bytes_id_.emplace(bytes_[id], id);
    }
    // The encoder emits HF's exact spelling "<0x0A>"; other spellings only decode.
    for (int b = 0; b < 256; ++b) {
        auto it = bytes_id_.find(fmt::format("<0x{:02X}>", b));
        if (it != bytes_id_.end()) fallback_id_[b] = it->second;
    }
    unk_id_ = -1;
    if (!sp_->unk_token.empty()) {
        auto id = token_to_id(sp_->unk_token);
        ETE_CHECK(id.has_value(), "{}: model.unk_token '{}' is not in the vocab", source,
                  sp_->unk_token);
        unk_id_ = *id;
    }
}

void Tokenizer::encode_metaspace(std::string_view text, bool text_start, PieceCache& cache,
                                 std::vector<int32_t>& out) const {
    if (text.empty()) return;
    const Metaspace& m = *sp_;
    std::string& s = cache.normalized;
    s.clear();
    if (m.prepend_normalizer) s += kMeta;
    const bool replace = m.replace_normalizer || m.pre_tokenizer;
    for (char ch : text) {
        if (ch == ' ' && replace) {
            s += kMeta;
        } else {
            s += ch;
        }
    }
    if (m.pre_tokenizer && !s.starts_with(kMeta) &&
        (m.scheme == Prepend::Always || (m.scheme == Prepend::First && text_start))) {
        s.insert(0, kMeta);
    }
    cache.pieces.clear();
    if (m.pre_tokenizer && m.split) {
        // Metaspace split: cut before each "▁", which starts the next piece (MergedWithNext).
        size_t begin = 0;
        for (size_t p = s.find(kMeta, 1); p != std::string::npos; p = s.find(kMeta, p + 1)) {
            cache.pieces.push_back(std::string_view(s).substr(begin, p - begin));
            begin = p;
        }
        cache.pieces.push_back(std::string_view(s).substr(begin));
    } else {
        cache.pieces.push_back(s);
    }
    for (std::string_view piece : cache.pieces) {
        std::span<const int32_t> hit = cache.find(piece);
        if (!hit.empty()) {
            out.insert(out.end(), hit.begin(), hit.end());
            continue;
        }
        size_t first = out.size();
        sp_piece(piece, cache, out);
        cache.insert(piece, std::span<const int32_t>(out.data() + first, out.size() - first));
    }
}

void Tokenizer::sp_piece(std::string_view piece, PieceCache& c, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = bytes_id_.find(piece);
        if (it != bytes_id_.end()) return out.push_back(it->second);
    }
    // Initial symbols: one per code point (an invalid byte counts as one), byte fallback or unk.
    c.sym.clear();
    bool last_unk = false;
    for (size_t i = 0; i < piece.size();) {
        const size_t len = std::max<size_t>(1, utf8_char_len(piece, i));
        const std::string_view ch = piece.substr(i, len);
        i += len;
        if (auto it = bytes_id_.find(ch); it != bytes_id_.end()) {
            c.sym.push_back(it->second);
            last_unk = false;
            continue;
        }
        bool have_bytes = sp_->byte_fallback;
        for (char b : ch)
            have_bytes = have_bytes && fallback_id_[static_cast<unsigned char>(b)] >= 0;
        if (have_bytes) {
            for (char b : ch) c.sym.push_back(fallback_id_[static_cast<unsigned char>(b)]);
            last_unk = false;
            continue;
        }
        if (unk_id_ < 0) continue;  // no unk_token: HF drops the character
        if (!(sp_->fuse_unk && last_unk)) c.sym.push_back(unk_id_);
        last_unk = true;
    }
    if (c.sym.empty()) return;
    merge_symbols(static_cast<int32_t>(c.sym.size()), c, out);
}

std::string Tokenizer::decode_metaspace(std::span<const int32_t> ids) const {
    // HF's decoder chain: Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", start 1).
    std::string out, run;  // run: bytes of consecutive <0xNN> tokens
    auto flush = [&] {
        if (valid_utf8(run)) {
            out += run;
        } else {
            for (size_t k = 0; k < run.size(); ++k) out += kReplacementChar;
        }
        run.clear();
    };
    for (int32_t id : ids) {
        const std::string& tok = id_to_bytes(id);
        if (int b = byte_token_value(tok); b >= 0) {
            run += static_cast<char>(b);
            continue;
        }
        flush();
        for (size_t p = 0; p < tok.size();) {
            if (tok.compare(p, kMeta.size(), kMeta) == 0) {
                out += ' ';
                p += kMeta.size();
            } else {
                out += tok[p++];
            }
        }
    }
    flush();
    if (sp_->strip_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
    return out;
}

}  // namespace ete
