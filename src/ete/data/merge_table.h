// ete/data/merge_table.h — internal to the tokenizer: the BPE merge rules, (left id, right id) ->
// (rank, merged id), in one flat open-addressing table. BPE asks it once per adjacent pair and
// again after every merge; a node-based hash map made those lookups about half of SentencePiece
// encoding (a cache miss per probe), a flat table keeps key and value in one 16-byte slot.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "ete/core/error.h"

namespace ete {

class MergeTable {
  public:
    struct Rule {
        int32_t rank;
        int32_t id;  // the merged token
    };

    // Sized for `n` rules at a load factor of at most 1/2.
    void reset(size_t n) {
        const size_t cap = std::bit_ceil(std::max<size_t>(16, 2 * n));
        slots_.assign(cap, Slot{kEmpty, {0, 0}});
        mask_ = cap - 1;
        size_ = 0;
    }

    // A pair inserted twice keeps the last rule (HF's merge map keeps the last rank).
    void insert_or_assign(int32_t left, int32_t right, Rule r) {
        ETE_ASSERT(left >= 0 && right >= 0 && 2 * (size_ + 1) <= slots_.size());
        const uint64_t key = make_key(left, right);
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.key == key) {
                s.rule = r;
                return;
            }
            if (s.key == kEmpty) {
                s = Slot{key, r};
                ++size_;
                return;
            }
        }
    }

    const Rule* find(int32_t left, int32_t right) const {
        if (left < 0 || right < 0 || slots_.empty()) return nullptr;
        const uint64_t key = make_key(left, right);
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == key) return &s.rule;
            if (s.key == kEmpty) return nullptr;
        }
    }

    size_t size() const { return size_; }

  private:
    struct Slot {
        uint64_t key;
        Rule rule;
    };
    static_assert(sizeof(Slot) == 16);
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key

    static uint64_t make_key(int32_t a, int32_t b) {
        return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    }
    // Fibonacci hashing: the high bits of key * 2^64/phi spread consecutive ids over the table.
    size_t home(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_; }

    std::vector<Slot> slots_;
    size_t mask_ = 0, size_ = 0;
};

}  // namespace ete
