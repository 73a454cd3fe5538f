// ete/data/tokenizer_json.cpp — Hugging Face tokenizer.json reading and writing.
//
// Written files follow GPT-2's tokenizer.json: ByteLevel pre-tokenizer (add_prefix_space false,
// use_regex true), ByteLevel post-processor and decoder, BPE model with vocab ordered by id and
// merges as "a b" strings (byte-level tokens never contain a space: it is written as 'Ġ').
// Special tokens appear both in added_tokens and in model.vocab, as in GPT-2's file.
#include <nlohmann/json.hpp>

#include <unordered_set>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/byte_level.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tokenizer.h"

namespace ete {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr int64_t kMaxTokenId = int64_t{1} << 24;

const json* field(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool bool_field(const json& obj, const char* key, bool dflt, std::string_view src,
                std::string_view where) {
    const json* v = field(obj, key);
    if (v == nullptr) return dflt;
    ETE_CHECK(v->is_boolean(), "{}: {}.{} must be true or false", src, where, key);
    return v->get<bool>();
}

std::string type_of(const json& obj, std::string_view src, std::string_view where) {
    ETE_CHECK(obj.is_object(), "{}: {} must be an object", src, where);
    const json* t = field(obj, "type");
    ETE_CHECK(t != nullptr && t->is_string(), "{}: {}.type must be a string", src, where);
    return t->get<std::string>();
}

int32_t token_id_value(const json& v, std::string_view src, std::string_view what) {
    ETE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxTokenId,
              "{}: {} must be an integer id in [0, {})", src, what, kMaxTokenId);
    return static_cast<int32_t>(v.get<int64_t>());
}

ordered_json byte_level_json(bool add_prefix_space, bool trim_offsets, bool use_regex) {
    return {{"type", "ByteLevel"},
            {"add_prefix_space", add_prefix_space},
            {"trim_offsets", trim_offsets},
            {"use_regex", use_regex}};
}

}  // namespace

// Friend of Tokenizer: fills and reads its private tables.
class TokenizerJson {
  public:
    static std::string write(const Tokenizer& t);
    static Tokenizer read(std::string_view text, std::string_view src);

  private:
    static ordered_json pre_tokenizer_json(const Tokenizer& t);
    static ordered_json model_json(const Tokenizer& t);
    static void read_added(const json& root, Tokenizer& t, std::string_view src);
    static StringIdMap read_vocab(const json& model, Tokenizer& t, std::string_view src);
    static void read_merges(const json& model, const StringIdMap& vocab, Tokenizer& t,
                            std::string_view src);
    static void read_pre_tokenizer(const json& root, Tokenizer& t, std::string_view src);
    static void check_model_options(const json& model, std::string_view src);
};

ordered_json TokenizerJson::pre_tokenizer_json(const Tokenizer& t) {
    switch (t.pre_form_) {
        case Tokenizer::PreTokForm::ByteLevelRegex:
            return byte_level_json(t.add_prefix_space_, true, true);
        case Tokenizer::PreTokForm::ByteLevelNoRegex:
            return byte_level_json(t.add_prefix_space_, true, false);
        case Tokenizer::PreTokForm::SplitThenByteLevel:
            break;
    }
    ordered_json split = {{"type", "Split"},
                          {"pattern", {{"Regex", t.split_pattern()}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
    return {{"type", "Sequence"},
            {"pretokenizers", {split, byte_level_json(t.add_prefix_space_, false, false)}}};
}

ordered_json TokenizerJson::model_json(const Tokenizer& t) {
    // Vocab in id order. ordered_json's operator[] searches linearly (quadratic for a large
    // vocab), so entries go straight into its vector; finalize() guaranteed the keys are unique.
    ordered_json vocab = ordered_json::object();
    auto& entries =
        static_cast<ordered_json::object_t::Container&>(vocab.get_ref<ordered_json::object_t&>());
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
        if (t.kind_[id] != Tokenizer::TokenKind::Unused) {
            entries.emplace_back(t.id_to_token(id), id);
        }
    }
    ordered_json merges = ordered_json::array();
    for (auto [a, b] : t.merges_) merges.push_back(t.id_to_token(a) + " " + t.id_to_token(b));
    return {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", t.ignore_merges_},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}};
}

std::string TokenizerJson::write(const Tokenizer& t) {
    ordered_json added = ordered_json::array();
    for (const AddedToken& a : t.added_) {
        added.push_back({{"id", a.id},
                         {"content", a.content},
                         {"single_word", false},
                         {"lstrip", false},
                         {"rstrip", false},
                         {"normalized", false},
                         {"special", a.special}});
    }
    ordered_json root = {{"version", "1.0"},
                         {"truncation", nullptr},
                         {"padding", nullptr},
                         {"added_tokens", std::move(added)},
                         {"normalizer", nullptr},
                         {"pre_tokenizer", pre_tokenizer_json(t)},
                         {"post_processor", byte_level_json(true, false, true)},
                         {"decoder", byte_level_json(true, true, true)},
                         {"model", model_json(t)}};
    try {
        return root.dump(2) + "\n";
    } catch (const nlohmann::json::exception& e) {
        throw_error(fmt::format("tokenizer save: a token is not valid UTF-8 ({})", e.what()));
    }
}

void TokenizerJson::read_added(const json& root, Tokenizer& t, std::string_view src) {
    const json* added = field(root, "added_tokens");
    if (added == nullptr) return;
    ETE_CHECK(added->is_array(), "{}: added_tokens must be an array", src);
    for (const json& a : *added) {
        ETE_CHECK(a.is_object() && a.contains("id") && a.contains("content"),
                  "{}: each added_tokens entry must be an object with id and content", src);
        const json& content = a["content"];
        ETE_CHECK(content.is_string(), "{}: added_tokens content must be a string", src);
        int32_t id = token_id_value(a["id"], src, "added_tokens id");
        t.added_.push_back(
            {id, content.get<std::string>(), bool_field(a, "special", false, src, "added_tokens")});
    }
    std::unordered_set<int32_t> seen;
    for (const AddedToken& a : t.added_) {
        ETE_CHECK(seen.insert(a.id).second, "{}: added token id {} is used twice", src, a.id);
    }
}

StringIdMap TokenizerJson::read_vocab(const json& model, Tokenizer& t, std::string_view src) {
    const json* vocab = field(model, "vocab");
    ETE_CHECK(vocab != nullptr && vocab->is_object(), "{}: model.vocab must be an object", src);
    StringIdMap ids;
    int32_t max_id = -1;
    for (const AddedToken& a : t.added_) max_id = std::max(max_id, a.id);
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        int32_t id = token_id_value(it.value(), src, fmt::format("model.vocab['{}']", it.key()));
        ids.emplace(it.key(), id);
        max_id = std::max(max_id, id);
    }
    t.bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
    t.kind_.assign(static_cast<size_t>(max_id + 1), Tokenizer::TokenKind::Unused);
    for (const AddedToken& a : t.added_) {
        t.bytes_[a.id] = a.content;
        t.kind_[a.id] = Tokenizer::TokenKind::Added;
    }
    for (const auto& [token, id] : ids) {
        if (t.kind_[id] == Tokenizer::TokenKind::Added) {
            ETE_CHECK(t.bytes_[id] == token,
                      "{}: id {} is '{}' in model.vocab but '{}' in "
                      "added_tokens",
                      src, id, token, t.bytes_[id]);
            continue;
        }
        ETE_CHECK(t.kind_[id] == Tokenizer::TokenKind::Unused, "{}: model.vocab uses id {} twice",
                  src, id);
        ETE_CHECK(data::byte_level_to_bytes(token, t.bytes_[id]),
                  "{}: model.vocab token '{}' (id {}) is not byte-level text (expected GPT-2's "
                  "byte alphabet)",
                  src, token, id);
        t.kind_[id] = Tokenizer::TokenKind::Model;
    }
    return ids;
}

void TokenizerJson::read_merges(const json& model, const StringIdMap& vocab, Tokenizer& t,
                                std::string_view src) {
    const json* merges = field(model, "merges");
    ETE_CHECK(merges != nullptr && merges->is_array(), "{}: model.merges must be an array", src);
    auto id_of = [&](std::string_view tok, size_t rank) {
        auto it = vocab.find(tok);
        ETE_CHECK(it != vocab.end(), "{}: merge {} uses '{}', which is not in model.vocab", src,
                  rank, tok);
        return it->second;
    };
    for (size_t r = 0; r < merges->size(); ++r) {
        const json& m = (*merges)[r];
        std::string a, b;
        if (m.is_string()) {
            const std::string& s = m.get_ref<const std::string&>();
            size_t sp = s.find(' ');
            ETE_CHECK(sp != std::string::npos && sp > 0 && s.find(' ', sp + 1) == std::string::npos,
                      "{}: merge {} '{}' must be two tokens separated by one space", src, r, s);
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else {
            ETE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                      "{}: merge {} must be a string \"a b\" or a pair [\"a\", \"b\"]", src, r);
            a = m[0].get<std::string>();
            b = m[1].get<std::string>();
        }
        t.merges_.emplace_back(id_of(a, r), id_of(b, r));
    }
}

void TokenizerJson::read_pre_tokenizer(const json& root, Tokenizer& t, std::string_view src) {
    const json* pre = field(root, "pre_tokenizer");
    ETE_CHECK(pre != nullptr, "{}: pre_tokenizer is null, expected ByteLevel (a byte-level BPE)",
              src);
    std::string type = type_of(*pre, src, "pre_tokenizer");
    if (type == "ByteLevel") {
        t.add_prefix_space_ = bool_field(*pre, "add_prefix_space", true, src, "pre_tokenizer");
        bool use_regex = bool_field(*pre, "use_regex", true, src, "pre_tokenizer");
        t.set_pre_tokenizer(use_regex ? Tokenizer::PreTokForm::ByteLevelRegex
                                      : Tokenizer::PreTokForm::ByteLevelNoRegex,
                            use_regex ? std::string(kGpt2SplitPattern) : std::string());
        return;
    }
    ETE_CHECK(type == "Sequence",
              "{}: pre_tokenizer type '{}' is not supported, expected "
              "ByteLevel or Sequence [Split, ByteLevel]",
              src, type);
    const json* seq = field(*pre, "pretokenizers");
    ETE_CHECK(seq != nullptr && seq->is_array() && seq->size() == 2 &&
                  type_of((*seq)[0], src, "pre_tokenizer.pretokenizers[0]") == "Split" &&
                  type_of((*seq)[1], src, "pre_tokenizer.pretokenizers[1]") == "ByteLevel",
              "{}: pre_tokenizer Sequence must be [Split, ByteLevel]", src);
    const json& split = (*seq)[0];
    const json* pattern = field(split, "pattern");
    const json* regex = pattern && pattern->is_object() ? field(*pattern, "Regex") : nullptr;
    ETE_CHECK(regex != nullptr && regex->is_string(),
              "{}: pre_tokenizer Split.pattern must be {{\"Regex\": \"...\"}}", src);
    const json* behavior = field(split, "behavior");
    ETE_CHECK(behavior != nullptr && *behavior == "Isolated" &&
                  !bool_field(split, "invert", false, src, "Split"),
              "{}: pre_tokenizer Split must have behavior Isolated and invert false", src);
    const json& bl = (*seq)[1];
    ETE_CHECK(!bool_field(bl, "use_regex", true, src, "ByteLevel"),
              "{}: ByteLevel after a Split must have use_regex false", src);
    t.add_prefix_space_ = bool_field(bl, "add_prefix_space", true, src, "ByteLevel");
    t.set_pre_tokenizer(Tokenizer::PreTokForm::SplitThenByteLevel, regex->get<std::string>());
}

void TokenizerJson::check_model_options(const json& model, std::string_view src) {
    ETE_CHECK(!bool_field(model, "byte_fallback", false, src, "model"),
              "{}: model.byte_fallback true is not supported (expected a byte-level BPE)", src);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* v = field(model, key);
        ETE_CHECK(v == nullptr || (v->is_string() && v->get<std::string>().empty()),
                  "{}: model.{} must be empty or null", src, key);
    }
}

Tokenizer TokenizerJson::read(std::string_view text, std::string_view src) {
    json root;
    try {
        root = json::parse(text);
    } catch (const json::parse_error& e) {
        throw_error(fmt::format("{}: invalid JSON, expected a tokenizer.json: {}", src, e.what()));
    }
    ETE_CHECK(root.is_object(), "{}: expected a JSON object (tokenizer.json)", src);
    const json* model = field(root, "model");
    ETE_CHECK(model != nullptr && model->is_object(), "{}: missing object 'model'", src);
    const json* mtype = field(*model, "type");
    ETE_CHECK(mtype == nullptr || *mtype == "BPE", "{}: model.type is {}, expected \"BPE\"", src,
              mtype ? mtype->dump() : "");
    const json* norm = field(root, "normalizer");
    ETE_CHECK(norm == nullptr, "{}: normalizer {} is not supported, expected null", src,
              norm ? norm->dump() : "");
    const json* dec = field(root, "decoder");
    ETE_CHECK(dec == nullptr || type_of(*dec, src, "decoder") == "ByteLevel",
              "{}: decoder must be ByteLevel or null", src);
    check_model_options(*model, src);

    Tokenizer t;
    read_added(root, t, src);
    StringIdMap vocab = read_vocab(*model, t, src);
    read_merges(*model, vocab, t, src);
    read_pre_tokenizer(root, t, src);
    t.ignore_merges_ = bool_field(*model, "ignore_merges", false, src, "model");
    t.finalize(src);
    return t;
}

std::string Tokenizer::to_json() const {
    return TokenizerJson::write(*this);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string_view source_name) {
    return TokenizerJson::read(json_text, source_name);
}

void Tokenizer::save(const std::string& path) const {
    std::string text = to_json();
    AtomicFileWriter w(path);
    w.write(text.data(), text.size());
    w.commit();
}

Tokenizer Tokenizer::load(const std::string& path) {
    std::string text = read_file(path);
    return from_json(text, fmt::format("tokenizer.json '{}'", path));
}

}  // namespace ete
