// ete/data/added_matcher.cpp — a byte trie over the added tokens' contents.
#include "ete/data/added_matcher.h"

namespace ete {

AddedMatcher::AddedMatcher(const std::vector<std::string_view>& contents) {
    for (size_t k = 0; k < contents.size(); ++k) {
        std::string_view c = contents[k];
        if (c.empty()) continue;
        first_[static_cast<unsigned char>(c[0])] = true;
        int32_t node = 0;
        for (char ch : c) {
            auto [it, fresh] = child_.emplace(key(node, static_cast<unsigned char>(ch)),
                                              static_cast<int32_t>(terminal_.size()));
            if (fresh) terminal_.push_back(-1);
            node = it->second;
        }
        if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(k);  // first one wins
    }
}

AddedMatcher::Match AddedMatcher::find(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
        if (!first_[static_cast<unsigned char>(text[i])]) continue;
        Match best;
        int32_t node = 0;
        for (size_t j = i; j < text.size(); ++j) {
            auto it = child_.find(key(node, static_cast<unsigned char>(text[j])));
            if (it == child_.end()) break;
            node = it->second;
            if (terminal_[node] >= 0) best = {i, j + 1, terminal_[node]};
        }
        if (best.index >= 0) return best;
    }
    return {};
}

}  // namespace ete
