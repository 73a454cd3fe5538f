// ete/model/config_rope.cpp
#include "ete/model/config_rope.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/json_file.h"

namespace ete {

using json = nlohmann::json;

namespace {

void read_llama3(RopeScaling& s, const json& r, const std::string& where) {
    s.factor = json_get<double>(r, "factor", 8.0, where);
    s.low_freq_factor = json_get<double>(r, "low_freq_factor", 1.0, where);
    s.high_freq_factor = json_get<double>(r, "high_freq_factor", 4.0, where);
    s.original_max_position_embeddings =
        json_get<int>(r, "original_max_position_embeddings", 8192, where);
    // Each of these out of range divides by zero or takes a log of <= 0: NaN frequencies.
    ETE_CHECK(s.factor >= 1 && s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor &&
                  s.original_max_position_embeddings > 0,
              "{}: rope_scaling llama3 factor {}, low_freq_factor {}, high_freq_factor {}, "
              "original_max_position_embeddings {}: expected factor >= 1, 0 < low < high, and a "
              "positive length",
              where, s.factor, s.low_freq_factor, s.high_freq_factor,
              s.original_max_position_embeddings);
}

// A list of positive finite numbers (longrope's factors).
std::vector<double> read_factors(const json& r, const char* key, const std::string& where) {
    ETE_CHECK(r.contains(key) && r[key].is_array() && !r[key].empty(),
              "{}: rope_scaling longrope: field '{}': expected a non-empty list of numbers", where,
              key);
    std::vector<double> v;
    for (const json& x : r[key]) {
        ETE_CHECK(x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0,
                  "{}: rope_scaling longrope: {} holds {}: expected finite numbers > 0", where, key,
                  json_excerpt(x));
        v.push_back(x.get<double>());
    }
    return v;
}

// yarn and longrope: the original context and the factor it implies.
void read_context(RopeScaling& s, const json& r, int max_positions, int original,
                  const std::string& where) {
    const int fallback = original > 0 ? original : max_positions;
    s.original_max_position_embeddings =
        json_get<int>(r, "original_max_position_embeddings", fallback, where);
    ETE_CHECK(s.original_max_position_embeddings > 1,
              "{}: rope_scaling {}: original_max_position_embeddings = {}: expected > 1", where,
              s.type, s.original_max_position_embeddings);
    s.factor = json_get<double>(r, "factor",
                                double(max_positions) / s.original_max_position_embeddings, where);
    s.attention_factor = json_get<double>(r, "attention_factor", 0.0, where);
    ETE_CHECK(s.factor > 0 && s.attention_factor >= 0,
              "{}: rope_scaling {} factor {}, attention_factor {}: expected > 0", where, s.type,
              s.factor, s.attention_factor);
}

void read_yarn(RopeScaling& s, const json& r, const std::string& where) {
    s.beta_fast = json_get<double>(r, "beta_fast", 32.0, where);
    s.beta_slow = json_get<double>(r, "beta_slow", 1.0, where);
    s.mscale = json_get<double>(r, "mscale", 0.0, where);
    s.mscale_all_dim = json_get<double>(r, "mscale_all_dim", 0.0, where);
    s.truncate = json_get<bool>(r, "truncate", true, where);
    // HF's `or 32` / `or 1`: a zero means the default.
    if (s.beta_fast == 0) s.beta_fast = 32.0;
    if (s.beta_slow == 0) s.beta_slow = 1.0;
    ETE_CHECK(s.beta_fast > 0 && s.beta_slow > 0 && s.factor >= 1,
              "{}: rope_scaling yarn factor {}, beta_fast {}, beta_slow {}: expected factor >= 1 "
              "and positive betas",
              where, s.factor, s.beta_fast, s.beta_slow);
}

}  // namespace

RopeScaling parse_rope_scaling(const json& r, int max_positions, int original,
                               const std::string& where) {
    RopeScaling s;
    s.type = r.contains("rope_type") ? json_get<std::string>(r, "rope_type", "default", where)
                                     : json_get<std::string>(r, "type", "default", where);
    ETE_CHECK(s.type == "default" || s.type == "llama3" || s.type == "linear" || s.type == "yarn" ||
                  s.type == "longrope",
              "{}: rope type '{}' is not implemented (supported: default, linear, llama3, yarn, "
              "longrope)",
              where, s.type);
    if (s.type == "linear") {
        s.factor = json_get<double>(r, "factor", 1.0, where);
        ETE_CHECK(s.factor >= 1 && std::isfinite(s.factor),
                  "{}: rope_scaling linear factor {}: expected a finite number >= 1", where,
                  s.factor);
    } else if (s.type == "llama3") {
        read_llama3(s, r, where);
    } else if (s.type == "yarn") {
        read_context(s, r, max_positions, original, where);
        read_yarn(s, r, where);
    } else if (s.type == "longrope") {
        read_context(s, r, max_positions, original, where);
        s.short_factor = read_factors(r, "short_factor", where);
        s.long_factor = read_factors(r, "long_factor", where);
    }
    return s;
}

std::vector<std::string> unread_rope_keys(const json& r, const std::string& prefix,
                                          bool parameters) {
    std::vector<std::string> out;
    if (!r.is_object()) return out;
    if (parameters && (r.contains("full_attention") || r.contains("sliding_attention"))) {
        for (const auto& [key, value] : r.items()) {
            const bool kind = key == "full_attention" || key == "sliding_attention";
            if (!kind) out.push_back(prefix + key);
            if (kind && value.is_object())
                for (std::string& k : unread_rope_keys(value, prefix + key + ".", true))
                    out.push_back(std::move(k));
        }
        std::sort(out.begin(), out.end());
        return out;
    }
    // What modeling_rope_utils reads per type (its required and optional keys), and ETE with it.
    const std::string type =
        r.contains("rope_type") && r["rope_type"].is_string() ? r["rope_type"].get<std::string>()
        : r.contains("type") && r["type"].is_string()         ? r["type"].get<std::string>()
                                                              : "default";
    std::vector<std::string> read = {"rope_type", "type"};
    if (parameters) read.insert(read.end(), {"rope_theta", "partial_rotary_factor"});
    if (type == "linear") read.insert(read.end(), {"factor"});
    if (type == "llama3")
        read.insert(read.end(), {"factor", "low_freq_factor", "high_freq_factor",
                                 "original_max_position_embeddings"});
    if (type == "yarn")
        read.insert(read.end(), {"factor", "attention_factor", "original_max_position_embeddings",
                                 "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"});
    if (type == "longrope")
        read.insert(read.end(), {"short_factor", "long_factor", "factor", "attention_factor",
                                 "original_max_position_embeddings"});
    for (const auto& item : r.items())
        if (std::find(read.begin(), read.end(), item.key()) == read.end())
            out.push_back(prefix + item.key());
    std::sort(out.begin(), out.end());
    return out;
}

json rope_scaling_to_json(const RopeScaling& s, int max_positions) {
    if (s.type == "linear") return {{"rope_type", "linear"}, {"factor", s.factor}};
    if (s.type == "llama3")
        return {{"rope_type", "llama3"},
                {"factor", s.factor},
                {"low_freq_factor", s.low_freq_factor},
                {"high_freq_factor", s.high_freq_factor},
                {"original_max_position_embeddings", s.original_max_position_embeddings}};
    if (s.type == "yarn") {
        json j = {{"rope_type", "yarn"},
                  {"factor", s.factor},
                  {"original_max_position_embeddings", s.original_max_position_embeddings},
                  {"beta_fast", s.beta_fast},
                  {"beta_slow", s.beta_slow}};
        if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
        if (s.mscale != 0) j["mscale"] = s.mscale;
        if (s.mscale_all_dim != 0) j["mscale_all_dim"] = s.mscale_all_dim;
        if (!s.truncate) j["truncate"] = false;
        return j;
    }
    if (s.type == "longrope") {
        json j = {
            {"type", "longrope"}, {"short_factor", s.short_factor}, {"long_factor", s.long_factor}};
        if (s.factor != double(max_positions) / s.original_max_position_embeddings)
            j["factor"] = s.factor;
        if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
        return j;
    }
    return nullptr;
}

}  // namespace ete
