// ete/io/hf_model.cpp — HF model dirs: config, single-file or sharded weights, atomic save.
#include "ete/io/hf_model.h"

#include "ete/core/json_file.h"
#include "ete/core/rng.h"
#include "ete/io/bnb_nf4.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <xxhash.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/io/safetensors.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

}  // namespace

namespace {

// Once per file and process: the keys that neither ETE nor Hugging Face's class reads.
void note_unread_keys(const Family& f, const json& j, const std::string& path) {
    static std::mutex mu;
    static std::set<std::string> noted;
    const std::vector<std::string> keys = unread_config_keys(f, j);
    std::lock_guard<std::mutex> lock(mu);
    if (keys.empty() || !noted.insert(path).second) return;
    // A hostile file's keys may be long or hold control characters: the first 8, each cut at
    // 64 characters, printable.
    std::vector<std::string> shown;
    for (size_t i = 0; i < keys.size() && i < 8; ++i) {
        std::string k = keys[i].substr(0, 64);
        for (char& c : k)
            if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
        shown.push_back(k);
    }
    const std::string more =
        keys.size() > shown.size() ? fmt::format(" and {} more", keys.size() - shown.size()) : "";
    log_info("{}: ignoring {}{} (Hugging Face's {} does not read {} either)", path,
             fmt::join(shown, ", "), more, f.hf_class, keys.size() == 1 ? "it" : "them");
}

}  // namespace

ModelConfig load_hf_config(const std::string& dir) {
    std::string path = (fs::path(dir) / "config.json").string();
    ETE_CHECK(fs::is_directory(dir), "model dir '{}': not a directory", dir);
    ETE_CHECK(fs::exists(path), "model dir '{}': config.json is missing", dir);
    const json j = read_json_file(path);
    ModelConfig c = config_from_hf_json(j, path);
    note_unread_keys(c.family(), j, path);
    return c;
}

bool is_int8_model_dir(const std::string& dir) {
    const fs::path config = fs::path(dir) / "config.json";
    if (!fs::exists(config)) return false;
    // Leniently: an unreadable config.json is reported by whoever loads it.
    const json j = json::parse(read_file(config.string()), nullptr, false);
    return j.is_object() && j.contains("quantization_config") &&
           j["quantization_config"].is_object() &&
           j["quantization_config"].value("quant_method", "") == kInt8QuantMethod;
}

namespace {

// The ETE name for a tensor name found in a file, or "" for names to ignore.
std::string canonical_name(Layout layout, const std::string& name) {
    if (layout != Layout::GPT2) return name;
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

// Checks every tensor of `f` against the ParamSpec table and hands it to `take` in ETE layout;
// `loaded` collects ETE names across files so a parameter stored twice (under two spellings) is
// caught.
void load_file(const SafetensorsFile& f, const ParamTable& store, const TensorSink& take,
               const Nf4Sink& take_nf4, std::unordered_set<std::string>& loaded) {
    const std::string& path = f.path();
    const Layout layout = store.has("wte.weight") ? Layout::GPT2 : Layout::Llama;
    for (const std::string& name : f.names()) {
        if (is_bnb_aux_name(name)) continue;  // read with its quantized weight
        std::string n = canonical_name(layout, name);
        if (n.empty()) continue;
        ETE_CHECK(store.has(n), "{}: tensor '{}' is not a parameter of this model config", path,
                  name);
        int i = store.index(n);
        const ParamSpec& s = store.specs()[size_t(i)];
        if (is_bnb_quantized(f, name)) {  // stored [out, in] like ETE, whatever HF's layout
            ETE_CHECK(loaded.insert(n).second, "{}: tensor '{}' appears twice", path, n);
            const Nf4Tensor t = read_bnb_nf4(f, name, s.shape);
            for (const char* aux : {"", ".absmax", ".nested_absmax"})
                if (f.has(name + aux)) f.release(name + aux);
            if (take_nf4) {
                take_nf4(i, t);
            } else {
                std::vector<float> v(size_t(t.numel()));
                nf4_dequantize(t, v.data());
                take(i, v.data());
            }
            continue;
        }
        const SafetensorsEntry& e = f.info(name);
        ETE_CHECK(e.shape == hf_shape(s), "{}: tensor '{}' has shape {}, expected {}", path, name,
                  shape_str(e.shape), shape_str(hf_shape(s)));
        ETE_CHECK(e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16,
                  "{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", path, name,
                  dtype_name(e.dtype));
        ETE_CHECK(loaded.insert(n).second, "{}: tensor '{}' appears twice", path, n);
        Tensor t = f.to_f32(name);
        f.release(name);
        check_tensor_finite(t.f32(), t.numel(), path, name);
        if (!s.hf_transposed) {  // HF's layout is ETE's: no second copy of a large tensor
            take(i, t.f32());
            continue;
        }
        std::vector<float> ete_layout(size_t(t.numel()));
        param_from_hf(s, t.f32(), ete_layout.data());
        take(i, ete_layout.data());
    }
}

// Parses the index into file -> tensor names (std::map: shards opened in name order).
std::map<std::string, std::vector<std::string>> read_index(const std::string& path) {
    const json j = read_json_file(path);
    ETE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
              "{}: expected an object with a \"weight_map\" object", path);
    std::map<std::string, std::vector<std::string>> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
        ETE_CHECK(file.is_string(), "{}: weight_map entry for tensor '{}' is not a file name", path,
                  name);
        std::string f = file.get<std::string>();
        // Shards live next to the index: a path could read files outside the model dir.
        ETE_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos,
                  "{}: tensor '{}' maps to '{}', expected a file name in the model dir", path, name,
                  f);
        shards[f].push_back(name);
    }
    ETE_CHECK(!shards.empty(), "{}: weight_map is empty", path);
    return shards;
}

// Groups items into shards: in order, a new shard whenever the next item would push the current
// one past `max_bytes`; an item larger than the limit sits alone.
std::vector<std::vector<int>> plan_shards(const std::vector<uint64_t>& bytes, uint64_t max_bytes) {
    std::vector<std::vector<int>> shards;
    uint64_t current = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        if (shards.empty() || (!shards.back().empty() && current + bytes[i] > max_bytes)) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().push_back(int(i));
        current += bytes[i];
    }
    return shards;
}

// HF's shard name: model-00001-of-00003.safetensors.
std::string shard_name(size_t k, size_t n) {
    return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
}

}  // namespace

std::string for_each_model_file(const std::string& dir,
                                const std::function<void(const SafetensorsFile&)>& use) {
    const std::string single = (fs::path(dir) / kSingleFile).string();
    const std::string index = (fs::path(dir) / kIndexFile).string();
    if (fs::exists(single)) {
        use(SafetensorsFile::open(single));
        return single;
    }
    ETE_CHECK(fs::exists(index),
              "model dir '{}': neither {} nor {} exists (.bin checkpoints are not supported)", dir,
              kSingleFile, kIndexFile);
    auto shards = read_index(index);
    std::unordered_map<std::string, std::string> owner;  // tensor -> shard per the index
    for (const auto& [file, names] : shards)
        for (const auto& n : names) owner[n] = file;
    std::unordered_map<std::string, std::string> seen;  // tensor -> shard it was found in
    for (const auto& [file, names] : shards) {  // each shard opened once, checked, then used
        std::string path = (fs::path(dir) / file).string();
        ETE_CHECK(fs::exists(path), "{}: shard '{}' (holding tensor '{}') is missing", index, file,
                  names.front());
        SafetensorsFile f = SafetensorsFile::open(path);
        for (const std::string& n : f.names()) {
            auto [it, fresh] = seen.emplace(n, file);
            ETE_CHECK(fresh, "{}: tensor '{}' is also in shard '{}'", path, n, it->second);
            auto o = owner.find(n);
            ETE_CHECK(o != owner.end(), "{}: tensor '{}' is not in the index weight_map ({})", path,
                      n, index);
            ETE_CHECK(o->second == file, "{}: tensor '{}' is mapped to shard '{}' by {}", path, n,
                      o->second, index);
        }
        for (const std::string& n : names)
            ETE_CHECK(f.has(n), "{}: tensor '{}' listed in {} is missing from this shard", path, n,
                      index);
        use(f);
    }
    return index;
}

void write_model_files_sharded(
    const std::string& tmp, const std::vector<uint64_t>& bytes, uint64_t max_bytes,
    const std::function<void(const std::string&, const std::vector<int>&)>& write,
    const std::function<std::vector<std::string>(int)>& names) {
    auto shards = plan_shards(bytes, max_bytes);
    if (shards.size() <= 1) {
        write(tmp + "/" + kSingleFile, shards.empty() ? std::vector<int>{} : shards[0]);
        return;
    }
    json map = json::object();
    uint64_t total = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
        const std::string file = shard_name(k, shards.size());
        write(tmp + "/" + file, shards[k]);  // one shard at a time
        for (int i : shards[k]) {
            for (const std::string& n : names(i)) map[n] = file;
            total += bytes[size_t(i)];
        }
    }
    json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_file_atomic(tmp + "/" + kIndexFile, index.dump(2) + "\n");
}

void load_hf_weights(const std::string& dir, HostParams& params) {
    load_hf_tensors(dir, params, [&](int i, const float* v) {
        std::copy(v, v + params.numel(i), params.param(i));
    });
}

void load_hf_weights(const std::string& dir, ParamStore& store) {
    load_hf_tensors(
        dir, store, [&](int i, const float* v) { store.upload(i, v); },
        [&](int i, const Nf4Tensor& t) {
            if (store.is_nf4(i)) return store.upload_nf4(i, t);
            std::vector<float> v(size_t(t.numel()));
            nf4_dequantize(t, v.data());
            store.upload(i, v.data());
        });
}

void load_hf_tensors(const std::string& dir, const ParamTable& store, const TensorSink& take,
                     const Nf4Sink& take_nf4) {
    // An integer model's weights are not a full-precision model's (io/int8_dir.h reads them).
    ETE_CHECK(!is_int8_model_dir(dir),
              "model dir '{}' is an integer model (quant_method ete_int8): ete eval and ete "
              "generate run it; training, quantizing and merging need the full-precision "
              "model it came from",
              dir);
    std::unordered_set<std::string> loaded;
    const std::string where = for_each_model_file(
        dir, [&](const SafetensorsFile& f) { load_file(f, store, take, take_nf4, loaded); });
    for (const ParamSpec& s : store.specs()) {
        if (!param_in_hf_model(s)) continue;  // adapters, QAT's scales: not the base's
        ETE_CHECK(loaded.count(s.name), "{}: tensor '{}' is missing", where, s.name);
    }
}

namespace {

// Writes one safetensors file holding the given parameters in HF layout, in `dtype`, fetching
// each when its bytes are due: the host holds one tensor (and its HF-layout copy) at a time.
void write_weights(const std::string& path, const ParamTable& table, const TensorFetch& fetch,
                   const std::vector<int>& ids, DType dtype) {
    std::vector<StreamedTensor> tensors;
    for (int i : ids) {
        const ParamSpec& s = table.specs()[size_t(i)];
        tensors.push_back({s.name, dtype, hf_shape(s), [&, i](FileSink& out) {
                               const ParamSpec& spec = table.specs()[size_t(i)];
                               std::vector<float> v(size_t(table.numel(i)));
                               fetch(i, v.data());
                               std::vector<float> hf(v.size());
                               param_to_hf(spec, v.data(), hf.data());
                               if (dtype == DType::F32) return out.write(hf.data(), hf.size() * 4);
                               std::vector<char> narrow(hf.size() * dtype_size(dtype));
                               convert_from_f32(narrow.data(), dtype, hf.data(), hf.size());
                               out.write(narrow.data(), narrow.size());
                           }});
    }
    write_safetensors_streamed(path, tensors, {{"format", "pt"}});
}

void write_weight_files(const std::string& tmp, const ParamTable& table, const TensorFetch& fetch,
                        uint64_t max_bytes, DType dtype) {
    std::vector<int> params;  // QAT's scales go to qat.json
    for (int i = 0; i < table.size(); ++i)
        if (param_in_hf_model(table.specs()[size_t(i)])) params.push_back(i);
    std::vector<uint64_t> bytes;
    for (int i : params)
        bytes.push_back(uint64_t(shape_numel(hf_shape(table.specs()[size_t(i)]))) *
                        dtype_size(dtype));
    write_model_files_sharded(
        tmp, bytes, max_bytes,
        [&](const std::string& path, const std::vector<int>& ids) {
            std::vector<int> chosen;
            for (int k : ids) chosen.push_back(params[size_t(k)]);
            write_weights(path, table, fetch, chosen, dtype);
        },
        [&](int k) { return std::vector{table.specs()[size_t(params[size_t(k)])].name}; });
}

// HF's torch_dtype spelling of a storage dtype.
const char* torch_dtype_name(DType t) {
    return t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float32";
}

void write_model_files(const std::string& tmp, const ModelConfig& c, const ParamTable& table,
                       const TensorFetch& fetch, const std::string& tokenizer_json,
                       uint64_t max_shard_bytes, DType dtype) {
    json config = config_to_hf_json(c);
    config["torch_dtype"] = torch_dtype_name(dtype);
    write_file_atomic(tmp + "/config.json", config.dump(2) + "\n");
    json gen = {{"_from_model_config", true}};
    if (c.bos_token_id >= 0) gen["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_id >= 0) gen["eos_token_id"] = c.eos_token_id;
    write_file_atomic(tmp + "/generation_config.json", gen.dump(2) + "\n");
    write_weight_files(tmp, table, fetch, max_shard_bytes, dtype);
    if (!tokenizer_json.empty()) write_tokenizer_files(tmp, tokenizer_json);
}

}  // namespace

void write_tokenizer_files(const std::string& tmp, const std::string& tokenizer_json) {
    write_file_atomic(tmp + "/tokenizer.json", read_file(tokenizer_json));
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
        const fs::path beside = fs::path(tokenizer_json).parent_path() / name;
        if (fs::exists(beside)) write_file_atomic(tmp + "/" + name, read_file(beside.string()));
    }
}

namespace {

// Feeds a file to `update` through a 4 MiB buffer (mapping a multi-GB base would make all of it
// resident while it is hashed).
void stream_file(const std::string& path, const std::function<void(const char*, size_t)>& update) {
    std::ifstream in(path, std::ios::binary);
    ETE_CHECK(in, "{}: cannot open for reading", path);
    std::vector<char> buf(size_t(4) << 20);
    while (in) {
        in.read(buf.data(), std::streamsize(buf.size()));
        if (in.gcount() > 0) update(buf.data(), size_t(in.gcount()));
    }
    ETE_CHECK(in.eof(), "{}: read error", path);
}

// Not core's file_digest (the same XXH3-64): that one drops the file's pages from the cache as it
// reads, and a base is hashed just before it is loaded.
uint64_t file_xxh3(const std::string& path) {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(),
                                                                &XXH3_freeState);
    ETE_CHECK(st && XXH3_64bits_reset(st.get()) == XXH_OK, "{}: cannot start a hash", path);
    stream_file(path, [&](const char* p, size_t n) { XXH3_64bits_update(st.get(), p, n); });
    return XXH3_64bits_digest(st.get());
}

// The fingerprint ETE recorded before XXH3: FNV-1a 64, one byte at a time (0.3 GB/s on a Zen 5:
// 8 minutes for a 140 GB base, on every rank).
uint64_t file_fnv1a(const std::string& path) {
    uint64_t h = 14695981039346656037ull;
    stream_file(path, [&](const char* p, size_t n) {
        for (size_t k = 0; k < n; ++k) {
            h ^= uint8_t(p[k]);
            h *= 1099511628211ull;
        }
    });
    return h;
}

constexpr std::string_view kXxh3Prefix = "xxh3:";

// "name:hash;" of config.json and every *.safetensors file in name order, hashed.
uint64_t dir_fingerprint(const std::string& dir, uint64_t (*file_hash)(const std::string&)) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n == "config.json" || e.path().extension() == ".safetensors") files.push_back(n);
    }
    std::sort(files.begin(), files.end());
    ETE_CHECK(!files.empty(), "model dir '{}': no config.json or .safetensors files", dir);
    std::string all;
    for (const std::string& n : files)
        all += fmt::format("{}:{:016x};", n, file_hash((fs::path(dir) / n).string()));
    return stable_hash(all);
}

}  // namespace

std::string model_dir_hash(const std::string& dir) {
    return fmt::format("{}{:016x}", kXxh3Prefix, dir_fingerprint(dir, file_xxh3));
}

bool is_legacy_model_dir_hash(const std::string& recorded) {
    return recorded.size() == 16 &&
           recorded.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string model_dir_hash_like(const std::string& dir, const std::string& recorded) {
    if (is_legacy_model_dir_hash(recorded))
        return fmt::format("{:016x}", dir_fingerprint(dir, file_fnv1a));
    return model_dir_hash(dir);
}

void save_hf_model(const std::string& dir, const ModelConfig& c, const ParamTable& table,
                   const TensorFetch& fetch, const std::string& tokenizer_json,
                   uint64_t max_shard_bytes, DType dtype, const ExtraFiles& extra_files) {
    for (const auto& [name, text] : extra_files)
        ETE_CHECK(
            !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
            "saving model dir '{}': extra file '{}' is not a plain file name", dir, name);
    ETE_CHECK(max_shard_bytes > 0, "saving model dir '{}': max_shard_bytes must be positive", dir);
    ETE_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16,
              "saving model dir '{}': dtype {} is not F32, BF16 or F16", dir, dtype_name(dtype));
    write_dir_atomic(dir, "saving model dir", [&](const std::string& tmp) {
        write_model_files(tmp, c, table, fetch, tokenizer_json, max_shard_bytes, dtype);
        for (const auto& [name, text] : extra_files) write_file_atomic(tmp + "/" + name, text);
    });
}

void save_hf_model(const std::string& dir, const ModelConfig& c, const HostParams& store,
                   const std::string& tokenizer_json, uint64_t max_shard_bytes, DType dtype,
                   const ExtraFiles& extra_files) {
    save_hf_model(
        dir, c, store, [&](int i, float* out) { std::copy_n(store.param(i), store.numel(i), out); },
        tokenizer_json, max_shard_bytes, dtype, extra_files);
}

}  // namespace ete
