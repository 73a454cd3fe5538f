// ete/data/bpe_train.cpp — byte-level BPE training over unique pre-tokens.
//
// (1) Count pre-tokens (regex pieces) of the corpus: a few tens of thousands of unique words even
// for large texts. (2) Count adjacent token pairs over unique words, weighted by word count, and
// remember which words hold each pair. (3) Repeatedly take the best pair from a max-heap (lazy:
// an entry is valid only while its count equals the live count), rewrite just the words that hold
// it and apply the resulting pair-count deltas. The cost per merge is proportional to the words
// touched, not to the corpus.
#include <omp.h>

#include <algorithm>
#include <queue>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

constexpr size_t kCountChunkBytes = 256 * 1024;

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct HeapEntry {
    int64_t count;
    uint64_t key;
    // Max-heap order: higher count first, then the smaller (left, right) id pair.
    bool operator<(const HeapEntry& o) const {
        return count != o.count ? count < o.count : key > o.key;
    }
};

struct TrainWord {
    std::vector<int32_t> sym;
    int64_t count;
};

using PairCounts = std::unordered_map<uint64_t, int64_t>;
using PairWords = std::unordered_map<uint64_t, std::vector<uint32_t>>;

// Replaces every (a, b) in `w` (left to right) by `merged`; records the pair-count changes in
// `delta` and registers word `wi` under each pair it gained.
void merge_word(TrainWord& w, uint32_t wi, int32_t a, int32_t b, int32_t merged, PairCounts& delta,
                PairWords& pair_words) {
    std::vector<int32_t>& s = w.sym;
    const int64_t c = w.count;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != a || s[i + 1] != b) continue;
        if (i > 0) {
            delta[pair_key(s[i - 1], a)] -= c;
            delta[pair_key(s[i - 1], merged)] += c;
            pair_words[pair_key(s[i - 1], merged)].push_back(wi);
        }
        if (i + 2 < s.size()) {
            delta[pair_key(b, s[i + 2])] -= c;
            delta[pair_key(merged, s[i + 2])] += c;
            pair_words[pair_key(merged, s[i + 2])].push_back(wi);
        }
        s[i] = merged;
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
}

// Live pair counts over the unique words, the words holding each pair, and a lazy max-heap.
class PairIndex {
  public:
    explicit PairIndex(const std::vector<TrainWord>& words) {
        for (size_t wi = 0; wi < words.size(); ++wi) {
            const std::vector<int32_t>& s = words[wi].sym;
            for (size_t i = 0; i + 1 < s.size(); ++i) {
                uint64_t k = pair_key(s[i], s[i + 1]);
                count_[k] += words[wi].count;
                words_[k].push_back(static_cast<uint32_t>(wi));
            }
        }
        for (auto [k, c] : count_) heap_.push({c, k});
    }

    // The best live pair (removed from the counts), or false when no pair is left.
    bool pop_best(uint64_t& key) {
        while (!heap_.empty()) {
            HeapEntry top = heap_.top();
            heap_.pop();
            auto live = count_.find(top.key);
            if (live == count_.end() || live->second != top.count) continue;  // stale entry
            count_.erase(live);
            key = top.key;
            return true;
        }
        return false;
    }

    // Rewrites the words holding pair `key` and applies the resulting count changes.
    void merge(uint64_t key, int32_t merged, std::vector<TrainWord>& words) {
        std::vector<uint32_t> holders = std::move(words_[key]);
        words_.erase(key);
        std::sort(holders.begin(), holders.end());  // a word is listed once per occurrence
        holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
        const auto a = static_cast<int32_t>(key >> 32);
        const auto b = static_cast<int32_t>(key & 0xFFFFFFFFu);
        delta_.clear();
        for (uint32_t wi : holders) merge_word(words[wi], wi, a, b, merged, delta_, words_);
        for (auto [k, d] : delta_) {
            if (k == key || d == 0) continue;
            int64_t& c = count_[k];
            c += d;
            ETE_ASSERT(c >= 0);
            if (c > 0) {
                heap_.push({c, k});
            } else {
                count_.erase(k);
            }
        }
    }

  private:
    PairCounts count_;
    PairWords words_;
    std::priority_queue<HeapEntry> heap_;
    PairCounts delta_;  // scratch: count changes of one merge
};

void check_train_args(int vocab_size, const std::vector<std::string>& specials) {
    const int min_size = 256 + static_cast<int>(specials.size());
    ETE_CHECK(vocab_size >= min_size,
              "tokenizer train: vocab_size {} is too small, expected at least {} (256 byte tokens "
              "+ {} special tokens)",
              vocab_size, min_size, specials.size());
    for (size_t i = 0; i < specials.size(); ++i) {
        ETE_CHECK(!specials[i].empty(), "tokenizer train: special token {} is empty", i);
        for (size_t j = 0; j < i; ++j) {
            ETE_CHECK(specials[i] != specials[j],
                      "tokenizer train: special token '{}' is listed "
                      "twice",
                      specials[i]);
        }
    }
}

}  // namespace

void Tokenizer::count_words(std::string_view text, WordCounts& counts) const {
    std::vector<std::string_view> chunks;
    for (const Segment& s : split_added(text, false)) {
        if (s.id >= 0) continue;  // special tokens are not training text
        for (std::string_view c : split_at_line_starts(s.text, kCountChunkBytes)) {
            chunks.push_back(c);
        }
    }
    const auto n_chunks = static_cast<int64_t>(chunks.size());
    const int n_threads = n_chunks > 1 ? omp_get_max_threads() : 1;
    std::vector<WordCounts> local(static_cast<size_t>(n_threads));
#pragma omp parallel num_threads(n_threads)
    {
        WordCounts& mine = local[static_cast<size_t>(omp_get_thread_num())];
        std::vector<std::string_view> pieces;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n_chunks; ++i) {
            pieces.clear();
            splitter_->split(chunks[i], pieces);
            for (std::string_view p : pieces) {
                auto it = mine.find(p);
                if (it == mine.end()) {
                    mine.emplace(std::string(p), 1);
                } else {
                    ++it->second;
                }
            }
        }
    }
    for (WordCounts& m : local) {
        if (counts.empty()) {
            counts.swap(m);
            continue;
        }
        for (auto& [w, n] : m) counts[w] += n;
    }
}

Tokenizer Tokenizer::from_word_counts(const std::vector<std::pair<std::string, int64_t>>& words,
                                      int vocab_size, const std::vector<std::string>& specials) {
    std::vector<TrainWord> tw(words.size());
    for (size_t wi = 0; wi < words.size(); ++wi) {
        for (char ch : words[wi].first) tw[wi].sym.push_back(static_cast<unsigned char>(ch));
        tw[wi].count = words[wi].second;
    }
    PairIndex pairs(tw);
    Tokenizer t;
    for (int b = 0; b < 256; ++b) t.bytes_.emplace_back(1, static_cast<char>(b));
    std::unordered_map<std::string, int32_t> id_of;  // token bytes -> id, to reuse duplicates
    for (int b = 0; b < 256; ++b) id_of.emplace(t.bytes_[b], b);
    const size_t model_size = static_cast<size_t>(vocab_size) - specials.size();
    uint64_t key = 0;
    while (t.bytes_.size() < model_size && pairs.pop_best(key)) {
        const auto a = static_cast<int32_t>(key >> 32);
        const auto b = static_cast<int32_t>(key & 0xFFFFFFFFu);
        // Two merges can spell the same bytes ("a"+"bc", "ab"+"c"): they share one id, as in HF.
        std::string merged_bytes = t.bytes_[a] + t.bytes_[b];
        auto [it, fresh] = id_of.emplace(merged_bytes, static_cast<int32_t>(t.bytes_.size()));
        if (fresh) t.bytes_.push_back(std::move(merged_bytes));
        t.merges_.emplace_back(a, b);
        pairs.merge(key, it->second, tw);
    }
    if (t.bytes_.size() < model_size) {
        log_warn("tokenizer train: the text allows only {} merges; vocab size {} instead of {}",
                 t.merges_.size(), t.bytes_.size() + specials.size(), vocab_size);
    }
    t.kind_.assign(t.bytes_.size(), TokenKind::Model);
    for (const std::string& sp : specials) {
        t.added_.push_back({static_cast<int32_t>(t.bytes_.size()), sp, true});
        t.bytes_.push_back(sp);
        t.kind_.push_back(TokenKind::Added);
    }
    t.use_gpt2_pipeline();
    t.finalize("tokenizer train");
    return t;
}

namespace {

// A tokenizer with only the byte tokens and the specials: it splits training text.
Tokenizer make_counting_tokenizer(const std::vector<std::string>& specials) {
    return Tokenizer::train(std::string_view(), 256 + static_cast<int>(specials.size()), specials);
}

std::vector<std::pair<std::string, int64_t>> sorted_words(WordCounts& counts) {
    // Sorted so that word indices, and hence training, do not depend on hash-map order.
    std::vector<std::pair<std::string, int64_t>> words;
    words.reserve(counts.size());
    for (auto& [w, n] : counts) words.emplace_back(w, n);
    std::sort(words.begin(), words.end());
    return words;
}

}  // namespace

Tokenizer Tokenizer::train(std::string_view text, int vocab_size,
                           const std::vector<std::string>& special_tokens) {
    check_train_args(vocab_size, special_tokens);
    if (text.empty()) return from_word_counts({}, vocab_size, special_tokens);
    Tokenizer counter = make_counting_tokenizer(special_tokens);
    WordCounts counts;
    counter.count_words(text, counts);
    return from_word_counts(sorted_words(counts), vocab_size, special_tokens);
}

Tokenizer Tokenizer::train_files(const std::vector<std::string>& paths, int vocab_size,
                                 const std::vector<std::string>& special_tokens) {
    check_train_args(vocab_size, special_tokens);
    ETE_CHECK(!paths.empty(), "tokenizer train: expected at least one training file");
    Tokenizer counter = make_counting_tokenizer(special_tokens);
    WordCounts counts;
    for (const std::string& p : paths) {
        std::string text = read_file(p, UINT64_MAX);
        counter.count_words(text, counts);
    }
    return from_word_counts(sorted_words(counts), vocab_size, special_tokens);
}

}  // namespace ete
