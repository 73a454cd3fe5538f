// ete/train/inference_model.cpp
#include "ete/train/inference_model.h"

#include <filesystem>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/io/hf_model.h"
#include "ete/io/int8_dir.h"
#include "ete/io/peft.h"

namespace ete {

namespace fs = std::filesystem;

std::pair<std::string, std::string> resolve_adapter_dir(const std::string& dir,
                                                        const std::string& adapter) {
    if (!adapter.empty() || fs::exists(fs::path(dir) / "config.json") ||
        !fs::exists(fs::path(dir) / "adapter_config.json"))
        return {dir, adapter};
    // A PEFT adapter dir given as the model: over the base it names, as PEFT's AutoPeftModel does.
    const std::string base = peft_base_model(dir);
    ETE_CHECK(!base.empty() && fs::exists(fs::path(base) / "config.json"),
              "'{}' is a LoRA adapter dir whose base_model_name_or_path ('{}') is not a model dir "
              "here: pass the base as --model and this dir as --adapter",
              dir, base);
    return {base, dir};
}

std::unique_ptr<Transformer> load_inference_model(Backend& be, const std::string& model_dir,
                                                  const std::string& adapter_dir,
                                                  bool allow_base_mismatch) {
    const auto [dir, adapter] = resolve_adapter_dir(model_dir, adapter_dir);
    if (is_int8_model_dir(dir)) {
        ETE_CHECK(adapter.empty(),
                  "'{}' is an integer model: --adapter applies to full-precision or NF4 bases (an "
                  "integer model exported from a QAT run over LoRA carries its adapter)",
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
    check_adapter_base(dir, adapter, info, allow_base_mismatch);
    auto m = std::make_unique<Transformer>(cfg, be, ModelParallel{}, DType::F32, info.spec,
                                           QatSpec{}, /*gradients=*/false);
    load_hf_weights(dir, m->params());
    load_peft_into(*m, adapter, info);
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
    const nlohmann::json j = read_json_file(path);
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

std::unique_ptr<Transformer> load_fake_quant_model(Backend& be, const std::string& model_dir,
                                                   const std::string& adapter_dir,
                                                   bool allow_base_mismatch) {
    const auto [dir, adapter] = resolve_adapter_dir(model_dir, adapter_dir);
    const std::string from = adapter.empty() ? dir : adapter;  // where the run left qat.json
    const QatState st = read_qat_state(from);
    auto m = load_inference_model(be, dir, adapter, allow_base_mismatch);
    ETE_CHECK(!m->int8(), "'{}' is already an integer model", dir);
    m->enable_qat(st.spec);
    m->qat()->restore(st.observers, (std::filesystem::path(from) / kQatStateFile).string());
    for (const auto& [name, f] : st.scale_factors) m->qat()->set_weight_scale_factors(name, f);
    m->qat()->set_inference();
    return m;
}

}  // namespace ete
