// ete/data/added_matcher.h — internal to the tokenizer: finds added tokens in text, leftmost
// match first and the longest of those that start there (HF's aho-corasick LeftmostLongest).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ete {

class AddedMatcher {
  public:
    // contents[k] is matched as the token with index k.
    explicit AddedMatcher(const std::vector<std::string_view>& contents);
    bool empty() const { return terminal_.size() <= 1 && terminal_[0] < 0; }

    struct Match {
        size_t begin = 0, end = 0;
        int32_t index = -1;  // -1: no match
    };
    // The first match starting at or after `from`.
    Match find(std::string_view text, size_t from) const;

  private:
    static uint64_t key(int32_t node, unsigned char c) {
        return (static_cast<uint64_t>(node) << 8) | c;
    }
    std::unordered_map<uint64_t, int32_t> child_;  // (node, byte) -> node; node 0 is the root
    std::vector<int32_t> terminal_{-1};            // node -> index of the token ending there
    std::array<bool, 256> first_{};                // bytes that start some token
};

}  // namespace ete
