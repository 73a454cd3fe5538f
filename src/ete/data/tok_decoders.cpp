// ete/data/tok_decoders.cpp — HF's decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip,
// Replace, Sequence. Each rewrites the list of token strings (HF's decode_chain); the decoded
// text is the concatenation of what is left.
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/byte_level.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_pipeline.h"
#include "ete/data/utf8.h"

namespace ete::tok {
namespace {

using Tokens = std::vector<std::string>;

class ByteLevelDecoder final : public Decoder {
  public:
    void decode(Tokens& tokens) const override {
        std::string bytes;
        for (const std::string& t : tokens) bytes += byte_level_decode(t);
        tokens.assign(1, utf8::repair(bytes));
    }
};

// "<0xNN>" -> the byte, else -1; the hex part is read as Rust's u8::from_str_radix(_, 16) reads
// it (upper or lower case, and a '+' sign).
int byte_token(std::string_view t) {
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
    auto hex = [](char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
    };
    if (t[3] == '+') return hex(t[4]);
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ByteFallbackDecoder final : public Decoder {
  public:
    void decode(Tokens& tokens) const override {
        Tokens out;
        std::string run;
        auto flush = [&] {
            if (run.empty()) return;
            if (utf8::valid(run)) {
                out.push_back(run);
            } else {
                out.insert(out.end(), run.size(), std::string(utf8::kReplacement));
            }
            run.clear();
        };
        for (std::string& t : tokens) {
            if (int b = byte_token(t); b >= 0) {
                run += static_cast<char>(b);
                continue;
            }
            flush();
            out.push_back(std::move(t));
        }
        flush();
        tokens.swap(out);
    }
};

class FuseDecoder final : public Decoder {
  public:
    void decode(Tokens& tokens) const override {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
    }
};

// Strip(content, start, stop): up to `start` leading and `stop` trailing `content` characters
// come off every token.
class StripDecoder final : public Decoder {
  public:
    StripDecoder(std::string content, size_t start, size_t stop)
        : content_(std::move(content)), start_(start), stop_(stop) {}
    void decode(Tokens& tokens) const override {
        const size_t w = content_.size();
        for (std::string& t : tokens) {
            size_t begin = 0, end = t.size();
            for (size_t k = 0; k < start_ && t.compare(begin, w, content_) == 0; ++k) begin += w;
            for (size_t k = 0;
                 k < stop_ && end >= begin + w && t.compare(end - w, w, content_) == 0; ++k) {
                end -= w;
            }
            t = t.substr(begin, end - begin);
        }
    }

  private:
    std::string content_;
    size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
  public:
    ReplaceDecoder(Pattern pattern, std::string content)
        : pattern_(std::move(pattern)), content_(std::move(content)) {}
    void decode(Tokens& tokens) const override {
        for (std::string& t : tokens) pattern_.replace(t, content_);
    }

  private:
    Pattern pattern_;
    std::string content_;
};

// Metaspace: the replacement character becomes a space, except in the first token, where it is
// dropped when a prefix is prepended at encoding (prepend_scheme first or always).
class MetaspaceDecoder final : public Decoder {
  public:
    MetaspaceDecoder(std::string rep, bool strip_first)
        : rep_(std::move(rep)), strip_first_(strip_first) {}
    void decode(Tokens& tokens) const override {
        for (size_t i = 0; i < tokens.size(); ++i) {
            std::string out;
            const std::string& t = tokens[i];
            for (size_t p = 0; p < t.size();) {
                if (t.compare(p, rep_.size(), rep_) == 0) {
                    if (!(i == 0 && strip_first_)) out += ' ';
                    p += rep_.size();
                } else {
                    out += t[p++];
                }
            }
            tokens[i].swap(out);
        }
    }

  private:
    std::string rep_;
    bool strip_first_;
};

class SequenceDecoder final : public Decoder {
  public:
    explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items)
        : items_(std::move(items)) {}
    void decode(Tokens& tokens) const override {
        for (const auto& d : items_) d->decode(tokens);
    }

  private:
    std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

std::string byte_level_decode(std::string_view token) {
    std::string bytes;
    return data::byte_level_to_bytes(token, bytes) ? bytes : std::string(token);
}

std::unique_ptr<Decoder> make_decoder(const json& j, std::string_view src,
                                      const std::string& where) {
    const std::string type = type_of(j, src, where);
    if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
    if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
    if (type == "Fuse") return std::make_unique<FuseDecoder>();
    if (type == "Strip") {
        return std::make_unique<StripDecoder>(char_field(j, "content", src, where),
                                              count_field(j, "start", 0, src, where),
                                              count_field(j, "stop", 0, src, where));
    }
    if (type == "Replace") {
        const json* pattern = field(j, "pattern");
        ETE_CHECK(pattern != nullptr, "{}: {}.pattern is missing", src, where);
        return std::make_unique<ReplaceDecoder>(make_pattern(*pattern, src, where + ".pattern"),
                                                string_field(j, "content", src, where));
    }
    if (type == "Metaspace") {
        const bool strip = make_prepend_scheme(j, src, where) != PrependScheme::Never;
        return std::make_unique<MetaspaceDecoder>(char_field(j, "replacement", src, where), strip);
    }
    ETE_CHECK(type == "Sequence",
              "{}: {} has type '{}', which ETE does not support (supported: ByteLevel, "
              "Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)",
              src, where, type);
    const json& arr = sequence_items(j, "decoders", src, where);
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t k = 0; k < arr.size(); ++k) {
        items.push_back(make_decoder(arr[k], src, fmt::format("{}.decoders[{}]", where, k)));
    }
    return std::make_unique<SequenceDecoder>(std::move(items));
}

}  // namespace ete::tok
