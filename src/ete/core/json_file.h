// ete/core/json_file.h — JSON a user hands ETE (config.json, tokenizer.json, adapter_config.json,
// state.json, quantization state): parsed with a nesting limit, so a hostile file never reaches
// the readers that walk it recursively (a tokenizer.json whose normalizer Sequence nested 20,000
// deep overflowed the stack), and every error names the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ete {

// Real files nest under 10 levels (tokenizer.json: a Sequence of Sequences of a normalizer).
inline constexpr int kMaxJsonDepth = 64;

// Parses text; throws ete::Error "WHERE: invalid JSON (REASON)" for malformed text and for
// arrays or objects nested deeper than max_depth (nothing deeper is built).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          int max_depth = kMaxJsonDepth);
// parse_json of the file's contents (core/file_util.h read_file), named by its path.
nlohmann::json read_json_file(const std::string& path, int max_depth = kMaxJsonDepth);

}  // namespace ete
