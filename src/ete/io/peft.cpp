// ete/io/peft.cpp
#include "ete/io/peft.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/io/safetensors.h"
#include "ete/nn/lora.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

bool is_adapter(const ParamSpec& s) {
    return s.role == ParamRole::LoraA || s.role == ParamRole::LoraB;
}

// "model.layers.0.self_attn.q_proj.lora_A.weight" -> "model.layers.0.self_attn.q_proj".
std::string module_of(const std::string& name) {
    return name.substr(0, name.rfind(".lora_"));
}

// The module's path as PEFT's LoraModel names it (GPT-2's modules sit under "transformer.").
std::string peft_module_path(const std::string& module, Arch arch) {
    return (family(arch).layout == Layout::GPT2 ? "transformer." : "") + module;
}

std::vector<std::string> target_names(const LoraSpec& spec, const ModelConfig& c) {
    std::vector<std::string> out;
    for (ParamRole r : lora_target_roles(spec, c)) {
        std::string n = lora_module_name(r, c.arch);
        if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    return out;
}

}  // namespace

std::string peft_tensor_name(const std::string& ete_name, Arch arch) {
    return std::string("base_model.model.") +
           (family(arch).layout == Layout::GPT2 ? "transformer." : "") + ete_name;
}

void save_peft_adapter(const std::string& dir, const ModelConfig& c, const LoraSpec& spec,
                       const HostParams& adapters, const std::string& base_model,
                       const std::string& base_hash,
                       const std::function<int(const std::string&)>& rank, DType dtype,
                       const std::vector<std::pair<std::string, std::string>>& extra) {
    json rank_pattern = json::object(), alpha_pattern = json::object();
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (int i = 0; i < adapters.size(); ++i) {
        const ParamSpec& s = adapters.specs()[size_t(i)];
        if (!is_adapter(s)) continue;
        const std::string module = module_of(s.name);
        const int r = rank(module);
        const int64_t rows = s.shape[0], cols = s.shape[1];
        const bool a = s.role == ParamRole::LoraA;
        ETE_ASSERT(r > 0 && r <= (a ? rows : cols));
        if (r != spec.r && a) {
            // PEFT scales an adapter by alpha / its own rank: the alpha that keeps the one scale
            // every adapter was trained with.
            rank_pattern[module] = r;
            const float scale = lora_scale(spec.alpha, spec.r, spec.rslora);
            alpha_pattern[module] = scale * (spec.rslora ? std::sqrt(float(r)) : float(r));
        }
        const Shape shape = a ? Shape{r, cols} : Shape{rows, r};
        std::vector<float> v;
        const float* p = adapters.param(i);
        for (int64_t y = 0; y < shape[0]; ++y)
            for (int64_t x = 0; x < shape[1]; ++x) v.push_back(p[y * cols + x]);
        Tensor t = Tensor::empty(shape, dtype);
        convert_from_f32(t.data(), dtype, v.data(), v.size());
        tensors.emplace_back(peft_tensor_name(s.name, c.arch), std::move(t));
    }
    json cfg = {{"peft_type", "LORA"},
                {"task_type", "CAUSAL_LM"},
                {"base_model_name_or_path", base_model},
                {"r", spec.r},
                {"lora_alpha", spec.alpha},
                // The float's shortest decimal (0.1, not 0.10000000149011612).
                {"lora_dropout", std::stod(fmt::format("{}", spec.dropout))},
                {"target_modules", target_names(spec, c)},
                {"bias", "none"},
                {"use_rslora", spec.rslora},
                {"fan_in_fan_out", c.family().layout == Layout::GPT2},
                {"modules_to_save", nullptr},
                {"rank_pattern", rank_pattern},
                {"alpha_pattern", alpha_pattern},
                {"init_lora_weights", true},
                {"inference_mode", true}};
    if (!base_hash.empty()) cfg[kPeftBaseHashKey] = base_hash;
    const std::map<std::string, std::string> meta = {
        {"format", "pt"},
        {"ete.base_format", spec.base_format},
        {"ete.nf4_blocksize", std::to_string(spec.nf4_block)},
        {"ete.double_quant", spec.nf4_double_quant ? "true" : "false"}};
    write_dir_atomic(dir, "saving PEFT adapter dir", [&](const std::string& tmp) {
        write_file_atomic(tmp + "/" + kConfigFile, cfg.dump(2) + "\n");
        write_safetensors(tmp + "/" + kWeightsFile, tensors, meta);
        for (const auto& [name, contents] : extra) write_file_atomic(tmp + "/" + name, contents);
    });
}

std::string peft_base_model(const std::string& dir) {
    const std::string path = (fs::path(dir) / kConfigFile).string();
    const json j = read_json_file(path);
    const auto it = j.is_object() ? j.find("base_model_name_or_path") : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

namespace {

// How PEFT's get_pattern_key matches a key: (.*\.)?(key) against the whole module path.
std::regex key_regex(const std::string& key) {
    return std::regex("(.*\\.)?(" + key + ")");
}

// The entries of a rank_pattern / alpha_pattern object (null or absent: none); each key must be a
// regex std::regex compiles.
std::vector<std::pair<std::string, json>> pattern_items(const json& j, const char* field,
                                                        const std::string& path) {
    std::vector<std::pair<std::string, json>> out;
    if (!j.contains(field) || j[field].is_null()) return out;
    ETE_CHECK(j[field].is_object(), "{}: {} must be an object (module pattern -> value)", path,
              field);
    for (const auto& [key, v] : j[field].items()) {
        ETE_CHECK(!key.empty() && key.size() <= 512, "{}: {} key '{}': expected 1-512 characters",
                  path, field, key.substr(0, 64));
        // A quantified group ("(a*)*") can backtrack for longer than a job runs; module
        // patterns never need one.
        ETE_CHECK(!std::regex_search(key, std::regex(R"(\)[*+?{])")),
                  "{}: {} key '{}': a quantified group is not supported", path, field, key);
        try {
            key_regex(key);
        } catch (const std::regex_error& e) {
            throw_error(fmt::format("{}: {} key '{}' is not a regular expression ({})", path, field,
                                    key, e.what()));
        }
        out.emplace_back(key, v);
    }
    return out;
}

template <typename T>
std::vector<std::regex> compile_keys(const std::map<std::string, T>& pattern) {
    std::vector<std::regex> out;
    for (const auto& kv : pattern) out.push_back(key_regex(kv.first));
    return out;
}

// The value of the key whose regex matches the module's path; `fallback` when none does.
// `compiled`: the keys' regexes in map order, or empty (compiled here).
template <typename T>
T pattern_value(const std::map<std::string, T>& pattern, const std::vector<std::regex>& compiled,
                const std::string& module_path, T fallback, const char* field) {
    const std::string* found = nullptr;
    T value = fallback;
    size_t i = 0;
    for (const auto& [key, v] : pattern) {
        const bool match = compiled.size() == pattern.size()
                               ? std::regex_match(module_path, compiled[i++])
                               : std::regex_match(module_path, key_regex(key));
        if (!match) continue;
        ETE_CHECK(!found || v == value,
                  "adapter_config.json: {} keys '{}' and '{}' both match '{}' with different "
                  "values (PEFT takes the first in the file; ETE refuses the ambiguity)",
                  field, *found, key, module_path);
        found = &key;
        value = v;
    }
    return value;
}

}  // namespace

int PeftAdapterInfo::rank_of(const std::string& module) const {
    return pattern_value(rank_pattern, rank_regex, peft_module_path(module, arch), spec.r,
                         "rank_pattern");
}

float PeftAdapterInfo::alpha_of(const std::string& module) const {
    return pattern_value(alpha_pattern, alpha_regex, peft_module_path(module, arch), spec.alpha,
                         "alpha_pattern");
}

float PeftAdapterInfo::scale_of(const std::string& module) const {
    return lora_scale(alpha_of(module), rank_of(module), spec.rslora);
}

PeftAdapterInfo load_peft_config(const std::string& dir, const ModelConfig& c) {
    const std::string path = (fs::path(dir) / kConfigFile).string();
    ETE_CHECK(fs::exists(path), "adapter dir '{}': {} is missing (not a PEFT adapter dir)", dir,
              kConfigFile);
    const json j = read_json_file(path);
    ETE_CHECK(j.is_object(), "{}: expected a JSON object", path);
    auto get = [&](const char* key, auto fallback) { return json_get(j, key, fallback, path); };
    ETE_CHECK(get("peft_type", std::string("LORA")) == "LORA", "{}: peft_type '{}', expected LORA",
              path, get("peft_type", std::string()));
    ETE_CHECK(get("bias", std::string("none")) == "none",
              "{}: bias '{}' is not supported (expected none)", path, get("bias", std::string()));
    ETE_CHECK(!j.contains("modules_to_save") || j["modules_to_save"].is_null() ||
                  j["modules_to_save"].empty(),
              "{}: modules_to_save is not supported (expected null)", path);
    // Variants PEFT writes into the same file that change what the adapter computes.
    ETE_CHECK(!get("use_dora", false), "{}: use_dora true (DoRA) is not supported (expected false)",
              path);
    ETE_CHECK(!j.contains("layers_to_transform") || j["layers_to_transform"].is_null(),
              "{}: layers_to_transform is not supported (expected null: every layer)", path);
    PeftAdapterInfo info;
    LoraSpec& s = info.spec;
    s.enabled = true;
    s.r = get("r", 8);
    s.alpha = get("lora_alpha", 8.0f);
    s.rslora = get("use_rslora", false);
    s.dropout = get("lora_dropout", 0.0f);
    ETE_CHECK(s.dropout >= 0.0f && s.dropout < 1.0f, "{}: lora_dropout {}, expected [0, 1)", path,
              s.dropout);
    info.base_model = get("base_model_name_or_path", std::string());
    info.base_hash = get(kPeftBaseHashKey, std::string());
    const bool conv1d = c.family().layout == Layout::GPT2;
    ETE_CHECK(get("fan_in_fan_out", conv1d) == conv1d,
              "{}: fan_in_fan_out = {} does not match a {} base", path,
              get("fan_in_fan_out", false), arch_name(c.arch));
    const json& t = j.contains("target_modules") ? j["target_modules"] : json();
    if (t.is_string()) {
        s.targets = {t.get<std::string>()};
    } else {
        ETE_CHECK(t.is_array(), "{}: target_modules must be a list of module names", path);
        s.targets.clear();
        for (const json& x : t) {
            ETE_CHECK(x.is_string(), "{}: target_modules must be a list of module names", path);
            s.targets.push_back(x.get<std::string>());
        }
    }
    int r_max = s.r;
    info.arch = c.arch;
    for (const auto& [key, r] : pattern_items(j, "rank_pattern", path)) {
        ETE_CHECK(r.is_number_integer() && r.get<int64_t>() > 0 && r.get<int64_t>() <= 65536,
                  "{}: rank_pattern['{}'] = {}: expected an integer in [1, 65536]", path, key,
                  r.dump());
        info.rank_pattern[key] = r.get<int>();
        r_max = std::max(r_max, r.get<int>());
    }
    for (const auto& [key, a] : pattern_items(j, "alpha_pattern", path)) {
        ETE_CHECK(a.is_number() && std::isfinite(a.get<double>()) && a.get<double>() > 0,
                  "{}: alpha_pattern['{}'] = {}: expected a positive number", path, key, a.dump());
        info.alpha_pattern[key] = a.get<float>();
    }
    s.r_max = r_max;
    info.rank_regex = compile_keys(info.rank_pattern);
    info.alpha_regex = compile_keys(info.alpha_pattern);
    // ETE's own record of the base the adapter was trained over (absent in PEFT's files).
    const std::string weights = (fs::path(dir) / kWeightsFile).string();
    ETE_CHECK(fs::exists(weights), "adapter dir '{}': {} is missing", dir, kWeightsFile);
    const auto f = SafetensorsFile::open(weights);
    const auto& meta = f.metadata();
    s.base_format = meta.count("ete.base_format") ? meta.at("ete.base_format") : "f32";
    if (meta.count("ete.nf4_blocksize"))
        s.nf4_block = int(parse_int_field(meta.at("ete.nf4_blocksize"), 1, 1 << 20,
                                          weights + ": metadata ete.nf4_blocksize"));
    if (meta.count("ete.double_quant"))
        s.nf4_double_quant =
            parse_bool_field(meta.at("ete.double_quant"), weights + ": metadata ete.double_quant");
    try {
        check_lora_spec(s, c);
    } catch (const Error& e) {
        throw_error(fmt::format("{}: {}", path, e.what()));
    }
    return info;
}

void load_peft_weights(const std::string& dir, const ModelConfig& c, const ParamTable& table,
                       const std::function<void(int, const float*)>& take) {
    const PeftAdapterInfo info = load_peft_config(dir, c);
    const std::string path = (fs::path(dir) / kWeightsFile).string();
    const auto f = SafetensorsFile::open(path);
    std::set<std::string> expected;
    for (int i = 0; i < table.size(); ++i) {
        const ParamSpec& s = table.specs()[size_t(i)];
        if (!is_adapter(s)) continue;
        const std::string key = peft_tensor_name(s.name, c.arch), module = module_of(s.name);
        expected.insert(key);
        ETE_CHECK(f.has(key), "{}: tensor '{}' is missing (the adapter of '{}')", path, key,
                  module);
        const int r = info.rank_of(module);
        const bool a = s.role == ParamRole::LoraA;
        const int64_t rows = s.shape[0], cols = s.shape[1];
        const Shape want = a ? Shape{r, cols} : Shape{rows, r};
        ETE_CHECK(f.info(key).shape == want,
                  "{}: tensor '{}' has shape {}, expected {} for this base (r = {})", path, key,
                  shape_str(f.info(key).shape), shape_str(want), r);
        ETE_CHECK(r <= (a ? rows : cols), "{}: tensor '{}' has rank {} > the allocated {}", path,
                  key, r, a ? rows : cols);
        Tensor t = f.to_f32(key);
        check_tensor_finite(t.f32(), t.numel(), path, key);
        std::vector<float> v(size_t(rows * cols), 0.0f);
        for (int64_t y = 0; y < want[0]; ++y)
            for (int64_t x = 0; x < want[1]; ++x)
                v[size_t(y * cols + x)] = t.f32()[y * want[1] + x];
        take(i, v.data());
    }
    for (const std::string& n : f.names())
        ETE_CHECK(expected.count(n), "{}: tensor '{}' is not an adapter of this base and config",
                  path, n);
}

}  // namespace ete
