// ete/data/tokenizer_json.cpp — Hugging Face tokenizer.json reading and writing.
//
// A loaded file's normalizer, pre-tokenizer, post-processor and decoder are written back as the
// file had them. A trained tokenizer is written as GPT-2's tokenizer.json: ByteLevel
// pre-tokenizer (add_prefix_space false, use_regex true), ByteLevel post-processor and decoder,
// BPE model with vocab ordered by id and merges as "a b" strings (byte-level tokens never contain
// a space: it is written as 'Ġ'). Special tokens appear both in added_tokens and in model.vocab,
// as in GPT-2's file.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <unordered_set>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/data/byte_level.h"
#include "ete/data/pretokenize.h"
#include "ete/data/tok_json.h"
#include "ete/data/tok_json_stream.h"
#include "ete/data/tok_pipeline.h"
#include "ete/data/tokenizer.h"

namespace ete {

using nlohmann::json;
using nlohmann::ordered_json;
using tok::bool_field;
using tok::field;

namespace {

constexpr int64_t kMaxTokenId = int64_t{1} << 24;

int32_t token_id_value(const json& v, std::string_view src, std::string_view what) {
    ETE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < kMaxTokenId,
              "{}: {} must be an integer id in [0, {})", src, what, kMaxTokenId);
    return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace

// Friend of Tokenizer: fills and reads its private tables.
class TokenizerJson {
  public:
    static std::string write(const Tokenizer& t);
    static Tokenizer read(std::string_view text, std::string_view src);

  private:
    static Tokenizer read_unescaped(std::string_view text, std::string_view src);
    static ordered_json model_json(const Tokenizer& t);
    static void read_added(const json& root, Tokenizer& t, std::string_view src);
    static StringIdMap read_vocab(const tok::StreamedTokenizerJson& file, Tokenizer& t,
                                  std::string_view src);
    static void read_merges(const tok::StreamedTokenizerJson& file, const StringIdMap& vocab,
                            Tokenizer& t, std::string_view src);
};

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
    if (!t.pipe_->byte_level) {
        const tok::Pipeline& m = *t.pipe_;
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
                         {"single_word", a.single_word},
                         {"lstrip", a.lstrip},
                         {"rstrip", a.rstrip},
                         {"normalized", a.normalized},
                         {"special", a.special}});
    }
    ordered_json root = {{"version", "1.0"},
                         {"truncation", nullptr},
                         {"padding", nullptr},
                         {"added_tokens", std::move(added)},
                         {"normalizer", ordered_json::parse(t.pipe_->normalizer_json)},
                         {"pre_tokenizer", ordered_json::parse(t.pipe_->pre_json)},
                         {"post_processor", ordered_json::parse(t.pipe_->post_json)},
                         {"decoder", ordered_json::parse(t.pipe_->decoder_json)},
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
        const std::string where = fmt::format("added_tokens[{}]", t.added_.size());
        t.added_.push_back(
            {id, content.get<std::string>(), bool_field(a, "special", false, src, where),
             bool_field(a, "lstrip", false, src, where), bool_field(a, "rstrip", false, src, where),
             bool_field(a, "single_word", false, src, where),
             bool_field(a, "normalized", !bool_field(a, "special", false, src, where), src,
                        where)});
    }
    std::unordered_set<int32_t> seen;
    for (const AddedToken& a : t.added_) {
        ETE_CHECK(seen.insert(a.id).second, "{}: added token id {} is used twice", src, a.id);
    }
}

StringIdMap TokenizerJson::read_vocab(const tok::StreamedTokenizerJson& file, Tokenizer& t,
                                      std::string_view src) {
    ETE_CHECK(file.vocab_streamed, "{}: model.vocab must be an object", src);
    StringIdMap ids;
    ids.reserve(file.vocab.size());
    for (const tok::VocabEntry& e : file.vocab) {  // a repeated token's last value counts
        const std::string_view token = file.at(e.token, e.token_size);
        const auto id = static_cast<int32_t>(e.id);  // -1: not an id
        if (auto [it, fresh] = ids.emplace(token, id); !fresh) it->second = id;
    }
    std::optional<std::string_view> bad;  // the first in key order, as the tree named it
    int32_t max_id = -1;
    for (const AddedToken& a : t.added_) max_id = std::max(max_id, a.id);
    for (const auto& [token, id] : ids) {
        if (id < 0 && (!bad || token < *bad)) bad = token;
        max_id = std::max(max_id, id);
    }
    ETE_CHECK(!bad, "{}: model.vocab['{}'] must be an integer id in [0, {})", src, bad.value_or(""),
              kMaxTokenId);
    // HF gives an added token whose content is in the vocab that vocab id, whatever the file says.
    for (size_t k = 0; k < t.added_.size(); ++k) {
        const AddedToken& a = t.added_[k];
        auto it = ids.find(a.content);
        ETE_CHECK(it == ids.end() || it->second == a.id,
                  "{}: added_tokens[{}] '{}' has id {}, but model.vocab gives it id {}", src, k,
                  a.content, a.id, it->second);
    }
    t.bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
    t.kind_.assign(static_cast<size_t>(max_id + 1), Tokenizer::TokenKind::Unused);
    t.in_model_.assign(static_cast<size_t>(max_id + 1), false);
    for (const AddedToken& a : t.added_) {
        t.bytes_[a.id] = a.content;
        t.kind_[a.id] = Tokenizer::TokenKind::Added;
    }
    for (const auto& [token, id] : ids) {
        if (t.kind_[id] == Tokenizer::TokenKind::Added) {
            ETE_CHECK(t.bytes_[id] == token,
                      "{}: id {} is '{}' in model.vocab but '{}' in added_tokens", src, id, token,
                      t.bytes_[id]);
            t.in_model_[id] = true;
            continue;
        }
        ETE_CHECK(t.kind_[id] == Tokenizer::TokenKind::Unused,
                  "{}: model.vocab uses id {} twice ('{}' and '{}')", src, id, token,
                  t.pipe_->byte_level ? data::bytes_to_byte_level(t.bytes_[id]) : t.bytes_[id]);
        if (!t.pipe_->byte_level) {
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

void TokenizerJson::read_merges(const tok::StreamedTokenizerJson& file, const StringIdMap& vocab,
                                Tokenizer& t, std::string_view src) {
    ETE_CHECK(file.merges_streamed, "{}: model.merges must be an array", src);
    auto id_of = [&](std::string_view tok, size_t rank) {
        auto it = vocab.find(tok);
        ETE_CHECK(it != vocab.end(), "{}: model.merges[{}] uses '{}', which is not in model.vocab",
                  src, rank, tok);
        return it->second;
    };
    t.merges_.reserve(file.merges.size());
    for (size_t r = 0; r < file.merges.size(); ++r) {
        const tok::MergeEntry& m = file.merges[r];
        std::string_view a = file.at(m.a, m.a_size), b = file.at(m.b, m.b_size);
        if (m.kind == tok::MergeEntry::Kind::Joined) {
            const size_t sp = a.find(' ');
            ETE_CHECK(sp != std::string::npos && sp > 0 && a.find(' ', sp + 1) == std::string::npos,
                      "{}: model.merges[{}] is '{}', expected two tokens separated by one space",
                      src, r, a);
            b = a.substr(sp + 1);
            a = a.substr(0, sp);
        } else {
            ETE_CHECK(m.kind == tok::MergeEntry::Kind::Pair,
                      "{}: model.merges[{}] must be a string \"a b\" or a pair [\"a\", \"b\"]", src,
                      r);
        }
        t.merges_.emplace_back(id_of(a, r), id_of(b, r));
    }
}

// Errors quote the file's own strings (tokens, patterns, type names), which may hold newlines:
// the message is made one line here, in one place for every check.
Tokenizer TokenizerJson::read(std::string_view text, std::string_view src) {
    try {
        return read_unescaped(text, src);
    } catch (const Error& e) {
        std::string msg = tok::one_line(e.what());
        if (msg == e.what()) throw;
        throw_error(msg);
    }
}

Tokenizer TokenizerJson::read_unescaped(std::string_view text, std::string_view src) {
    tok::StreamedTokenizerJson file =
        tok::parse_tokenizer_json(text, std::string(src) + " (a tokenizer.json)", kMaxTokenId - 1);
    const json& root = file.root;
    ETE_CHECK(root.is_object(), "{}: expected a JSON object (tokenizer.json)", src);
    const json* model = field(root, "model");
    ETE_CHECK(model != nullptr && model->is_object(), "{}: missing object 'model'", src);
    const json* mtype = field(*model, "type");
    ETE_CHECK(mtype == nullptr || *mtype == "BPE", "{}: model.type is {}, expected \"BPE\"", src,
              mtype ? mtype->dump() : "");
    Tokenizer t;
    t.pipe_ = tok::make_pipeline(root, *model, src);
    read_added(root, t, src);
    StringIdMap vocab = read_vocab(file, t, src);
    read_merges(file, vocab, t, src);
    t.ignore_merges_ = bool_field(*model, "ignore_merges", false, src, "model");
    t.finalize(src, &vocab);
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
    Tokenizer t = from_json(text, fmt::format("tokenizer.json '{}'", path));
    t.read_model_configs(std::filesystem::path(path).parent_path().string());
    return t;
}

}  // namespace ete
