// ete/data/tokenizer.cpp — tokenizer tables, encode (added tokens, pipeline, BPE) and decode.
#include "ete/data/tokenizer.h"

#include <omp.h>

#include <algorithm>

#include "ete/core/error.h"
#include "ete/data/added_matcher.h"
#include "ete/data/byte_level.h"
#include "ete/data/piece_cache.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tok_pipeline.h"
#include "ete/data/unicode.h"
#include "ete/data/utf8.h"

namespace ete {
namespace {

// Encoding splits texts above this size into line-aligned chunks encoded in parallel.
constexpr size_t kParallelChunkBytes = 256 * 1024;
// A stretch encoded piece-parallel (encode_pieces) is cut into ranges of about this many pieces.
constexpr size_t kPiecesPerPart = 16 * 1024;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr int32_t kSpaceMarkCode = 0x2581;

// The code point that ends at `end` (the character starting at or after `floor`), or -1 when the
// bytes there are not one whole UTF-8 character.
int32_t char_before(std::string_view s, size_t floor, size_t end) {
    size_t b = end - 1;
    while (b > floor && end - b < 4 && utf8::is_cont(static_cast<unsigned char>(s[b]))) --b;
    const size_t n = end - b;
    return utf8::char_len(s, b) == n ? static_cast<int32_t>(utf8::decode(s, b, n)) : -1;
}

}  // namespace

void Tokenizer::use_gpt2_pipeline() {
    pipe_ = tok::gpt2_pipeline();
    splitter_ = std::make_shared<const RegexSplitter>(std::string(kGpt2SplitPattern));
}

bool Tokenizer::is_byte_level() const {
    return pipe_->byte_level;
}

const std::string& Tokenizer::split_pattern() const {
    return pipe_->split_pattern;
}

const std::vector<int32_t>& Tokenizer::special_prefix() const {
    return pipe_->post.prefix;
}

const std::vector<int32_t>& Tokenizer::special_suffix() const {
    return pipe_->post.suffix;
}

void Tokenizer::finalize(std::string_view source, StringIdMap* vocab) {
    ETE_ASSERT(bytes_.size() == kind_.size() && pipe_ != nullptr);
    in_model_.resize(bytes_.size(), false);
    special_.assign(bytes_.size(), false);
    for (const AddedToken& t : added_) {
        ETE_CHECK(!t.content.empty(), "{}: added token {} has empty content", source, t.id);
        ETE_ASSERT(t.id >= 0 && t.id < vocab_size() && kind_[t.id] == TokenKind::Added);
        // HF matches a normalized token by its normalized content, and that is also the token's
        // text when decoding; decode's skip_special compares that text with the specials'
        // contents, so a special token that normalizes to another text is never skipped.
        bytes_[t.id] = t.content;
        if (t.normalized && pipe_->normalizer) pipe_->normalizer->normalize(bytes_[t.id]);
        special_[t.id] = t.special && bytes_[t.id] == t.content;
    }
    if (pipe_->byte_level) {
        finalize_byte_level(source, vocab);
    } else {
        finalize_chars(source, vocab);
    }
    merge_rule_.reset(merges_.size());
    no_cut_after_.clear();
    // Without an unk token HF drops unknown characters, so a '▁' may end up next to another.
    cut_at_space_ = !pipe_->byte_level && !ignore_merges_ && bytes_id_.contains(kSpaceMark) &&
                    unk_id_ >= 0 && !bytes_[unk_id_].ends_with(kSpaceMark);
    for (size_t r = 0; r < merges_.size(); ++r) {
        auto [a, b] = merges_[r];
        auto it = bytes_id_.find(bytes_[a] + bytes_[b]);
        ETE_CHECK(it != bytes_id_.end(),
                  "{}: model.merges[{}] ('{} {}') makes a token missing from model.vocab", source,
                  r, id_to_token(a), id_to_token(b));
        // A pair listed twice keeps its last rank, as HF's merge map does.
        merge_rule_.insert_or_assign(a, b, {static_cast<int32_t>(r), it->second});
        if (bytes_[b].starts_with(kSpaceMark) && !bytes_[a].ends_with(kSpaceMark)) {
            // No cut after the last character of `a` (Gemma's '>' of "> ▁</"); a byte or unk
            // token stands for other characters: no cut at all.
            const int32_t c = char_before(bytes_[a], 0, bytes_[a].size());
            const bool stands_for_others =
                a == unk_id_ ||
                std::find(fallback_id_.begin(), fallback_id_.end(), a) != fallback_id_.end();
            if (c < 0 || stands_for_others) cut_at_space_ = false;
            no_cut_after_.push_back(c);
        }
    }
    std::sort(no_cut_after_.begin(), no_cut_after_.end());
    std::vector<std::string_view> raw, norm;
    has_normalized_added_ = false;
    for (const AddedToken& t : added_) {
        const bool n = t.normalized && pipe_->normalizer != nullptr;
        (n ? norm : raw).push_back(bytes_[t.id]);
        (n ? raw : norm).push_back({});  // keeps indices aligned with added_
        has_normalized_added_ = has_normalized_added_ || n;
    }
    raw_added_ = std::make_shared<const AddedMatcher>(raw);
    norm_added_ = std::make_shared<const AddedMatcher>(norm);
    set_default_specials();
}

// A token's entry in token_id_: an added token wins over a model token of the same text.
static void add_token_form(StringIdMap& map, std::string form, int32_t id, bool added,
                           std::string_view source) {
    auto [it, fresh] = map.emplace(std::move(form), id);
    if (fresh || it->second == id) return;
    ETE_CHECK(added, "{}: token '{}' appears twice (ids {} and {})", source, it->first, it->second,
              id);
    it->second = id;
}

// The file's vocab is every model token's form (a JSON object's keys are distinct, and the
// byte-level spelling of a token's bytes is the key they were read from) and the added tokens
// that are in the model (under their content): what the spelling loops would build.
void Tokenizer::take_vocab_forms(StringIdMap* vocab) {
    token_id_.clear();
    if (vocab != nullptr) token_id_ = std::move(*vocab);
    token_id_.reserve(bytes_.size());
}

void Tokenizer::finalize_byte_level(std::string_view source, StringIdMap* vocab) {
    byte_id_.fill(-1);
    take_vocab_forms(vocab);
    bytes_id_.clear();
    bytes_id_.reserve(bytes_.size());
    for (int32_t id = 0; id < vocab_size(); ++id) {
        if (kind_[id] != TokenKind::Model) continue;
        if (vocab == nullptr)
            add_token_form(token_id_, data::bytes_to_byte_level(bytes_[id]), id, false, source);
        bytes_id_.emplace(bytes_[id], id);
        if (bytes_[id].size() == 1) byte_id_[static_cast<unsigned char>(bytes_[id][0])] = id;
    }
    for (const AddedToken& t : added_) {
        add_token_form(token_id_, t.content, t.id, true, source);
        std::string raw;
        if (in_model_[t.id] && data::byte_level_to_bytes(t.content, raw))
            bytes_id_.emplace(raw, t.id);
    }
    for (int b = 0; b < 256; ++b) {
        ETE_CHECK(byte_id_[b] >= 0,
                  "{}: vocab has no token for byte 0x{:02X} (a byte-level BPE needs all 256)",
                  source, b);
    }
}

void Tokenizer::finalize_chars(std::string_view source, StringIdMap* vocab) {
    byte_id_.fill(-1);
    fallback_id_.fill(-1);
    take_vocab_forms(vocab);
    bytes_id_.clear();
    bytes_id_.reserve(bytes_.size());
    for (int32_t id = 0; id < vocab_size(); ++id) {
        if (kind_[id] != TokenKind::Model) continue;
        if (vocab == nullptr) add_token_form(token_id_, bytes_[id], id, false, source);
        bytes_id_.emplace(bytes_[id], id);
    }
    for (const AddedToken& t : added_) {
        add_token_form(token_id_, t.content, t.id, true, source);
        if (in_model_[t.id]) bytes_id_.emplace(t.content, t.id);
    }
    // The encoder emits HF's exact spelling "<0x0A>"; other spellings only decode.
    for (int b = 0; b < 256; ++b) {
        auto it = bytes_id_.find(fmt::format("<0x{:02X}>", b));
        if (it != bytes_id_.end()) fallback_id_[b] = it->second;
    }
    unk_id_ = -1;
    if (!pipe_->unk_token.empty()) {
        auto id = token_to_id(pipe_->unk_token);
        ETE_CHECK(id.has_value(), "{}: model.unk_token '{}' is not in the vocab", source,
                  pipe_->unk_token);
        unk_id_ = *id;
    }
}

namespace {

bool white_at(std::string_view s, size_t i, size_t n) {
    return utf8::char_len(s, i) == n && unicode::is_white_space(utf8::decode(s, i, n));
}

// The start of the whitespace run that ends at `end` (HF's lstrip).
size_t white_run_before(std::string_view s, size_t end, size_t floor) {
    while (end > floor) {
        size_t b = end - 1;
        while (b > floor && utf8::is_cont(static_cast<unsigned char>(s[b]))) --b;
        if (!white_at(s, b, end - b)) break;
        end = b;
    }
    return end;
}

size_t white_run_after(std::string_view s, size_t begin) {
    while (begin < s.size()) {
        const size_t n = std::max<size_t>(1, utf8::char_len(s, begin));
        if (!white_at(s, begin, n)) break;
        begin += n;
    }
    return begin;
}

// Rust regex's \w on the character before `end` / at `begin` (HF's single_word test).
bool word_char(std::string_view s, size_t i, size_t n) {
    return utf8::char_len(s, i) == n && tok::is_word_char(utf8::decode(s, i, n));
}

bool word_before(std::string_view s, size_t end) {
    const int32_t c = end == 0 ? -1 : char_before(s, 0, end);
    return c >= 0 && tok::is_word_char(static_cast<char32_t>(c));
}

bool word_after(std::string_view s, size_t begin) {
    return begin < s.size() && word_char(s, begin, std::max<size_t>(1, utf8::char_len(s, begin)));
}

}  // namespace

std::vector<Tokenizer::Segment> Tokenizer::split_added(std::string_view text,
                                                       bool normalized) const {
    std::vector<Segment> segs;
    const AddedMatcher& m = normalized ? *norm_added_ : *raw_added_;
    // As HF's find_matches: the search goes on after each match's own end, even when rstrip
    // took whitespace beyond it; a later match may start inside that whitespace, and `pos`
    // then steps back to its end.
    size_t pos = 0;  // end of the last match, stripped whitespace included
    for (AddedMatcher::Match hit = m.find(text, 0); hit.index >= 0; hit = m.find(text, hit.end)) {
        const AddedToken& t = added_[hit.index];
        size_t begin = hit.begin, end = hit.end;
        if (t.single_word && (word_before(text, begin) || word_after(text, end))) continue;
        if (t.lstrip) begin = std::max(white_run_before(text, begin, 0), pos);
        if (t.rstrip) end = white_run_after(text, end);
        if (begin > pos) segs.push_back({text.substr(pos, begin - pos), -1, pos == 0});
        segs.push_back({{}, t.id, false});
        pos = end;
    }
    if (pos < text.size() || segs.empty()) segs.push_back({text.substr(pos), -1, pos == 0});
    return segs;
}

std::vector<std::string> Tokenizer::pretokenize(std::string_view text) const {
    std::string s(text);
    if (pipe_->normalizer) pipe_->normalizer->normalize(s);
    tok::Pieces p;
    if (!s.empty()) p.list.push_back(s);
    if (pipe_->pre) pipe_->pre->split(p, true);
    return {p.list.begin(), p.list.end()};
}

void Tokenizer::bpe_piece(std::string_view piece, PieceCache& c, std::vector<int32_t>& out) const {
    const int32_t n = static_cast<int32_t>(piece.size());
    if (n == 0) return;
    if (ignore_merges_) {
        auto it = bytes_id_.find(piece);
        if (it != bytes_id_.end()) return out.push_back(it->second);
    }
    c.sym.resize(n);
    for (int32_t i = 0; i < n; ++i) c.sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    merge_symbols(n, c, out);
}

void Tokenizer::merge_symbols(int32_t n, PieceCache& c, std::vector<int32_t>& out) const {
    ETE_ASSERT(n > 0 && c.sym.size() >= static_cast<size_t>(n));
    c.prev.resize(n);
    c.next.resize(n);
    c.heap.clear();
    auto rule = [&](int32_t i, int32_t j) { return merge_rule_.find(c.sym[i], c.sym[j]); };
    // Min-heap on (rank, position): lowest rank first, leftmost on ties.
    auto push = [&](int32_t i, int32_t rank) {
        c.heap.emplace_back(rank, i);
        std::push_heap(c.heap.begin(), c.heap.end(), std::greater<>());
    };
    for (int32_t i = 0; i < n; ++i) {
        c.prev[i] = i - 1;
        c.next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (int32_t i = 0; i + 1 < n; ++i) {
        if (const MergeTable::Rule* r = rule(i, i + 1)) push(i, r->rank);
    }
    while (!c.heap.empty()) {
        std::pop_heap(c.heap.begin(), c.heap.end(), std::greater<>());
        auto [rank, i] = c.heap.back();
        c.heap.pop_back();
        int32_t j = c.sym[i] < 0 ? -1 : c.next[i];
        if (j < 0) continue;
        const MergeTable::Rule* r = rule(i, j);
        if (r == nullptr || r->rank != rank) continue;  // stale: a neighbour merged first
        c.sym[i] = r->id;
        c.sym[j] = -1;
        c.next[i] = c.next[j];
        if (c.next[i] >= 0) c.prev[c.next[i]] = i;
        if (c.prev[i] >= 0) {
            if (const MergeTable::Rule* rp = rule(c.prev[i], i)) push(c.prev[i], rp->rank);
        }
        if (c.next[i] >= 0) {
            if (const MergeTable::Rule* rn = rule(i, c.next[i])) push(i, rn->rank);
        }
    }
    for (int32_t i = 0; i >= 0; i = c.next[i]) out.push_back(c.sym[i]);
}

void Tokenizer::char_piece(std::string_view piece, PieceCache& c, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = bytes_id_.find(piece);
        if (it != bytes_id_.end()) return out.push_back(it->second);
    }
    // One symbol per code point (an invalid byte counts as one); a code point missing from the
    // vocab becomes its <0xNN> tokens (byte_fallback) or the unk token, which HF adds only when
    // the next known symbol (or the end) comes, fusing a run of them with fuse_unk.
    c.sym.clear();
    bool pending_unk = false;
    for (size_t i = 0; i < piece.size();) {
        const size_t len = std::max<size_t>(1, utf8::char_len(piece, i));
        const std::string_view ch = piece.substr(i, len);
        i += len;
        if (auto it = bytes_id_.find(ch); it != bytes_id_.end()) {
            if (pending_unk) c.sym.push_back(unk_id_);
            pending_unk = false;
            c.sym.push_back(it->second);
            continue;
        }
        bool have_bytes = pipe_->byte_fallback;
        for (char b : ch)
            have_bytes = have_bytes && fallback_id_[static_cast<unsigned char>(b)] >= 0;
        if (have_bytes) {
            for (char b : ch) c.sym.push_back(fallback_id_[static_cast<unsigned char>(b)]);
            continue;
        }
        if (unk_id_ < 0) continue;  // no unk_token: HF drops the character
        if (pending_unk && !pipe_->fuse_unk) c.sym.push_back(unk_id_);
        pending_unk = true;
    }
    if (pending_unk) c.sym.push_back(unk_id_);
    if (c.sym.empty()) return;
    merge_symbols(static_cast<int32_t>(c.sym.size()), c, out);
}

void Tokenizer::encode_pieces(bool at_start, PieceCache& cache, std::vector<int32_t>& out,
                              bool parallel) const {
    if (pipe_->pre) pipe_->pre->split(cache.pieces, at_start);
    std::vector<std::string_view>& list = cache.pieces.list;
    if (parallel && cut_at_space_) {  // the parts BPE sees (one piece is often the whole text)
        std::vector<std::string_view> words;
        for (std::string_view piece : list)
            for (size_t begin = 0, end; begin < piece.size(); begin = end) {
                end = next_cut(piece, begin);
                words.push_back(piece.substr(begin, end - begin));
            }
        list = std::move(words);
    }
    const bool cut = cut_at_space_ && !parallel;
    if (!parallel || list.size() < 2 * kPiecesPerPart)
        return encode_piece_range(list, cut, cache, out);
    // The whole stretch was normalized and pre-tokenized above, serially; its pieces are encoded
    // independently of each other, so consecutive ranges of them encode in parallel (each thread
    // with its own memo) and concatenate to the serial result.
    const std::span<const std::string_view> all(list);
    const auto n_parts = static_cast<int64_t>(all.size() / kPiecesPerPart);
    std::vector<std::vector<int32_t>> parts(static_cast<size_t>(n_parts));
#pragma omp parallel
    {
        PieceCache local;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n_parts; ++i) {
            const size_t begin = all.size() * size_t(i) / size_t(n_parts);
            const size_t end = all.size() * size_t(i + 1) / size_t(n_parts);
            encode_piece_range(all.subspan(begin, end - begin), false, local, parts[size_t(i)]);
        }
    }
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

void Tokenizer::encode_piece_range(std::span<const std::string_view> pieces, bool cut,
                                   PieceCache& cache, std::vector<int32_t>& out) const {
    const bool bytes = pipe_->byte_level;
    for (std::string_view piece : pieces) {
        if (bytes && piece.size() == 1) {
            out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
            continue;
        }
        if (!cut) {
            encode_piece(piece, cache, out);
            continue;
        }
        for (size_t begin = 0, end; begin < piece.size(); begin = end) {
            end = next_cut(piece, begin);
            encode_piece(piece.substr(begin, end - begin), cache, out);
        }
    }
}

size_t Tokenizer::next_cut(std::string_view piece, size_t begin) const {
    for (size_t at = piece.find(kSpaceMark, begin + 1); at != std::string_view::npos;
         at = piece.find(kSpaceMark, at + 1)) {
        const int32_t c = char_before(piece, begin, at);
        if (c >= 0 && c != kSpaceMarkCode &&
            !std::binary_search(no_cut_after_.begin(), no_cut_after_.end(), c))
            return at;
    }
    return piece.size();
}

void Tokenizer::encode_piece(std::string_view piece, PieceCache& cache,
                             std::vector<int32_t>& out) const {
    std::span<const int32_t> hit = cache.find(piece);
    if (!hit.empty()) {
        out.insert(out.end(), hit.begin(), hit.end());
        return;
    }
    const size_t first = out.size();
    if (pipe_->byte_level) {
        bpe_piece(piece, cache, out);
    } else {
        char_piece(piece, cache, out);
    }
    cache.insert(piece, std::span<const int32_t>(out.data() + first, out.size() - first));
}

void Tokenizer::encode_stretch(std::string_view text, bool at_start, PieceCache& cache,
                               std::vector<int32_t>& out, bool parallel) const {
    if (text.empty()) return;
    std::string_view s = text;
    if (pipe_->normalizer) {
        cache.normalized.assign(text);
        pipe_->normalizer->normalize(cache.normalized);
        s = cache.normalized;
    }
    if (!has_normalized_added_) {
        cache.pieces.clear();
        if (!s.empty()) cache.pieces.list.push_back(s);
        return encode_pieces(at_start, cache, out, parallel);
    }
    // Added tokens with "normalized": true are matched in the normalized text.
    const std::string normalized(s);  // cache.normalized is reused below
    for (const Segment& seg : split_added(normalized, true)) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        cache.pieces.clear();
        if (!seg.text.empty()) cache.pieces.list.push_back(seg.text);
        encode_pieces(at_start && seg.at_start, cache, out, parallel);
    }
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
    if (!utf8::valid(text)) {
        // HF's text pipeline only ever sees valid UTF-8: each invalid stretch is one U+FFFD.
        const std::string repaired = utf8::repair(text);
        return encode_append(repaired, out);
    }
    // Work items: added tokens, and plain stretches cut into line-aligned chunks when the split
    // pattern allows it, so that large texts encode in parallel with the same result.
    std::vector<Segment> items;
    const bool chunkable = pipe_->line_start_safe && !has_normalized_added_;
    for (const Segment& s : split_added(text, false)) {
        if (s.id >= 0 || !chunkable || s.text.size() <= 2 * kParallelChunkBytes) {
            items.push_back(s);
            continue;
        }
        bool first = s.at_start;
        for (std::string_view chunk : split_at_line_starts(s.text, kParallelChunkBytes)) {
            items.push_back({chunk, -1, first});
            first = false;
        }
    }
    // A stretch still large here could not be cut (its pipeline is not line_start_safe, or it
    // has no safe cut): it is pre-tokenized whole and its pieces are encoded in parallel.
    const bool threads = omp_get_max_threads() >= 2 && !omp_in_parallel();
    const auto large = [](const Segment& s) {
        return s.id < 0 && s.text.size() > 2 * kParallelChunkBytes;
    };
    const bool uncut = std::any_of(items.begin(), items.end(), large);
    // A short text stays serial: starting the threads costs more than its encoding.
    if (items.size() < 2 || text.size() < kParallelChunkBytes || !threads || uncut) {
        PieceCache cache;
        for (const Segment& s : items) {
            if (s.id >= 0) {
                out.push_back(s.id);
            } else {
                encode_stretch(s.text, s.at_start, cache, out, threads && large(s));
            }
        }
        return;
    }
    std::vector<std::vector<int32_t>> parts(items.size());
    const auto n_items = static_cast<int64_t>(items.size());
#pragma omp parallel
    {
        PieceCache cache;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n_items; ++i) {
            if (items[i].id >= 0) {
                parts[i].push_back(items[i].id);
            } else {
                encode_stretch(items[i].text, items[i].at_start, cache, parts[i]);
            }
        }
    }
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 16);
    if (add_special_tokens) out = pipe_->post.prefix;
    encode_append(text, out);
    if (add_special_tokens)
        out.insert(out.end(), pipe_->post.suffix.begin(), pipe_->post.suffix.end());
    return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    return encode(text, false);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
        std::string t = id_to_token(id);
        if (!(skip_special && special_[id])) tokens.push_back(std::move(t));
    }
    std::string out;
    if (!pipe_->decoder) {
        for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
        return out;
    }
    pipe_->decoder->decode(tokens);
    for (const std::string& t : tokens) out += t;
    return out;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += id_to_bytes(id);
    return out;
}

const std::string& Tokenizer::id_to_bytes(int32_t id) const {
    ETE_CHECK(id >= 0 && id < vocab_size() && kind_[id] != TokenKind::Unused,
              "tokenizer: token id {} is not in the vocabulary (size {})", id, vocab_size());
    return bytes_[id];
}

std::string Tokenizer::id_to_token(int32_t id) const {
    const std::string& b = id_to_bytes(id);
    return kind_[id] == TokenKind::Added || !pipe_->byte_level ? b : data::bytes_to_byte_level(b);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = token_id_.find(token);
    if (it == token_id_.end()) return std::nullopt;
    return it->second;
}

int32_t Tokenizer::eos_id() const {
    return eos_;
}

int32_t Tokenizer::bos_id() const {
    return bos_;
}

int32_t Tokenizer::pad_id() const {
    return pad_;
}

void Tokenizer::set_default_specials() {
    eos_ = bos_ = pad_ = -1;
    for (std::string_view name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
        if (auto id = token_to_id(name); id && eos_ < 0) eos_ = *id;
    }
    for (std::string_view name : {"<|begin_of_text|>", "<s>"}) {
        if (auto id = token_to_id(name); id && bos_ < 0) bos_ = *id;
    }
    if (bos_ < 0) bos_ = eos_;
    stop_ids_.clear();
    if (eos_ >= 0) stop_ids_.push_back(eos_);
    eos_source_ = "names";
}

}  // namespace ete
