// ete/data/tok_pretokenizers.cpp — HF's pre-tokenizers: Split, ByteLevel, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer, Sequence.
#include <nlohmann/json.hpp>

#include <functional>

#include "ete/core/error.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_pipeline.h"
#include "ete/data/unicode.h"
#include "ete/data/utf8.h"

namespace ete::tok {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;
using CharTest = std::function<bool(char32_t)>;

// Rewrites every piece with `f(piece, out)`.
template <class F>
void for_each_piece(Pieces& p, F&& f) {
    std::vector<std::string_view> out;
    out.reserve(p.list.size());
    for (std::string_view piece : p.list) f(piece, out);
    p.list.swap(out);
}

// Each character passing `test` is a match of its own (HF's char-predicate patterns).
void char_matches(std::string_view s, const CharTest& test, Spans& out) {
    for (size_t i = 0; i < s.size();) {
        const size_t n = std::max<size_t>(1, utf8::char_len(s, i));
        if (n > 1 || static_cast<unsigned char>(s[i]) < 0x80) {
            if (test(utf8::decode(s, i, n))) out.emplace_back(i, i + n);
        }
        i += n;
    }
}

void split_by_chars(Pieces& p, const CharTest& test, Behavior behavior) {
    Spans m;
    for_each_piece(p, [&](std::string_view piece, std::vector<std::string_view>& out) {
        m.clear();
        char_matches(piece, test, m);
        split_matches(piece, m, behavior, false, out);
    });
}

bool is_punctuation(char32_t c) {
    using unicode::Category;
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    const Category g = unicode::category(c);
    return g == Category::Pc || g == Category::Pd || g == Category::Ps || g == Category::Pe ||
           g == Category::Pi || g == Category::Pf || g == Category::Po;
}

bool is_numeric(char32_t c) {
    using unicode::Category;
    const Category g = unicode::category(c);
    return g == Category::Nd || g == Category::Nl || g == Category::No;
}

class SplitPreTokenizer final : public PreTokenizer {
  public:
    SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
        : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
    void split(Pieces& p, bool) const override {
        Spans m;
        for_each_piece(p, [&](std::string_view piece, std::vector<std::string_view>& out) {
            if (pattern_.regex && behavior_ == Behavior::Isolated && !invert_) {
                return pattern_.regex->split(piece, out);  // the same tiling, one pass
            }
            m.clear();
            pattern_.find(piece, m);
            split_matches(piece, m, behavior_, invert_, out);
        });
    }

  private:
    Pattern pattern_;
    Behavior behavior_;
    bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
  public:
    ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
        : add_prefix_space_(add_prefix_space) {
        if (use_regex)
            regex_ = std::make_shared<const RegexSplitter>(std::string(kGpt2SplitPattern));
    }
    void split(Pieces& p, bool) const override {
        for_each_piece(p, [&](std::string_view piece, std::vector<std::string_view>& out) {
            if (add_prefix_space_ && !piece.starts_with(' '))
                piece = p.own(" " + std::string(piece));
            if (regex_) return regex_->split(piece, out);
            out.push_back(piece);
        });
    }
    bool is_byte_level() const override { return true; }

  private:
    bool add_prefix_space_;
    std::shared_ptr<const RegexSplitter> regex_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
  public:
    MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
        : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
    void split(Pieces& p, bool origin) const override {
        std::vector<std::string_view> out;
        for (size_t k = 0; k < p.list.size(); ++k) {
            std::string s;
            for (char c : p.list[k]) {
                if (c == ' ') {
                    s += rep_;
                } else {
                    s += c;
                }
            }
            const bool first = origin && k == 0;
            if (!s.starts_with(rep_) &&
                (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && first))) {
                s.insert(0, rep_);
            }
            std::string_view owned = p.own(std::move(s));
            if (!split_) {
                if (!owned.empty()) out.push_back(owned);
                continue;
            }
            Spans m;
            Pattern{rep_, nullptr}.find(owned, m);
            split_matches(owned, m, Behavior::MergedWithNext, false, out);
        }
        p.list.swap(out);
    }

  private:
    std::string rep_;
    PrependScheme scheme_;
    bool split_;
};

class CharSplitPreTokenizer final : public PreTokenizer {
  public:
    CharSplitPreTokenizer(CharTest test, Behavior behavior)
        : test_(std::move(test)), behavior_(behavior) {}
    void split(Pieces& p, bool) const override { split_by_chars(p, test_, behavior_); }

  private:
    CharTest test_;
    Behavior behavior_;
};

// Whitespace: the runs of \w+ and of [^\w\s]+ are the pieces; whitespace is dropped.
class WhitespacePreTokenizer final : public PreTokenizer {
  public:
    void split(Pieces& p, bool) const override {
        for_each_piece(p, [&](std::string_view piece, std::vector<std::string_view>& out) {
            int run = 0;  // 0 none, 1 word, 2 other
            size_t begin = 0;
            for (size_t i = 0; i < piece.size();) {
                const size_t n = std::max<size_t>(1, utf8::char_len(piece, i));
                const char32_t c = utf8::decode(piece, i, n);
                const int kind = unicode::is_white_space(c) ? 0 : is_word_char(c) ? 1 : 2;
                if (kind != run) {
                    if (run != 0) out.push_back(piece.substr(begin, i - begin));
                    begin = i;
                    run = kind;
                }
                i += n;
            }
            if (run != 0) out.push_back(piece.substr(begin));
        });
    }
};

class SequencePreTokenizer final : public PreTokenizer {
  public:
    explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> items)
        : items_(std::move(items)) {}
    void split(Pieces& p, bool origin) const override {
        for (const auto& item : items_) item->split(p, origin);
    }
    bool is_byte_level() const override {
        return !items_.empty() && items_.back()->is_byte_level();
    }

  private:
    std::vector<std::unique_ptr<PreTokenizer>> items_;
};

}  // namespace

bool is_word_char(char32_t c) {
    using unicode::Category;
    switch (unicode::category(c)) {
        case Category::Lu:
        case Category::Ll:
        case Category::Lt:
        case Category::Lm:
        case Category::Lo:
        case Category::Mn:
        case Category::Mc:
        case Category::Me:
        case Category::Nd:
        case Category::Nl:
        case Category::Pc:
            return true;
        default:
            break;
    }
    // Join_Control, and the Other_Alphabetic symbols (circled and squared Latin letters).
    return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
           (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
           (c >= 0x1F170 && c <= 0x1F189);
}

PrependScheme make_prepend_scheme(const json& j, std::string_view src, const std::string& where) {
    const json* scheme = field(j, "prepend_scheme");
    const bool add_prefix_space = bool_field(j, "add_prefix_space", true, src, where);
    PrependScheme p = PrependScheme::Always;  // the legacy form: add_prefix_space alone
    if (scheme != nullptr && *scheme == "first") {
        p = PrependScheme::First;
    } else if (scheme != nullptr && *scheme != "always") {
        ETE_CHECK(*scheme == "never",
                  "{}: {}.prepend_scheme must be \"first\", \"always\" or \"never\"", src, where);
        p = PrependScheme::Never;
    }
    // HF refuses the file otherwise ("add_prefix_space does not match declared prepend_scheme").
    ETE_CHECK(add_prefix_space || p == PrependScheme::Never,
              "{}: {}.add_prefix_space is false but prepend_scheme is not \"never\"", src, where);
    return p;
}

std::string char_field(const json& obj, const char* key, std::string_view src,
                       std::string_view where) {
    std::string s = string_field(obj, key, src, where);
    ETE_CHECK(!s.empty() && utf8::char_len(s, 0) == s.size(), "{}: {}.{} must be one character",
              src, where, key);
    return s;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, std::string_view src,
                                                 const std::string& where) {
    const std::string type = type_of(j, src, where);
    if (type == "Split") {
        const json* behavior = field(j, "behavior");
        ETE_CHECK(behavior != nullptr, "{}: {}.behavior is missing", src, where);
        const json* pattern = field(j, "pattern");
        ETE_CHECK(pattern != nullptr, "{}: {}.pattern is missing", src, where);
        return std::make_unique<SplitPreTokenizer>(
            make_pattern(*pattern, src, where + ".pattern"),
            make_behavior(*behavior, src, where + ".behavior"),
            bool_field(j, "invert", false, src, where));
    }
    if (type == "ByteLevel") {
        return std::make_unique<ByteLevelPreTokenizer>(
            bool_field(j, "add_prefix_space", true, src, where),
            bool_field(j, "use_regex", true, src, where));
    }
    if (type == "Metaspace") {
        return std::make_unique<MetaspacePreTokenizer>(char_field(j, "replacement", src, where),
                                                       make_prepend_scheme(j, src, where),
                                                       bool_field(j, "split", true, src, where));
    }
    if (type == "Digits") {
        const bool individual = bool_field(j, "individual_digits", false, src, where);
        return std::make_unique<CharSplitPreTokenizer>(
            is_numeric, individual ? Behavior::Isolated : Behavior::Contiguous);
    }
    if (type == "Punctuation") {
        const json* behavior = field(j, "behavior");
        return std::make_unique<CharSplitPreTokenizer>(
            is_punctuation,
            behavior ? make_behavior(*behavior, src, where + ".behavior") : Behavior::Isolated);
    }
    if (type == "WhitespaceSplit") {
        return std::make_unique<CharSplitPreTokenizer>(unicode::is_white_space, Behavior::Removed);
    }
    if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
    if (type == "CharDelimiterSplit") {
        const std::string d = char_field(j, "delimiter", src, where);
        const char32_t dc = utf8::decode(d, 0, d.size());
        return std::make_unique<CharSplitPreTokenizer>([dc](char32_t c) { return c == dc; },
                                                       Behavior::Removed);
    }
    if (type == "BertPreTokenizer") {
        std::vector<std::unique_ptr<PreTokenizer>> items;
        items.push_back(
            std::make_unique<CharSplitPreTokenizer>(unicode::is_white_space, Behavior::Removed));
        items.push_back(
            std::make_unique<CharSplitPreTokenizer>(is_punctuation, Behavior::Isolated));
        return std::make_unique<SequencePreTokenizer>(std::move(items));
    }
    ETE_CHECK(type == "Sequence",
              "{}: {} has type '{}', which ETE does not support (supported: Split, ByteLevel, "
              "Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, "
              "BertPreTokenizer, Sequence)",
              src, where, type);
    const json& arr = sequence_items(j, "pretokenizers", src, where);
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t k = 0; k < arr.size(); ++k) {
        const std::string at = fmt::format("{}.pretokenizers[{}]", where, k);
        items.push_back(make_pre_tokenizer(arr[k], src, at));
        ETE_CHECK(k + 1 == arr.size() || !items.back()->is_byte_level(),
                  "{}: {} is ByteLevel but not last in its Sequence; ETE supports ByteLevel only "
                  "as the last pre-tokenizer",
                  src, at);
    }
    return std::make_unique<SequencePreTokenizer>(std::move(items));
}

}  // namespace ete::tok
