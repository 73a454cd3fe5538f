// ete/io/hf_model.cpp
#include "ete/io/hf_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "ete/core/file_util.h"
#include "ete/io/safetensors.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

ModelConfig load_hf_config(const std::string& dir) {
    std::string path = (fs::path(dir) / "config.json").string();
    ETE_CHECK(fs::is_directory(dir), "model dir '{}': not a directory", dir);
    ETE_CHECK(fs::exists(path), "model dir '{}': config.json is missing", dir);
    json j;
    try {
        j = json::parse(read_file(path));
    } catch (const json::exception& e) {
        throw_error(fmt::format("{}: invalid JSON ({})", path, e.what()));
    }
    return config_from_hf_json(j, path);
}

namespace {

// The ETE name for a tensor name found in a file, or "" for names to ignore.
std::string canonical_name(const ModelConfig& c, const std::string& name) {
    if (c.arch != Arch::GPT2) return name;
    std::string n = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    auto ends_with = [&](const char* s) {
        std::string_view v(n), suffix(s);
        return v.size() >= suffix.size() && v.substr(v.size() - suffix.size()) == suffix;
    };
    // Old GPT-2 files store the causal mask as buffers h.i.attn.bias / h.i.attn.masked_bias
    // (not h.i.attn.c_attn.bias, which is a parameter).
    if (ends_with(".attn.bias") || ends_with(".attn.masked_bias")) return "";
    if (n == "lm_head.weight") return "";  // tied to wte; some exports store a copy
    return n;
}

}  // namespace

void load_hf_weights(const std::string& dir, ParamStore& store) {
    std::string path = (fs::path(dir) / "model.safetensors").string();
    ETE_CHECK(fs::exists(path),
              "model dir '{}': model.safetensors is missing (sharded and .bin "
              "checkpoints are not supported yet)",
              dir);
    SafetensorsFile f = SafetensorsFile::open(path);
    ModelConfig cfg;
    cfg.arch = store.has("wte.weight") ? Arch::GPT2 : Arch::Llama;
    std::unordered_set<std::string> loaded;
    for (const std::string& name : f.names()) {
        std::string n = canonical_name(cfg, name);
        if (n.empty()) continue;
        ETE_CHECK(store.has(n), "{}: tensor '{}' is not a parameter of this model config", path,
                  name);
        int i = store.index(n);
        const ParamSpec& s = store.specs()[size_t(i)];
        const SafetensorsEntry& e = f.info(name);
        ETE_CHECK(e.shape == hf_shape(s), "{}: tensor '{}' has shape {}, expected {}", path, name,
                  shape_str(e.shape), shape_str(hf_shape(s)));
        ETE_CHECK(e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16,
                  "{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", path, name,
                  dtype_name(e.dtype));
        ETE_CHECK(loaded.insert(n).second, "{}: tensor '{}' appears twice", path, n);
        Tensor t = f.to_f32(name);
        param_from_hf(store, i, t.f32());
    }
    for (const ParamSpec& s : store.specs()) {
        ETE_CHECK(loaded.count(s.name), "{}: tensor '{}' is missing", path, s.name);
    }
}

namespace {

void fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

void write_model_files(const std::string& tmp, const ModelConfig& c, const ParamStore& store,
                       const std::string& tokenizer_json) {
    write_file_atomic(tmp + "/config.json", config_to_hf_json(c).dump(2) + "\n");
    json gen = {{"_from_model_config", true}};
    if (c.bos_token_id >= 0) gen["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_id >= 0) gen["eos_token_id"] = c.eos_token_id;
    write_file_atomic(tmp + "/generation_config.json", gen.dump(2) + "\n");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t i = 0; i < store.specs().size(); ++i) {
        const ParamSpec& s = store.specs()[i];
        Tensor t = Tensor::empty(hf_shape(s));
        param_to_hf(store, int(i), t.f32());
        tensors.emplace_back(s.name, std::move(t));
    }
    write_safetensors(tmp + "/model.safetensors", tensors, {{"format", "pt"}});
    if (!tokenizer_json.empty()) {
        write_file_atomic(tmp + "/tokenizer.json", read_file(tokenizer_json));
    }
}

}  // namespace

void save_hf_model(const std::string& dir, const ModelConfig& c, const ParamStore& store,
                   const std::string& tokenizer_json) {
    fs::path target = fs::absolute(dir);
    fs::create_directories(target.parent_path());
    std::string tmp = target.string() + ".tmp." + std::to_string(::getpid());
    std::string old = target.string() + ".old." + std::to_string(::getpid());
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    try {
        write_model_files(tmp, c, store, tokenizer_json);
        fsync_dir(tmp);
        if (fs::exists(target)) fs::rename(target, old);
        fs::rename(tmp, target);
        fsync_dir(target.parent_path().string());
        fs::remove_all(old);
    } catch (const std::exception& e) {
        std::error_code ec;
        fs::remove_all(tmp, ec);
        throw_error(fmt::format("saving model dir '{}': {}", dir, e.what()));
    }
}

}  // namespace ete
