// ete/data/special_tokens.cpp — BOS/EOS/pad from the model's tokenizer_config.json and
// generation_config.json, the files transformers takes them from.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/core/log.h"
#include "ete/data/tokenizer.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

}  // namespace

void Tokenizer::read_model_configs(const std::string& dir) {
    const fs::path base = dir.empty() ? fs::path(".") : fs::path(dir);
    const fs::path tc_path = base / "tokenizer_config.json",
                   gc_path = base / "generation_config.json";
    bool have_bos = false, have_eos = false, have_pad = false;
    if (fs::exists(tc_path)) {
        const json tc = read_json_file(tc_path);
        ETE_CHECK(tc.is_object(), "{}: expected a JSON object", tc_path.string());
        // A token is written as its text or as {"content": text, ...}; null means none.
        auto token = [&](const char* key, int32_t& id, bool& have) {
            auto it = tc.find(key);
            if (it == tc.end()) return;
            have = true;
            const json& v = it->is_object() && it->contains("content") ? (*it)["content"] : *it;
            if (v.is_null()) {
                id = -1;
                return;
            }
            ETE_CHECK(v.is_string(), "{}: {} must be a token string, {{\"content\": ...}} or null",
                      tc_path.string(), key);
            auto found = token_to_id(v.get<std::string>());
            ETE_CHECK(found.has_value(), "{}: {} {} is not a token of the tokenizer",
                      tc_path.string(), key, v.dump());
            id = *found;
        };
        token("bos_token", bos_, have_bos);
        token("eos_token", eos_, have_eos);
        token("pad_token", pad_, have_pad);
        if (have_eos) eos_source_ = "tokenizer_config.json";
    }
    stop_ids_.clear();
    if (eos_ >= 0) stop_ids_.push_back(eos_);
    if (!fs::exists(gc_path)) return;
    const json gc = read_json_file(gc_path);
    ETE_CHECK(gc.is_object(), "{}: expected a JSON object", gc_path.string());
    // Ids outside the vocabulary (a model config that disagrees with its tokenizer) are ignored
    // with a warning rather than used.
    auto ids_of = [&](const char* key) {
        std::vector<int32_t> ids;
        auto it = gc.find(key);
        if (it == gc.end() || it->is_null()) return ids;
        for (const json& v : it->is_array() ? *it : json::array({*it})) {
            ETE_CHECK(v.is_number_integer(), "{}: {} must be an id or a list of ids",
                      gc_path.string(), key);
            const int64_t id = v.get<int64_t>();
            if (id < 0 || id >= vocab_size()) {
                log_warn("{}: {} {} is outside the tokenizer's {} ids; ignored", gc_path.string(),
                         key, id, vocab_size());
                continue;
            }
            ids.push_back(static_cast<int32_t>(id));
        }
        return ids;
    };
    const std::vector<int32_t> eos = ids_of("eos_token_id");
    if (!have_eos && !eos.empty()) {
        eos_ = eos[0];
        eos_source_ = "generation_config.json";
        stop_ids_.assign(1, eos_);
    }
    for (int32_t id : eos) {
        if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) {
            stop_ids_.push_back(id);
        }
    }
    if (const std::vector<int32_t> bos = ids_of("bos_token_id"); !have_bos && !bos.empty()) {
        bos_ = bos[0];
    }
    if (const std::vector<int32_t> pad = ids_of("pad_token_id"); !have_pad && !pad.empty()) {
        pad_ = pad[0];
    }
}

}  // namespace ete
