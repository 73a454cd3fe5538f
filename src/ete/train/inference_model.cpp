// ete/train/inference_model.cpp
#include "ete/train/inference_model.h"

#include "ete/io/hf_model.h"
#include "ete/io/peft.h"

namespace ete {

std::unique_ptr<Transformer> load_inference_model(Backend& be, const std::string& dir,
                                                  const std::string& adapter) {
    const ModelConfig cfg = load_hf_config(dir);
    if (adapter.empty()) {
        auto m = std::make_unique<Transformer>(cfg, be);
        load_hf_weights(dir, m->params());
        return m;
    }
    const PeftAdapterInfo info = load_peft_config(adapter, cfg);
    auto m = std::make_unique<Transformer>(cfg, be, ModelParallel{}, DType::F32, info.spec);
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

}  // namespace ete
