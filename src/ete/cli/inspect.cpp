// ete/cli/inspect.cpp — `ete inspect PATH`: what is inside a safetensors file, an HF model dir, a
// checkpoint or a token shard (names, shapes, dtypes, parameter count, bytes, config summary).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ete/cli/commands.h"
#include "ete/core/file_util.h"
#include "ete/data/token_shard.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string human_bytes(double b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, ++u;
    return u ? fmt::format("{:.2f} {}", b, units[u]) : fmt::format("{:.0f} {}", b, units[u]);
}

// Prints one safetensors file's tensors; returns (elements, bytes).
std::pair<int64_t, uint64_t> print_tensors(const std::string& path, bool list) {
    SafetensorsFile f = SafetensorsFile::open(path);
    int64_t elems = 0;
    uint64_t bytes = 0;
    std::printf("%s: %zu tensors\n", path.c_str(), f.names().size());
    for (const auto& [k, v] : f.metadata()) {
        std::string shown = v.size() > 80 ? v.substr(0, 77) + "..." : v;
        std::printf("  metadata %s = %s\n", k.c_str(), shown.c_str());
    }
    for (const std::string& n : f.names()) {
        const SafetensorsEntry& e = f.info(n);
        int64_t numel = shape_numel(e.shape);
        elems += numel;
        bytes += e.end - e.begin;
        if (list) {
            std::printf("  %-60s %-5s %-22s %12lld\n", n.c_str(),
                        std::string(dtype_name(e.dtype)).c_str(), shape_str(e.shape).c_str(),
                        static_cast<long long>(numel));
        }
    }
    return {elems, bytes};
}

// A quantized dir's quantization_config, in one line.
void print_quantization(const fs::path& dir) {
    const json j = json::parse(read_file((dir / "config.json").string()), nullptr, false);
    if (!j.is_object() || !j.contains("quantization_config")) return;
    const json& q = j["quantization_config"];
    if (!q.is_object()) return;
    if (q.value("quant_method", "") == "ete_int8") {
        std::printf(
            "quantization: ete_int8 (integer model) | W%dA%d | weights per %s | inputs per %s | "
            "linears %s | %zu frozen activation scales | from %s%s\n",
            q.value("weight_bits", 0), q.value("act_bits", 0),
            q.value("weight_granularity", std::string("?")).c_str(),
            q.value("act_granularity", std::string("?")).c_str(),
            q.value("linears", std::string("?")).c_str(),
            q.value("activation_scales", json::object()).size(),
            q.value("source", json::object()).value("from", std::string("?")).c_str(),
            q.contains("adapter") ? " | with a LoRA adapter (adapter/, fp32)" : "");
        return;
    }
    std::printf("quantization: %s\n", q.value("quant_method", std::string("?")).c_str());
}

void print_model_config(const ModelConfig& c) {
    std::printf(
        "model: %s | layers %d | hidden %d | heads %d (kv %d, head_dim %d) | mlp %d | "
        "vocab %d | positions %d | tied head %s | rope theta %g%s%s\n",
        arch_name(c.arch).c_str(), c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.D(),
        c.intermediate_size, c.vocab_size, c.max_position_embeddings,
        c.tie_word_embeddings ? "yes" : "no", c.rope_theta,
        c.rope_scaling.type == "default"
            ? ""
            : fmt::format(" ({} scaling)", c.rope_scaling.type).c_str(),
        c.rotary_dim() == c.D() ? "" : fmt::format(" on {} dims", c.rotary_dim()).c_str());
}

void print_totals(int64_t elems, uint64_t bytes) {
    std::printf("total: %lld elements (%.2fM), %s\n", static_cast<long long>(elems),
                double(elems) / 1e6, human_bytes(double(bytes)).c_str());
}

// The weight files of an HF dir: model.safetensors, or the shards its index names.
std::vector<std::string> weight_files(const fs::path& dir) {
    if (fs::exists(dir / "model.safetensors")) return {(dir / "model.safetensors").string()};
    fs::path index = dir / "model.safetensors.index.json";
    ETE_CHECK(fs::exists(index),
              "inspect '{}': no model.safetensors or "
              "model.safetensors.index.json",
              dir.string());
    json j = json::parse(read_file(index.string()), nullptr, false);
    ETE_CHECK(!j.is_discarded() && j.contains("weight_map") && j["weight_map"].is_object(),
              "{}: expected a JSON object with a weight_map", index.string());
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) files.insert(file.get<std::string>());
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back((dir / f).string());
    return out;
}

int inspect_dir(const fs::path& dir, bool list) {
    int64_t elems = 0;
    uint64_t bytes = 0;
    auto add = [&](std::pair<int64_t, uint64_t> p) { elems += p.first, bytes += p.second; };
    if (fs::exists(dir / "state.json")) {  // an ETE checkpoint
        json st = json::parse(read_file((dir / "state.json").string()), nullptr, false);
        ETE_CHECK(!st.is_discarded(), "{}/state.json: invalid JSON", dir.string());
        std::printf(
            "checkpoint: %s | format %d | step %lld | optimizer steps %lld | data "
            "position %llu\n",
            dir.string().c_str(), st.value("format_version", -1),
            static_cast<long long>(st.value("step", int64_t(-1))),
            static_cast<long long>(st.value("optimizer_steps", int64_t(-1))),
            static_cast<unsigned long long>(st.value("data_position", uint64_t(0))));
        if (st.contains("run") && st["run"].contains("model"))
            print_model_config(config_from_hf_json(st["run"]["model"], "state.json run.model"));
        add(print_tensors((dir / "model.safetensors").string(), list));
        print_totals(elems, bytes);
        print_tensors((dir / "optimizer.safetensors").string(), false);
        return 0;
    }
    ETE_CHECK(fs::exists(dir / "config.json"),
              "inspect '{}': expected an HF model dir "
              "(config.json) or an ETE checkpoint (state.json)",
              dir.string());
    print_model_config(load_hf_config(dir.string()));
    print_quantization(dir);
    for (const auto& f : weight_files(dir)) add(print_tensors(f, list));
    print_totals(elems, bytes);
    for (const char* extra : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
        std::printf("%s: %s\n", extra, fs::exists(dir / extra) ? "present" : "absent");
    if (fs::exists(dir / "qat.json"))
        std::printf("qat.json: present (the QAT spec and observers: ete export int8)\n");
    return 0;
}

}  // namespace

int cmd_inspect(const InspectArgs& a) {
    fs::path p(a.path);
    ETE_CHECK(fs::exists(p), "inspect '{}': no such file or directory", a.path);
    if (fs::is_directory(p)) return inspect_dir(p, !a.summary);
    MappedFile file(a.path);  // mapped, not read: model files can be large
    if (file.size() >= 8 && std::memcmp(file.data(), "ETETOK01", 8) == 0) {
        TokenShard s(a.path);
        std::printf("%s: token shard | %llu tokens | %u bytes per token | vocab %u\n",
                    a.path.c_str(), static_cast<unsigned long long>(s.size()), s.bytes_per_token(),
                    s.vocab_size());
        return 0;
    }
    auto [elems, bytes] = print_tensors(a.path, !a.summary);
    print_totals(elems, bytes);
    return 0;
}

}  // namespace ete
