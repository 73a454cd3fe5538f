// ete/data/tok_normalizers.cpp — HF's normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// Replace, Prepend, Sequence.
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_pipeline.h"
#include "ete/data/unicode.h"
#include "ete/data/utf8.h"

namespace ete::tok {
namespace {

class UnicodeNormalizer final : public Normalizer {
  public:
    using Fn = std::string (*)(std::string_view);
    explicit UnicodeNormalizer(Fn fn) : fn_(fn) {}
    void normalize(std::string& s) const override { s = fn_(s); }

  private:
    Fn fn_;
};

// Strip: drops leading and/or trailing whitespace (the White_Space property, Rust's
// char::is_whitespace).
class StripNormalizer final : public Normalizer {
  public:
    StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
    void normalize(std::string& s) const override {
        size_t begin = 0, end = s.size();
        if (left_) {
            while (begin < end) {
                const size_t n = std::max<size_t>(1, utf8::char_len(s, begin));
                if (!white(s, begin, n)) break;
                begin += n;
            }
        }
        if (right_) {
            while (end > begin) {
                size_t b = end - 1;
                while (b > begin && utf8::is_cont(static_cast<unsigned char>(s[b]))) --b;
                if (!white(s, b, end - b)) break;
                end = b;
            }
        }
        s = s.substr(begin, end - begin);
    }

  private:
    static bool white(const std::string& s, size_t i, size_t n) {
        return utf8::char_len(s, i) == n && unicode::is_white_space(utf8::decode(s, i, n));
    }
    bool left_, right_;
};

class ReplaceNormalizer final : public Normalizer {
  public:
    ReplaceNormalizer(Pattern pattern, std::string content)
        : pattern_(std::move(pattern)), content_(std::move(content)) {}
    void normalize(std::string& s) const override { pattern_.replace(s, content_); }

  private:
    Pattern pattern_;
    std::string content_;
};

class PrependNormalizer final : public Normalizer {
  public:
    explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
    void normalize(std::string& s) const override {
        if (!s.empty()) s.insert(0, prefix_);
    }

  private:
    std::string prefix_;
};

class SequenceNormalizer final : public Normalizer {
  public:
    explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> items)
        : items_(std::move(items)) {}
    void normalize(std::string& s) const override {
        const size_t in = s.size(), limit = max_normalized_bytes(in);
        for (const auto& n : items_) {
            n->normalize(s);
            ETE_CHECK(s.size() <= limit,
                      "tokenizer.json normalizer Sequence: grows a {}-byte text to {} bytes (more "
                      "than 16x): refused (real tokenizers change a text by a few bytes per "
                      "character)",
                      in, s.size());
        }
    }

  private:
    std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, std::string_view src,
                                            const std::string& where) {
    const std::string type = type_of(j, src, where);
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::nfc);
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::nfd);
    if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::nfkc);
    if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::nfkd);
    if (type == "Lowercase") return std::make_unique<UnicodeNormalizer>(unicode::lowercase);
    if (type == "Strip") {
        return std::make_unique<StripNormalizer>(bool_field(j, "strip_left", true, src, where),
                                                 bool_field(j, "strip_right", true, src, where));
    }
    if (type == "Replace") {
        const json* pattern = field(j, "pattern");
        ETE_CHECK(pattern != nullptr, "{}: {}.pattern is missing", src, where);
        return std::make_unique<ReplaceNormalizer>(make_pattern(*pattern, src, where + ".pattern"),
                                                   string_field(j, "content", src, where));
    }
    if (type == "Prepend")
        return std::make_unique<PrependNormalizer>(string_field(j, "prepend", src, where));
    ETE_CHECK(type == "Sequence",
              "{}: {} has type '{}', which ETE does not support (supported: NFC, NFD, NFKC, "
              "NFKD, Lowercase, Strip, Replace, Prepend, Sequence)",
              src, where, type);
    const json& arr = sequence_items(j, "normalizers", src, where);
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t k = 0; k < arr.size(); ++k) {
        items.push_back(make_normalizer(arr[k], src, fmt::format("{}.normalizers[{}]", where, k)));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
}

}  // namespace ete::tok
