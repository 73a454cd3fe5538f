// ete/data/tok_json_stream.cpp — tokenizer.json in one SAX pass: nlohmann's tree builder for the
// file, except that model.vocab (an object) and model.merges (an array) go to flat tables.
#include "ete/data/tok_json_stream.h"

#include "ete/core/error.h"
#include "ete/core/json_file.h"

namespace ete::tok {
namespace {

using Json = nlohmann::json;
using Dom = nlohmann::detail::json_sax_dom_parser<Json>;

// sax_parse calls these through the static type (hiding the tree builder's). Events inside the
// streamed vocab or merges never reach the tree; the key that names them leaves a null there.
// A value that is neither what the table holds nor a scalar (a nested array or object) is
// skipped to its end and recorded as bad, for TokenizerJson to name.
class TokenizerSax : public Dom {
  public:
    TokenizerSax(StreamedTokenizerJson& out, int max_depth, int64_t max_id)
        : Dom(out.root, true), out_(out), max_depth_(max_depth), max_id_(max_id) {}

    bool too_deep() const { return too_deep_; }

    bool null() { return scalar(-1) || Dom::null(); }
    bool boolean(bool v) { return scalar(-1) || Dom::boolean(v); }
    bool number_integer(number_integer_t v) {
        return scalar(v >= 0 && v <= max_id_ ? v : -1) || Dom::number_integer(v);
    }
    bool number_unsigned(number_unsigned_t v) {
        return scalar(v <= uint64_t(max_id_) ? int64_t(v) : -1) || Dom::number_unsigned(v);
    }
    bool number_float(number_float_t v, const string_t& s) {
        return scalar(-1) || Dom::number_float(v, s);
    }
    bool string(string_t& v) {
        if (in_ == In::Merges) {
            out_.merges.push_back({keep(v), v.size(), 0, 0, MergeEntry::Kind::Joined});
            return true;
        }
        if (in_ == In::MergePair) {
            MergeEntry& m = out_.merges.back();
            ++pair_strings_;
            if (pair_strings_ == 1) m.a = keep(v), m.a_size = v.size();
            if (pair_strings_ == 2) m.b = keep(v), m.b_size = v.size();
            if (pair_strings_ > 2) m.kind = MergeEntry::Kind::Bad;
            return true;
        }
        return scalar(-1) || Dom::string(v);
    }
    bool key(string_t& k) {
        if (in_ == In::Vocab) {
            key_ = {keep(k), k.size()};
            return true;
        }
        if (in_ != In::Tree) return true;
        pending_ = Pending::None;
        if (depth_ == 1 && k == "model") pending_ = Pending::Model;
        if (model_depth_ > 0 && depth_ == model_depth_ && k == "vocab") pending_ = Pending::Vocab;
        if (model_depth_ > 0 && depth_ == model_depth_ && k == "merges") pending_ = Pending::Merges;
        return Dom::key(k);
    }
    bool start_object(std::size_t n) {
        if (!enter()) return false;
        if (in_ != In::Tree) return skip_container();
        if (pending_ == Pending::Vocab) return begin(In::Vocab, out_.vocab_streamed);
        take_value();
        if (pending_was_model_) model_depth_ = depth_;
        return Dom::start_object(n);
    }
    bool start_array(std::size_t n) {
        if (!enter()) return false;
        if (in_ == In::Merges) {
            out_.merges.push_back({0, 0, 0, 0, MergeEntry::Kind::Pair});
            pair_strings_ = 0;
            in_ = In::MergePair;
            return true;
        }
        if (in_ != In::Tree) return skip_container();
        if (pending_ == Pending::Merges) return begin(In::Merges, out_.merges_streamed);
        take_value();
        return Dom::start_array(n);
    }
    bool end_object() { return leave() || Dom::end_object(); }
    bool end_array() { return leave() || Dom::end_array(); }

  private:
    enum class In : uint8_t { Tree, Vocab, Merges, MergePair, Skip };
    enum class Pending : uint8_t { None, Model, Vocab, Merges };

    // Appends a streamed string to the shared buffer; its offset.
    size_t keep(const string_t& v) {
        out_.text += v;
        return out_.text.size() - v.size();
    }
    bool enter() {
        too_deep_ = ++depth_ > max_depth_;
        return !too_deep_;
    }
    // A streamed table's container starts (a later one of the same name replaces it).
    bool begin(In in, bool& streamed) {
        pending_ = Pending::None;
        streamed = true;
        if (in == In::Vocab) out_.vocab.clear();
        if (in == In::Merges) out_.merges.clear();  // (their strings stay in text, unused)
        in_ = in;
        table_depth_ = depth_;
        return true;
    }
    // A value for the tree: the key before it decides what it replaces.
    void take_value() {
        pending_was_model_ = pending_ == Pending::Model;
        if (pending_ == Pending::Model || pending_ == Pending::Vocab) out_.vocab_streamed = false;
        if (pending_ == Pending::Model || pending_ == Pending::Merges) out_.merges_streamed = false;
        pending_ = Pending::None;
    }
    // A scalar: true when a table took it (or a skipped value swallowed it).
    bool scalar(int64_t id) {
        switch (in_) {
            case In::Tree:
                take_value();
                return false;
            case In::Vocab:
                out_.vocab.push_back({key_.first, key_.second, id});
                return true;
            case In::Merges:
                out_.merges.push_back({});
                return true;
            case In::MergePair:
                out_.merges.back().kind = MergeEntry::Kind::Bad;
                return true;
            case In::Skip:
                return true;
        }
        return true;
    }
    // An array or object where a table wants a scalar or a pair: recorded bad, skipped whole.
    bool skip_container() {
        if (in_ == In::Skip) return true;
        if (in_ == In::Vocab) out_.vocab.push_back({key_.first, key_.second, -1});
        if (in_ == In::Merges) out_.merges.push_back({});
        if (in_ == In::MergePair) out_.merges.back().kind = MergeEntry::Kind::Bad;
        skip_from_ = in_;
        skip_depth_ = depth_;
        in_ = In::Skip;
        return true;
    }
    // A container ends: true when it was streamed or skipped (the tree never saw it).
    bool leave() {
        const int d = depth_--;
        switch (in_) {
            case In::Tree:
                if (d == model_depth_) model_depth_ = 0;
                return false;
            case In::Skip:
                if (d == skip_depth_) in_ = skip_from_;
                return true;
            case In::MergePair:
                if (pair_strings_ != 2) out_.merges.back().kind = MergeEntry::Kind::Bad;
                in_ = In::Merges;
                return true;
            case In::Vocab:
            case In::Merges:
                if (d == table_depth_) in_ = In::Tree;
                return true;
        }
        return true;
    }

    StreamedTokenizerJson& out_;
    int max_depth_;
    int64_t max_id_;
    int depth_ = 0, model_depth_ = 0, table_depth_ = 0, skip_depth_ = 0, pair_strings_ = 0;
    bool too_deep_ = false, pending_was_model_ = false;
    In in_ = In::Tree, skip_from_ = In::Tree;
    Pending pending_ = Pending::None;
    std::pair<size_t, size_t> key_;  // the vocab key being read: offset, size in text
};

}  // namespace

StreamedTokenizerJson parse_tokenizer_json(std::string_view text, const std::string& where,
                                           int64_t max_id) {
    StreamedTokenizerJson out;
    TokenizerSax sax(out, kMaxJsonDepth, max_id);
    sax_parse_json(text, where, sax, kMaxJsonDepth);
    return out;
}

}  // namespace ete::tok
