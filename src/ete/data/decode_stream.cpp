// ete/data/decode_stream.cpp — HF's DecodeStream step.
#include "ete/data/decode_stream.h"

#include "ete/core/log.h"
#include "ete/data/utf8.h"

namespace ete {
namespace {

constexpr size_t kContextIds = 8;

bool ends_torn(const std::string& s) {
    return s.ends_with(utf8::kReplacement);
}

}  // namespace

DecodeStream::DecodeStream(const Tokenizer& t, const std::vector<int32_t>& context,
                           bool skip_special)
    : t_(t), skip_special_(skip_special) {
    const size_t n = std::min(context.size(), kContextIds);
    ids_.assign(context.end() - static_cast<std::ptrdiff_t>(n), context.end());
    prefix_ = t_.decode(ids_, skip_special_);
    prefix_index_ = ids_.size();
}

std::string DecodeStream::step(int32_t id) {
    if (prefix_.empty() && !ids_.empty()) {
        std::string p = t_.decode(ids_, skip_special_);
        if (!ends_torn(p)) {
            prefix_ = std::move(p);
            prefix_index_ = ids_.size();
        }
    }
    ids_.push_back(id);
    std::string text = t_.decode(ids_, skip_special_);
    if (text.size() <= prefix_.size() || ends_torn(text)) return {};
    std::string fresh;
    if (text.starts_with(prefix_)) {
        fresh = text.substr(prefix_.size());
    } else {
        // The decoder rewrote text already printed (HF's DecodeStream fails here). Print what
        // follows the common part rather than stop printing.
        size_t k = 0;
        while (k < text.size() && k < prefix_.size() && text[k] == prefix_[k]) ++k;
        log_warn("generate: the decoded text changed before the new token; printing from byte {}",
                 k);
        fresh = text.substr(k);
    }
    const size_t new_prefix_index = ids_.size() - prefix_index_;
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
    prefix_ = t_.decode(ids_, skip_special_);
    prefix_index_ = new_prefix_index;
    return fresh;
}

std::string DecodeStream::finish() {
    std::string text = t_.decode(ids_, skip_special_);
    if (text.size() <= prefix_.size() || !text.starts_with(prefix_)) return {};
    return text.substr(prefix_.size());
}

}  // namespace ete
