// ete/train/toml_util.h — TOML text to a table, with ete's one-line error.
#pragma once

#include <toml++/toml.h>

#include <string>

namespace ete {

// `text` parsed as TOML, or ete::Error "WHERE:LINE:COL: invalid TOML: ...".
toml::table parse_toml(const std::string& text, const std::string& where);

}  // namespace ete
