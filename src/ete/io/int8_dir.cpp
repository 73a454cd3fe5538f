// ete/io/int8_dir.cpp
#include "ete/io/int8_dir.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/io/hf_model.h"
#include "ete/io/peft.h"
#include "ete/io/safetensors.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kAdapterDir = "adapter";

std::string scale_name(const std::string& weight) {
    return weight.substr(0, weight.size() - std::string(".weight").size()) + ".weight_scale";
}

json read_config_json(const std::string& dir) {
    const std::string path = (fs::path(dir) / "config.json").string();
    ETE_CHECK(fs::exists(path), "model dir '{}': config.json is missing", dir);
    return read_json_file(path);
}

Tensor tensor_from(const void* data, Shape shape, DType t) {
    Tensor out = Tensor::empty(std::move(shape), t);
    std::memcpy(out.data(), data, size_t(out.numel()) * dtype_size(t));
    return out;
}

// The integers and scales of weight `name` (spec s) from f, checked.
Int8Tensor read_int8_weight(const SafetensorsFile& f, const ParamSpec& s, const QatSpec& spec,
                            const std::string& name) {
    const std::string path = f.path();
    Int8Tensor t;
    t.rows = s.shape[0];
    t.cols = s.shape[1];
    t.group = spec.weight_granularity == QatGranularity::Group ? spec.group_size : t.cols;
    ETE_CHECK(t.cols % t.group == 0, "{}: '{}' has {} columns, not a multiple of the group size {}",
              path, name, t.cols, t.group);
    const SafetensorsEntry& e = f.info(name);
    ETE_CHECK(e.dtype == DType::I8 && e.shape == s.shape,
              "{}: tensor '{}' is {} {}, expected I8 {} (an integer weight, ETE layout)", path,
              name, dtype_name(e.dtype), shape_str(e.shape), shape_str(s.shape));
    const std::string sn = scale_name(name);
    ETE_CHECK(f.has(sn), "{}: '{}' has no scales ('{}')", path, name, sn);
    const SafetensorsEntry& es = f.info(sn);
    const Shape want{t.rows, t.cols / t.group};
    ETE_CHECK(es.dtype == DType::F32 && es.shape == want,
              "{}: tensor '{}' is {} {}, expected F32 {}", path, sn, dtype_name(es.dtype),
              shape_str(es.shape), shape_str(want));
    Tensor q = f.to_tensor(name), sc = f.to_tensor(sn);
    const auto* qp = static_cast<const int8_t*>(q.data());
    t.q.assign(qp, qp + q.numel());
    t.scale.assign(sc.f32(), sc.f32() + sc.numel());
    const QuantGrid g = spec.weight_grid();
    for (int8_t v : t.q)
        ETE_CHECK(v >= g.qmin && v <= g.qmax, "{}: '{}' holds {}, outside the {}-bit grid [{}, {}]",
                  path, name, int(v), spec.weight_bits, g.qmin, g.qmax);
    for (float v : t.scale)
        ETE_CHECK(std::isfinite(v) && v > 0, "{}: '{}' holds the scale {} (expected finite, > 0)",
                  path, sn, v);
    return t;
}

}  // namespace

void save_int8_model(const std::string& dir, const ModelConfig& c, const HostParams& params,
                     const Int8Model& m, const json& source, const std::string& tokenizer_json,
                     const std::string& generation_config, const std::string& adapter,
                     uint64_t max_shard_bytes) {
    json config = config_to_hf_json(c);
    config["torch_dtype"] = "float32";
    json q = qat_spec_to_json(m.spec);
    q.erase("warmup_steps");  // training schedule, not the model
    q.erase("freeze_step");
    q["quant_method"] = kInt8QuantMethod;
    q["format_version"] = 1;
    q["activation_scales"] = json::object();
    for (const auto& [key, sz] : m.act_scales) q["activation_scales"][key] = {sz.first, sz.second};
    q["source"] = source;
    if (!adapter.empty()) q["adapter"] = kAdapterDir;
    config["quantization_config"] = q;
    // What the files hold, in parameter order: each parameter (a quantized one as its integers and
    // scales, in one shard), then a tied head's integers. Tensors are made one shard at a time.
    struct Item {
        std::string name;
        int param;            // -1: the tied head
        const Int8Tensor* q;  // null: F32 in HF layout
    };
    std::vector<Item> items;
    std::vector<uint64_t> bytes;
    auto add = [&](const std::string& name, int param) {
        const auto it = m.weights.find(name);
        const Int8Tensor* q = it == m.weights.end() ? nullptr : &it->second;
        items.push_back({name, param, q});
        bytes.push_back(q ? q->q.size() + q->scale.size() * sizeof(float)
                          : uint64_t(params.numel(param)) * sizeof(float));
    };
    for (int i = 0; i < params.size(); ++i) add(params.specs()[size_t(i)].name, i);
    if (int8_tied_head(m.spec, c)) add(kLmHeadName, -1);
    auto write_items = [&](const std::string& path, const std::vector<int>& ids) {
        std::vector<std::pair<std::string, Tensor>> tensors;
        for (int k : ids) {
            const Item& it = items[size_t(k)];
            if (const Int8Tensor* q = it.q) {
                tensors.emplace_back(it.name,
                                     tensor_from(q->q.data(), {q->rows, q->cols}, DType::I8));
                tensors.emplace_back(
                    scale_name(it.name),
                    tensor_from(q->scale.data(), {q->rows, q->cols / q->group}, DType::F32));
                continue;
            }
            Tensor t = Tensor::empty(hf_shape(params.specs()[size_t(it.param)]));
            param_to_hf(params, it.param, t.f32());
            tensors.emplace_back(it.name, std::move(t));
        }
        write_safetensors(path, tensors, {{"format", "pt"}});
    };
    auto names = [&](int k) {
        const Item& it = items[size_t(k)];
        return it.q ? std::vector{it.name, scale_name(it.name)} : std::vector{it.name};
    };
    write_dir_atomic(dir, "saving int8 model dir", [&](const std::string& tmp) {
        write_file_atomic(tmp + "/config.json", config.dump(2) + "\n");
        write_model_files_sharded(tmp, bytes, max_shard_bytes, write_items, names);
        if (!tokenizer_json.empty()) write_tokenizer_files(tmp, tokenizer_json);
        if (!generation_config.empty())
            write_file_atomic(tmp + "/generation_config.json", read_file(generation_config));
        if (adapter.empty()) return;
        fs::create_directory(fs::path(tmp) / kAdapterDir);
        for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
            write_file_atomic((fs::path(tmp) / kAdapterDir / f).string(),
                              read_file((fs::path(adapter) / f).string()));
    });
}

std::unique_ptr<Transformer> load_int8_model(Backend& be, const std::string& dir) {
    const ModelConfig cfg = load_hf_config(dir);
    const json qc = read_config_json(dir)["quantization_config"];
    const std::string where = (fs::path(dir) / "config.json").string();
    Int8Model m = read_int8_config(qc, cfg, where);
    // Forward only. The full-precision tensors go straight into the store one by one; the
    // weights held as integers keep untouched fp32 buffers there, which take no memory (zeroed
    // pages, DeviceMemory::allocate_zeroed).
    // A QAT run over LoRA: its adapter, over a dense base (the integers replace an NF4 one).
    PeftAdapterInfo adapter;
    std::string adapter_dir;
    if (qc.contains("adapter")) {
        ETE_CHECK(qc["adapter"] == kAdapterDir,
                  "{}: quantization_config.adapter is {}, expected \"{}\"", where,
                  qc["adapter"].dump(), kAdapterDir);
        adapter_dir = (fs::path(dir) / kAdapterDir).string();
        adapter = load_peft_config(adapter_dir, cfg);
        adapter.spec.base_format = "f32";
    }
    auto model = std::make_unique<Transformer>(cfg, be, ModelParallel{}, DType::F32, adapter.spec,
                                               QatSpec{}, /*gradients=*/false);
    ParamStore& ps = model->params();
    std::unordered_set<std::string> seen;
    std::vector<std::string> scale_names;
    std::vector<float> values;
    const bool tied_head = int8_tied_head(m.spec, cfg);
    const std::string path = for_each_model_file(dir, [&](const SafetensorsFile& f) {
        const std::string& file = f.path();
        for (const std::string& name : f.names()) {
            if (name.size() > 13 && name.ends_with(".weight_scale")) {  // read with its weight
                scale_names.push_back(name);
                continue;
            }
            if (tied_head && name == kLmHeadName) {  // the tied head's integers: the table's shape
                ParamSpec s = ps.specs()[size_t(ps.find(ParamRole::TokenEmbed))];
                s.name = kLmHeadName;
                m.weights.emplace(name, read_int8_weight(f, s, m.spec, name));
                continue;
            }
            ETE_CHECK(ps.has(name), "{}: tensor '{}' is not a parameter of this model config", file,
                      name);
            seen.insert(name);
            const int i = ps.index(name);
            const ParamSpec& s = ps.specs()[size_t(i)];
            if (int8_quantizes(m.spec, cfg, s)) {
                m.weights.emplace(name, read_int8_weight(f, s, m.spec, name));
                continue;
            }
            const SafetensorsEntry& e = f.info(name);
            ETE_CHECK(e.dtype == DType::F32 && e.shape == hf_shape(s),
                      "{}: tensor '{}' is {} {}, expected F32 {}", file, name, dtype_name(e.dtype),
                      shape_str(e.shape), shape_str(hf_shape(s)));
            Tensor t = f.to_f32(name);
            values.resize(size_t(shape_numel(s.shape)));
            param_from_hf(s, t.f32(), values.data());
            ps.upload(i, values.data());
        }
    });
    for (const ParamSpec& s : ps.specs())
        ETE_CHECK(seen.count(s.name) || s.role == ParamRole::LoraA || s.role == ParamRole::LoraB,
                  "{}: tensor '{}' is missing", path, s.name);
    ETE_CHECK(!tied_head || m.weights.count(kLmHeadName),
              "{}: tensor '{}' is missing (the integers of the tied head that quantization_config "
              "quantizes)",
              path, kLmHeadName);
    for (const std::string& name : scale_names)
        ETE_CHECK(m.weights.count(name.substr(0, name.size() - 6)),
                  "{}: '{}' scales no integer weight", path, name);
    if (!adapter_dir.empty()) load_peft_into(*model, adapter_dir, adapter);
    model->enable_int8(m);
    return model;
}

}  // namespace ete
