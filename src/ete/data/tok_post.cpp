// ete/data/tok_post.cpp — HF's post-processors for one sequence with add_special_tokens:
// TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel (ids unchanged), Sequence.
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_pipeline.h"

namespace ete::tok {
namespace {

int32_t id_value(const json& v, std::string_view src, const std::string& where) {
    ETE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1 << 24),
              "{}: {} must be a token id", src, where);
    return static_cast<int32_t>(v.get<int64_t>());
}

// ["<s>", 1] -> 1
int32_t pair_id(const json& j, const char* key, std::string_view src, const std::string& where) {
    const json* v = field(j, key);
    ETE_CHECK(v != nullptr && v->is_array() && v->size() == 2 && (*v)[0].is_string(),
              "{}: {}.{} must be [token, id]", src, where, key);
    return id_value((*v)[1], src, fmt::format("{}.{}[1]", where, key));
}

PostProcessor template_single(const json& j, std::string_view src, const std::string& where) {
    const json& single = sequence_items(j, "single", src, where);
    const json* specials = field(j, "special_tokens");
    PostProcessor p;
    bool seen_a = false;
    for (size_t k = 0; k < single.size(); ++k) {
        const std::string at = fmt::format("{}.single[{}]", where, k);
        const json& piece = single[k];
        if (field(piece, "Sequence") != nullptr) {
            ETE_CHECK(!seen_a, "{}: {} repeats the sequence; expected it once", src, at);
            seen_a = true;
            continue;
        }
        const json* sp = field(piece, "SpecialToken");
        ETE_CHECK(sp != nullptr, "{}: {} must be a SpecialToken or a Sequence", src, at);
        const std::string name = string_field(*sp, "id", src, at + ".SpecialToken");
        const json* entry = specials ? field(*specials, name.c_str()) : nullptr;
        ETE_CHECK(entry != nullptr, "{}: {} names '{}', which {}.special_tokens does not define",
                  src, at, name, where);
        const json& ids = sequence_items(*entry, "ids", src, where + ".special_tokens." + name);
        for (const json& id : ids) {
            (seen_a ? p.suffix : p.prefix).push_back(id_value(id, src, at));
        }
    }
    ETE_CHECK(seen_a, "{}: {}.single has no Sequence", src, where);
    return p;
}

}  // namespace

PostProcessor make_post_processor(const json& j, std::string_view src, const std::string& where) {
    const std::string type = type_of(j, src, where);
    if (type == "ByteLevel") return {};
    if (type == "TemplateProcessing") return template_single(j, src, where);
    if (type == "RobertaProcessing" || type == "BertProcessing") {
        return {{pair_id(j, "cls", src, where)}, {pair_id(j, "sep", src, where)}};
    }
    ETE_CHECK(type == "Sequence",
              "{}: {} has type '{}', which ETE does not support (supported: TemplateProcessing, "
              "RobertaProcessing, BertProcessing, ByteLevel, Sequence)",
              src, where, type);
    // HF passes each piece of a template's output (a special token, the sequence) to the next
    // processor as an encoding of its own, so a second template would see them as a pair: ETE
    // takes one processor besides ByteLevel, whose ids are unchanged.
    const json& arr = sequence_items(j, "processors", src, where);
    PostProcessor all;
    std::string first;  // the place of the processor that is not ByteLevel
    for (size_t k = 0; k < arr.size(); ++k) {
        const std::string at = fmt::format("{}.processors[{}]", where, k);
        PostProcessor p = make_post_processor(arr[k], src, at);
        if (type_of(arr[k], src, at) == "ByteLevel") continue;
        ETE_CHECK(first.empty(),
                  "{}: {} and {} are both post-processors besides ByteLevel; ETE supports one", src,
                  first, at);
        first = at;
        all = std::move(p);
    }
    return all;
}

}  // namespace ete::tok
