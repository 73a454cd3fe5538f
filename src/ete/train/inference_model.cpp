// ete/train/inference_model.cpp
#include "ete/train/inference_model.h"

#include <filesystem>

#include "ete/core/file_util.h"
#include "ete/io/hf_model.h"
#include "ete/io/int8_dir.h"
#include "ete/io/peft.h"

namespace ete {

std::unique_ptr<Transformer> load_inference_model(Backend& be, const std::string& dir,
                                                  const std::string& adapter) {
    if (is_int8_model_dir(dir)) {
        ETE_CHECK(adapter.empty(),
                  "'{}' is an integer model: --adapter applies to full-precision "
                  "or NF4 bases",
                  dir);
        return load_int8_model(be, dir);
    }
    const ModelConfig cfg = load_hf_config(dir);
    if (adapter.empty()) {
        auto m = std::make_unique<Transformer>(cfg, be, ModelParallel{}, DType::F32, LoraSpec{},
                                               QatSpec{}, /*gradients=*/false);
        load_hf_weights(dir, m->params());
        return m;
    }
    const PeftAdapterInfo info = load_peft_config(adapter, cfg);
    auto m = std::make_unique<Transformer>(cfg, be, ModelParallel{}, DType::F32, info.spec,
                                           QatSpec{}, /*gradients=*/false);
    ParamStore& ps = m->params();
    load_hf_weights(dir, ps);
    load_peft_weights(adapter, cfg, ps, [&](int i, const float* v) { ps.upload(i, v); });
    for (int i = 0; i < cfg.num_layers; ++i)
        for (auto [lin, a] : m->adapted_linears(i)) {
            const std::string& name = ps.specs()[size_t(a)].name;
            const auto it = info.ranks.find(name.substr(0, name.rfind(".lora_A")));
            lin->set_rank(it == info.ranks.end() ? info.spec.r : it->second);
        }
    return m;
}

std::string qat_state_json(const QatSpec& spec, const nlohmann::json& observers,
                           const ScaleFactors& scale_factors) {
    nlohmann::json j = {{"format", "ete-qat"},
                        {"format_version", 1},
                        {"spec", qat_spec_to_json(spec)},
                        {"observers", observers}};
    if (!scale_factors.empty()) j["weight_scale_factors"] = scale_factors;
    return j.dump(1) + "\n";
}

QatState read_qat_state(const std::string& dir) {
    const std::string path = (std::filesystem::path(dir) / kQatStateFile).string();
    ETE_CHECK(std::filesystem::exists(path),
              "'{}' has no {}: expected the final model of a QAT run (qat.enabled = true); a "
              "plain model is quantized with ete quantize --scheme w8a8 --calib SHARD",
              dir, kQatStateFile);
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
        throw_error(fmt::format("{}: invalid JSON ({})", path, e.what()));
    }
    ETE_CHECK(j.is_object() && j.value("format", "") == "ete-qat" &&
                  j.value("format_version", 0) == 1 && j.contains("spec") &&
                  j.contains("observers") && j["observers"].is_object(),
              "{}: expected an ete-qat format_version 1 object with spec and observers", path);
    QatState st{qat_spec_from_json(j["spec"], path), j["observers"], {}};
    if (j.contains("weight_scale_factors")) {
        try {
            st.scale_factors = j["weight_scale_factors"].get<ScaleFactors>();
        } catch (const nlohmann::json::exception& e) {
            throw_error(
                fmt::format("{}: weight_scale_factors: expected weight names mapped to "
                            "arrays of numbers ({})",
                            path, e.what()));
        }
    }
    ETE_CHECK(!st.spec.learnable_scale || !st.scale_factors.empty(),
              "{}: the spec has learnable_scale but the file holds no weight_scale_factors", path);
    return st;
}

std::unique_ptr<Transformer> load_fake_quant_model(Backend& be, const std::string& dir) {
    const QatState st = read_qat_state(dir);
    auto m = load_inference_model(be, dir);
    ETE_CHECK(!m->int8(), "'{}' is already an integer model", dir);
    m->enable_qat(st.spec);
    m->qat()->restore(st.observers, (std::filesystem::path(dir) / kQatStateFile).string());
    for (const auto& [name, f] : st.scale_factors) m->qat()->set_weight_scale_factors(name, f);
    m->qat()->set_inference();
    return m;
}

}  // namespace ete
