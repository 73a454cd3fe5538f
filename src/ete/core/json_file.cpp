// ete/core/json_file.cpp
#include "ete/core/json_file.h"

#include <charconv>

#include "ete/core/error.h"
#include "ete/core/file_util.h"

namespace ete {

namespace {

using Json = nlohmann::json;

// nlohmann's DOM builder with a depth count: sax_parse calls these (hiding the base's) through
// the static type, and a start beyond the limit stops the parse before the level is built.
class DepthLimitedDom : public nlohmann::detail::json_sax_dom_parser<Json> {
  public:
    DepthLimitedDom(Json& root, int max_depth)
        : json_sax_dom_parser<Json>(root, true), max_depth_(max_depth) {}
    bool start_object(std::size_t n) { return enter() && json_sax_dom_parser::start_object(n); }
    bool start_array(std::size_t n) { return enter() && json_sax_dom_parser::start_array(n); }
    bool end_object() { return --depth_, json_sax_dom_parser::end_object(); }
    bool end_array() { return --depth_, json_sax_dom_parser::end_array(); }
    bool too_deep() const { return too_deep_; }

  private:
    bool enter() {
        too_deep_ = ++depth_ > max_depth_;
        return !too_deep_;
    }
    int depth_ = 0, max_depth_;
    bool too_deep_ = false;
};

}  // namespace

Json parse_json(std::string_view text, const std::string& where, int max_depth) {
    Json root;
    DepthLimitedDom dom(root, max_depth);
    sax_parse_json(text, where, dom, max_depth);
    return root;
}

std::string json_excerpt(const Json& v) {
    std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (s.size() > 64) s = s.substr(0, 60) + "...";
    return s;
}

int64_t parse_int_field(const std::string& text, int64_t lo, int64_t hi, const std::string& where) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    ETE_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v >= lo &&
                  v <= hi,
              "{}: '{}': expected an integer in [{}, {}]", where, text.substr(0, 64), lo, hi);
    return v;
}

bool parse_bool_field(const std::string& text, const std::string& where) {
    ETE_CHECK(text == "true" || text == "false", "{}: '{}': expected true or false", where,
              text.substr(0, 64));
    return text == "true";
}

Json read_json_file(const std::string& path, int max_depth) {
    return parse_json(read_file(path), path, max_depth);
}

}  // namespace ete
