// ete/data/tokenizer.cpp — tokenizer tables, encode (added tokens, regex split, BPE) and decode.
#include "ete/data/tokenizer.h"

#include <omp.h>

#include <algorithm>

#include "ete/core/error.h"
#include "ete/data/byte_level.h"
#include "ete/data/piece_cache.h"
#include "ete/data/pretokenize.h"

namespace ete {
namespace {

// Llama-3's split pattern; like GPT-2's, it is safe to cut at split_at_line_starts' points.
constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Encoding splits texts above this size into line-aligned chunks encoded in parallel.
constexpr size_t kParallelChunkBytes = 256 * 1024;

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

void Tokenizer::set_pre_tokenizer(PreTokForm form, std::string pattern) {
    pre_form_ = form;
    chunkable_ = pattern == kGpt2SplitPattern || pattern == kLlama3SplitPattern;
    splitter_ = pattern.empty() ? nullptr : std::make_shared<const RegexSplitter>(pattern);
}

const std::string& Tokenizer::split_pattern() const {
    static const std::string kEmpty;
    return splitter_ ? splitter_->pattern() : kEmpty;
}

void Tokenizer::finalize(std::string_view source) {
    ETE_ASSERT(bytes_.size() == kind_.size());
    for (const AddedToken& t : added_) {
        ETE_CHECK(!t.content.empty(), "{}: added token {} has empty content", source, t.id);
        ETE_ASSERT(t.id >= 0 && t.id < vocab_size() && kind_[t.id] == TokenKind::Added);
    }
    if (sp_) {
        finalize_metaspace(source);
    } else {
        finalize_byte_level(source);
    }
    merge_rule_.clear();
    for (size_t r = 0; r < merges_.size(); ++r) {
        auto [a, b] = merges_[r];
        auto it = bytes_id_.find(bytes_[a] + bytes_[b]);
        ETE_CHECK(it != bytes_id_.end(), "{}: merge {} '{} {}' makes a token missing from vocab",
                  source, r, id_to_token(a), id_to_token(b));
        merge_rule_.emplace(pair_key(a, b), MergeRule{static_cast<int32_t>(r), it->second});
    }
    added_by_length_.resize(added_.size());
    for (size_t i = 0; i < added_.size(); ++i) added_by_length_[i] = i;
    std::stable_sort(added_by_length_.begin(), added_by_length_.end(), [&](size_t x, size_t y) {
        return added_[x].content.size() > added_[y].content.size();
    });
}

void Tokenizer::finalize_byte_level(std::string_view source) {
    byte_id_.fill(-1);
    token_id_.clear();
    bytes_id_.clear();
    for (int32_t id = 0; id < vocab_size(); ++id) {
        if (kind_[id] == TokenKind::Unused) continue;
        std::string form =
            kind_[id] == TokenKind::Added ? bytes_[id] : data::bytes_to_byte_level(bytes_[id]);
        auto [it, fresh] = token_id_.emplace(std::move(form), id);
        ETE_CHECK(fresh, "{}: token '{}' appears twice (ids {} and {})", source, it->first,
                  it->second, id);
        if (kind_[id] != TokenKind::Model) continue;
        bytes_id_.emplace(bytes_[id], id);
        if (bytes_[id].size() == 1) byte_id_[static_cast<unsigned char>(bytes_[id][0])] = id;
    }
    for (int b = 0; b < 256; ++b) {
        ETE_CHECK(byte_id_[b] >= 0,
                  "{}: vocab has no token for byte 0x{:02X} (a byte-level BPE needs all 256)",
                  source, b);
    }
}

std::vector<Tokenizer::Segment> Tokenizer::split_added(std::string_view text) const {
    std::vector<Segment> segs;
    const size_t k = added_by_length_.size();
    std::vector<size_t> next(k, 0);  // next occurrence of each added token at or after `pos`
    auto content = [&](size_t i) -> const std::string& {
        return added_[added_by_length_[i]].content;
    };
    for (size_t i = 0; i < k; ++i) next[i] = text.find(content(i));
    size_t pos = 0;
    while (true) {
        size_t best = std::string_view::npos, best_i = 0;
        for (size_t i = 0; i < k; ++i) {
            if (next[i] != std::string_view::npos && next[i] < pos) {
                next[i] = text.find(content(i), pos);
            }
            if (next[i] < best) best = next[i], best_i = i;  // strict: longest wins a tie
        }
        if (best == std::string_view::npos) break;
        if (best > pos) segs.push_back({text.substr(pos, best - pos), -1, true});
        segs.push_back({{}, added_[added_by_length_[best_i]].id, false});
        pos = best + content(best_i).size();
    }
    if (pos < text.size() || segs.empty()) segs.push_back({text.substr(pos), -1, true});
    return segs;
}

std::vector<std::string_view> Tokenizer::pretokenize(std::string_view text) const {
    if (!splitter_) return {text};
    return splitter_->split(text);
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
    auto rule = [&](int32_t i, int32_t j) -> const MergeRule* {
        auto it = merge_rule_.find(pair_key(c.sym[i], c.sym[j]));
        return it == merge_rule_.end() ? nullptr : &it->second;
    };
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
        if (const MergeRule* r = rule(i, i + 1)) push(i, r->rank);
    }
    while (!c.heap.empty()) {
        std::pop_heap(c.heap.begin(), c.heap.end(), std::greater<>());
        auto [rank, i] = c.heap.back();
        c.heap.pop_back();
        int32_t j = c.sym[i] < 0 ? -1 : c.next[i];
        if (j < 0) continue;
        const MergeRule* r = rule(i, j);
        if (r == nullptr || r->rank != rank) continue;  // stale: a neighbour merged first
        c.sym[i] = r->id;
        c.sym[j] = -1;
        c.next[i] = c.next[j];
        if (c.next[i] >= 0) c.prev[c.next[i]] = i;
        if (c.prev[i] >= 0) {
            if (const MergeRule* rp = rule(c.prev[i], i)) push(c.prev[i], rp->rank);
        }
        if (c.next[i] >= 0) {
            if (const MergeRule* rn = rule(i, c.next[i])) push(i, rn->rank);
        }
    }
    for (int32_t i = 0; i >= 0; i = c.next[i]) out.push_back(c.sym[i]);
}

void Tokenizer::encode_segment(std::string_view text, bool at_start, PieceCache& cache,
                               std::vector<int32_t>& out) const {
    ETE_ASSERT(!sp_);
    std::string prefixed;
    if (add_prefix_space_ && at_start && !text.empty() && text[0] != ' ') {
        prefixed = " " + std::string(text);
        text = prefixed;
    }
    cache.pieces.clear();
    if (splitter_) {
        splitter_->split(text, cache.pieces);
    } else {
        cache.pieces.push_back(text);
    }
    for (std::string_view piece : cache.pieces) {
        if (piece.size() == 1) {
            out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
            continue;
        }
        std::span<const int32_t> hit = cache.find(piece);
        if (!hit.empty()) {
            out.insert(out.end(), hit.begin(), hit.end());
            continue;
        }
        size_t first = out.size();
        bpe_piece(piece, cache, out);
        cache.insert(piece, std::span<const int32_t>(out.data() + first, out.size() - first));
    }
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
    // Work items: added tokens, and plain stretches cut into line-aligned chunks when the split
    // pattern allows it, so that large texts encode in parallel with the same result.
    std::vector<Segment> items;
    for (const Segment& s : split_added(text)) {
        if (s.id >= 0 || !chunkable_ || s.text.size() <= 2 * kParallelChunkBytes) {
            items.push_back(s);
            continue;
        }
        bool first = true;
        for (std::string_view chunk : split_at_line_starts(s.text, kParallelChunkBytes)) {
            items.push_back({chunk, -1, first});
            first = false;
        }
    }
    if (sp_) {
        // Metaspace mode: no chunking (a stretch's normalization depends on its whole text).
        PieceCache cache;
        for (const Segment& s : items) {
            if (s.id >= 0) {
                out.push_back(s.id);
            } else {
                encode_metaspace(s.text, s.text.data() == text.data(), cache, out);
            }
        }
        return;
    }
    if (items.size() < 2 || omp_get_max_threads() < 2 || omp_in_parallel()) {
        PieceCache cache;
        for (const Segment& s : items) {
            if (s.id >= 0) {
                out.push_back(s.id);
            } else {
                encode_segment(s.text, s.at_start, cache, out);
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
                encode_segment(items[i].text, items[i].at_start, cache, parts[i]);
            }
        }
    }
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 16);
    encode_append(text, out);
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    if (sp_) return decode_metaspace(ids);
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
    return kind_[id] == TokenKind::Added || sp_ ? b : data::bytes_to_byte_level(b);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    auto it = token_id_.find(token);
    if (it == token_id_.end()) return std::nullopt;
    return it->second;
}

int32_t Tokenizer::eos_id() const {
    for (std::string_view name : {"<|endoftext|>", "<|end_of_text|>", "</s>"}) {
        if (auto id = token_to_id(name)) return *id;
    }
    return -1;
}

int32_t Tokenizer::bos_id() const {
    for (std::string_view name : {"<|begin_of_text|>", "<s>"}) {
        if (auto id = token_to_id(name)) return *id;
    }
    return eos_id();
}

}  // namespace ete
