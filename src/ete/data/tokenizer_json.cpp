// ete/data/tokenizer_json.cpp — Hugging Face tokenizer.json reading and writing.
//
// Written files follow GPT-2's tokenizer.json: ByteLevel pre-tokenizer (add_prefix_space false,
// use_regex true), ByteLevel post-processor and decoder, BPE model with vocab ordered by id and
// merges as "a b" strings (byte-level tokens never contain a space: it is written as 'Ġ').
// Special tokens appear both in added_tokens and in model.vocab, as in GPT-2's file.
// A metaspace (Llama-2) tokenizer is written in the layout HF's Llama converter produces: the
// normalizer / Metaspace pre-tokenizer it was loaded with, the post-processor verbatim, decoder
// Sequence [Replace "▁" -> " ", ByteFallback, Fuse, Strip], BPE with unk_token and byte_fallback.
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
    static void check_model_options(const json& model, bool metaspace, std::string_view src);
    // Metaspace (Llama-2) mode.
    static bool is_metaspace(const json& root, std::string_view src);
    static void read_metaspace(const json& root, const json& model, Tokenizer& t,
                               std::string_view src);
    static void write_metaspace(const Tokenizer& t, ordered_json& root);
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
    // "a b" strings unless a token holds a space (possible only in metaspace vocabs).
    bool pairs = false;
    for (auto [a, b] : t.merges_) {
        pairs = pairs || t.id_to_token(a).find(' ') != std::string::npos ||
                t.id_to_token(b).find(' ') != std::string::npos;
    }
    ordered_json merges = ordered_json::array();
    for (auto [a, b] : t.merges_) {
        if (pairs) {
            merges.push_back({t.id_to_token(a), t.id_to_token(b)});
        } else {
            merges.push_back(t.id_to_token(a) + " " + t.id_to_token(b));
        }
    }
    if (t.sp_) {
        const Tokenizer::Metaspace& m = *t.sp_;
        return {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", m.unk_token.empty() ? ordered_json() : ordered_json(m.unk_token)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", m.fuse_unk},
                {"byte_fallback", m.byte_fallback},
                {"ignore_merges", t.ignore_merges_},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
    }
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
    if (t.sp_) write_metaspace(t, root);
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
        if (t.sp_) {
            ETE_CHECK(!token.empty(), "{}: model.vocab has an empty token (id {})", src, id);
            t.bytes_[id] = token;
            t.kind_[id] = Tokenizer::TokenKind::Model;
            continue;
        }
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

void TokenizerJson::check_model_options(const json& model, bool metaspace, std::string_view src) {
    ETE_CHECK(metaspace || !bool_field(model, "byte_fallback", false, src, "model"),
              "{}: model.byte_fallback true needs a Llama-2 style (metaspace) normalizer or "
              "pre_tokenizer; this file is byte-level",
              src);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        const json* v = field(model, key);
        ETE_CHECK(v == nullptr || (v->is_string() && v->get<std::string>().empty()),
                  "{}: model.{} must be empty or null", src, key);
    }
}

namespace {

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581 '▁'

bool string_is(const json& obj, const char* key, std::string_view value) {
    const json* v = field(obj, key);
    return v != nullptr && v->is_string() && v->get_ref<const std::string&>() == value;
}

// {"String": s} pattern of a Replace normalizer or decoder.
bool pattern_is(const json& obj, std::string_view value) {
    const json* p = field(obj, "pattern");
    return p != nullptr && p->is_object() && string_is(*p, "String", value);
}

// The items of a Sequence (under `key`) or the object itself.
std::vector<const json*> sequence_items(const json& obj, const char* key, std::string_view src,
                                        std::string_view where) {
    if (type_of(obj, src, where) != "Sequence") return {&obj};
    const json* seq = field(obj, key);
    ETE_CHECK(seq != nullptr && seq->is_array(), "{}: {}.{} must be an array", src, where, key);
    std::vector<const json*> items;
    for (const json& item : *seq) items.push_back(&item);
    return items;
}

void read_normalizer(const json* norm, Tokenizer::Metaspace& m, std::string_view src) {
    if (norm == nullptr) return;
    for (const json* n : sequence_items(*norm, "normalizers", src, "normalizer")) {
        std::string type = type_of(*n, src, "normalizer");
        if (type == "Prepend" && string_is(*n, "prepend", kMeta)) {
            m.prepend_normalizer = true;
        } else if (type == "Replace" && pattern_is(*n, " ") && string_is(*n, "content", kMeta)) {
            m.replace_normalizer = true;
        } else {
            throw_error(fmt::format(
                "{}: normalizer {} is not supported, expected null or Llama-2's Prepend \"▁\" / "
                "Replace \" \" -> \"▁\"",
                src, n->dump()));
        }
    }
}

// Metaspace's prepend_scheme, or the older add_prefix_space (true = "always").
Tokenizer::Prepend prepend_scheme(const json& obj, std::string_view src, std::string_view where) {
    const json* scheme = field(obj, "prepend_scheme");
    if (scheme == nullptr) {
        return bool_field(obj, "add_prefix_space", true, src, where) ? Tokenizer::Prepend::Always
                                                                     : Tokenizer::Prepend::Never;
    }
    if (*scheme == "first") return Tokenizer::Prepend::First;
    if (*scheme == "always") return Tokenizer::Prepend::Always;
    ETE_CHECK(*scheme == "never",
              "{}: {}.prepend_scheme must be \"first\", \"always\" or \"never\"", src, where);
    return Tokenizer::Prepend::Never;
}

const char* scheme_name(Tokenizer::Prepend p) {
    switch (p) {
        case Tokenizer::Prepend::Never:
            return "never";
        case Tokenizer::Prepend::First:
            return "first";
        case Tokenizer::Prepend::Always:
            return "always";
    }
    return "first";
}

void read_metaspace_pre(const json* pre, Tokenizer::Metaspace& m, std::string_view src) {
    if (pre == nullptr) return;
    ETE_CHECK(type_of(*pre, src, "pre_tokenizer") == "Metaspace",
              "{}: pre_tokenizer must be null or Metaspace with a Llama-2 style normalizer", src);
    ETE_CHECK(string_is(*pre, "replacement", kMeta),
              "{}: pre_tokenizer Metaspace.replacement must be \"▁\"", src);
    m.pre_tokenizer = true;
    m.scheme = prepend_scheme(*pre, src, "pre_tokenizer");
    m.split = bool_field(*pre, "split", true, src, "pre_tokenizer");
}

void read_metaspace_decoder(const json* dec, Tokenizer::Metaspace& m, std::string_view src) {
    ETE_CHECK(dec != nullptr,
              "{}: decoder is null, expected Llama-2's Sequence [Replace \"▁\" -> "
              "\" \", ByteFallback, Fuse, Strip] or Metaspace",
              src);
    if (type_of(*dec, src, "decoder") == "Metaspace") {
        ETE_CHECK(string_is(*dec, "replacement", kMeta),
                  "{}: decoder Metaspace.replacement must be \"▁\"", src);
        m.strip_space = prepend_scheme(*dec, src, "decoder") != Tokenizer::Prepend::Never;
        return;
    }
    bool replace = false;
    m.strip_space = false;
    for (const json* d : sequence_items(*dec, "decoders", src, "decoder")) {
        std::string type = type_of(*d, src, "decoder");
        if (type == "Replace" && pattern_is(*d, kMeta) && string_is(*d, "content", " ")) {
            replace = true;
        } else if (type == "Strip" && string_is(*d, "content", " ") && field(*d, "start") &&
                   ((*d)["start"] == 0 || (*d)["start"] == 1) && (*d)["stop"] == 0) {
            m.strip_space = (*d)["start"] == 1;
        } else {
            ETE_CHECK(type == "ByteFallback" || type == "Fuse",
                      "{}: decoder {} is not supported, expected Replace \"▁\" -> \" \", "
                      "ByteFallback, Fuse or Strip(\" \", start 0 or 1, stop 0)",
                      src, d->dump());
        }
    }
    ETE_CHECK(replace, "{}: decoder must contain Replace \"▁\" -> \" \"", src);
}

}  // namespace

bool TokenizerJson::is_metaspace(const json& root, std::string_view src) {
    const json* pre = field(root, "pre_tokenizer");
    return field(root, "normalizer") != nullptr ||
           (pre != nullptr && type_of(*pre, src, "pre_tokenizer") == "Metaspace");
}

void TokenizerJson::read_metaspace(const json& root, const json& model, Tokenizer& t,
                                   std::string_view src) {
    Tokenizer::Metaspace m;
    read_normalizer(field(root, "normalizer"), m, src);
    read_metaspace_pre(field(root, "pre_tokenizer"), m, src);
    ETE_CHECK(m.replace_normalizer || m.pre_tokenizer,
              "{}: a Llama-2 style tokenizer needs a Replace \" \" -> \"▁\" normalizer or a "
              "Metaspace pre_tokenizer",
              src);
    read_metaspace_decoder(field(root, "decoder"), m, src);
    m.byte_fallback = bool_field(model, "byte_fallback", false, src, "model");
    m.fuse_unk = bool_field(model, "fuse_unk", false, src, "model");
    if (const json* unk = field(model, "unk_token")) {
        ETE_CHECK(unk->is_string(), "{}: model.unk_token must be a string or null", src);
        m.unk_token = unk->get<std::string>();
    }
    if (const json* post = field(root, "post_processor")) m.post_processor = post->dump();
    t.sp_ = std::make_shared<const Tokenizer::Metaspace>(std::move(m));
}

void TokenizerJson::write_metaspace(const Tokenizer& t, ordered_json& root) {
    const Tokenizer::Metaspace& m = *t.sp_;
    ordered_json norms = ordered_json::array();
    if (m.prepend_normalizer) norms.push_back({{"type", "Prepend"}, {"prepend", kMeta}});
    if (m.replace_normalizer) {
        norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}});
    }
    root["normalizer"] =
        norms.empty() ? ordered_json() : ordered_json{{"type", "Sequence"}, {"normalizers", norms}};
    root["pre_tokenizer"] = !m.pre_tokenizer
                                ? ordered_json()
                                : ordered_json{{"type", "Metaspace"},
                                               {"replacement", kMeta},
                                               {"prepend_scheme", scheme_name(m.scheme)},
                                               {"split", m.split}};
    root["post_processor"] =
        m.post_processor.empty() ? ordered_json() : ordered_json::parse(m.post_processor);
    ordered_json decs = {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                         {{"type", "ByteFallback"}},
                         {{"type", "Fuse"}}};
    if (m.strip_space)
        decs.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decs)}};
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
    const bool metaspace = is_metaspace(root, src);
    const json* dec = field(root, "decoder");
    ETE_CHECK(metaspace || dec == nullptr || type_of(*dec, src, "decoder") == "ByteLevel",
              "{}: decoder must be ByteLevel or null", src);
    check_model_options(*model, metaspace, src);

    Tokenizer t;
    if (metaspace) read_metaspace(root, *model, t, src);
    read_added(root, t, src);
    StringIdMap vocab = read_vocab(*model, t, src);
    read_merges(*model, vocab, t, src);
    if (!metaspace) read_pre_tokenizer(root, t, src);
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
