// ete/data/piece_cache.h — internal to the tokenizer: per-thread encode scratch and piece memo.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ete/data/tok_pipeline.h"
#include "ete/data/tokenizer.h"

namespace ete {

// A per-thread cache of piece encodings is dropped when it holds this many token ids.
inline constexpr size_t kCacheMaxIds = size_t{1} << 22;

// Per-thread scratch: piece views, memoized piece encodings, and BPE working arrays.
class Tokenizer::PieceCache {
  public:
    tok::Pieces pieces;
    std::string normalized;                // the stretch after normalization
    std::vector<int32_t> sym, prev, next;  // BPE symbols (bytes or code points), linked list
    std::vector<std::pair<int32_t, int32_t>> heap;  // (rank, position) of mergeable pairs

    // Returns the cached ids of `piece`, or nullptr.
    std::span<const int32_t> find(std::string_view piece) const {
        auto it = map_.find(piece);
        if (it == map_.end()) return {};
        return {pool_.data() + it->second.first, it->second.second};
    }
    void insert(std::string_view piece, std::span<const int32_t> ids) {
        if (pool_.size() + ids.size() > kCacheMaxIds) {
            map_.clear();
            pool_.clear();
        }
        map_.emplace(std::string(piece), std::make_pair(static_cast<uint32_t>(pool_.size()),
                                                        static_cast<uint32_t>(ids.size())));
        pool_.insert(pool_.end(), ids.begin(), ids.end());
    }

  private:
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
        map_;  // piece -> (offset, length) in pool_
    std::vector<int32_t> pool_;
};

}  // namespace ete
