// ete/data/tok_pipeline.cpp — assembling a tokenizer.json's pipeline.
#include "ete/data/tok_pipeline.h"

#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tok_json.h"

namespace ete::tok {
namespace {

// Llama-3's split pattern; like GPT-2's, it is safe to cut at split_at_line_starts' points.
constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2/2.5/3's: Llama-3's with single digits (\p{N}), and no digit piece holds a newline, so
// the same cuts are safe.
constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-4o's (o200k): its punctuation alternative takes a "/" after the newlines it swallows, so a
// piece can span a newline followed by "/"; split_at_line_starts cuts only before a letter or
// digit, which no piece of this pattern reaches across either.
constexpr std::string_view kGpt4oSplitPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+)"
    R"([\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|)"
    R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A normalizer under which a text may be cut at split_at_line_starts' points before it is
// normalized: none, or one Unicode normal form. Each cut falls before an ASCII letter or digit,
// and every ASCII character is a normalization boundary (canonical class 0, composes with nothing
// before it), so the form of the whole is the forms of the chunks put together.
bool cut_safe_normalizer(const json* norm) {
    if (norm == nullptr) return true;
    const std::string type = norm->is_object() ? norm->value("type", "") : "";
    return type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD";
}

// The regex of a pre-tokenizer that is ByteLevel(regex), or [Split(regex, Isolated or inverted
// Removed), ByteLevel] with no prefix space: the forms whose pieces never span a line start of the
// patterns above. Empty otherwise.
std::string chunkable_pattern(const json& pre) {
    auto plain_byte_level = [](const json& j) {
        return j.value("type", "") == "ByteLevel" && !j.value("add_prefix_space", true);
    };
    if (plain_byte_level(pre) && pre.value("use_regex", true))
        return std::string(kGpt2SplitPattern);
    const json* seq = field(pre, "pretokenizers");
    if (pre.value("type", "") != "Sequence" || seq == nullptr || !seq->is_array() ||
        seq->size() != 2 || !plain_byte_level((*seq)[1]) || (*seq)[1].value("use_regex", true)) {
        return {};
    }
    const json& split = (*seq)[0];
    const json* pattern = field(split, "pattern");
    const json* regex = pattern ? field(*pattern, "Regex") : nullptr;
    // Isolated keeps the matches and the text between them; Removed with invert keeps the
    // matches only. The patterns line_start_safe accepts match every character, so both give
    // the matches.
    const std::string behavior = split.value("behavior", "");
    const bool invert = split.value("invert", false);
    const bool matches = (behavior == "Isolated" && !invert) || (behavior == "Removed" && invert);
    if (split.value("type", "") != "Split" || !matches || regex == nullptr || !regex->is_string())
        return {};
    return regex->get<std::string>();
}

void read_model_options(const json& model, Pipeline& p, std::string_view src) {
    p.byte_fallback = bool_field(model, "byte_fallback", false, src, "model");
    p.fuse_unk = bool_field(model, "fuse_unk", false, src, "model");
    if (const json* unk = field(model, "unk_token")) {
        ETE_CHECK(unk->is_string(), "{}: model.unk_token must be a string or null", src);
        p.unk_token = unk->get<std::string>();
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* v = field(model, key);
        ETE_CHECK(v == nullptr || (v->is_string() && v->get<std::string>().empty()),
                  "{}: model.{} is {}, but ETE supports only an empty or null one", src, key,
                  v ? v->dump() : "");
    }
}

std::string dump_or_null(const json* j) {
    return j == nullptr ? "null" : j->dump();
}

}  // namespace

std::shared_ptr<const Pipeline> make_pipeline(const json& root, const json& model,
                                              std::string_view src) {
    auto p = std::make_shared<Pipeline>();
    const json* norm = field(root, "normalizer");
    const json* pre = field(root, "pre_tokenizer");
    const json* post = field(root, "post_processor");
    const json* dec = field(root, "decoder");
    if (norm) p->normalizer = make_normalizer(*norm, src, "normalizer");
    if (pre) {
        p->pre = make_pre_tokenizer(*pre, src, "pre_tokenizer");
        p->byte_level = p->pre->is_byte_level();
        const std::string chunk = chunkable_pattern(*pre);
        p->split_pattern = chunk;
        p->line_start_safe = cut_safe_normalizer(norm) &&
                             (chunk == kGpt2SplitPattern || chunk == kLlama3SplitPattern ||
                              chunk == kQwen2SplitPattern || chunk == kGpt4oSplitPattern);
    }
    if (post) p->post = make_post_processor(*post, src, "post_processor");
    if (dec) p->decoder = make_decoder(*dec, src, "decoder");
    read_model_options(model, *p, src);
    ETE_CHECK(!(p->byte_level && p->byte_fallback),
              "{}: model.byte_fallback is true with a ByteLevel pre_tokenizer; byte-level BPE "
              "has every byte in its vocab and no use for it",
              src);
    p->normalizer_json = dump_or_null(norm);
    p->pre_json = dump_or_null(pre);
    p->post_json = dump_or_null(post);
    p->decoder_json = dump_or_null(dec);
    return p;
}

std::shared_ptr<const Pipeline> gpt2_pipeline() {
    static const std::shared_ptr<const Pipeline> kGpt2 = [] {
        const json byte_level = {{"type", "ByteLevel"},
                                 {"add_prefix_space", false},
                                 {"trim_offsets", true},
                                 {"use_regex", true}};
        json root = {
            {"pre_tokenizer", byte_level}, {"post_processor", byte_level}, {"decoder", byte_level}};
        root["post_processor"]["add_prefix_space"] = true;
        root["post_processor"]["trim_offsets"] = false;
        root["decoder"]["add_prefix_space"] = true;
        return make_pipeline(root, json::object(), "GPT-2 defaults");
    }();
    return kGpt2;
}

}  // namespace ete::tok
