// ete/io/peft_apply.cpp — a PEFT adapter dir onto a model in memory, and the check of the base it
// goes over (io/peft.h); the dir's readers (io/peft.cpp) need neither.
#include <string>

#include "ete/core/log.h"
#include "ete/io/hf_model.h"
#include "ete/io/peft.h"
#include "ete/model/transformer.h"

namespace ete {

void load_peft_into(Transformer& m, const std::string& dir, const PeftAdapterInfo& info) {
    const ModelConfig& cfg = m.config();
    ParamStore& ps = m.params();
    load_peft_weights(dir, cfg, ps, [&](int i, const float* v) { ps.upload(i, v); });
    for (int i = 0; i < cfg.num_layers; ++i)
        for (auto [lin, a] : m.adapted_linears(i)) {
            const std::string& name = ps.specs()[size_t(a)].name;
            const std::string module = name.substr(0, name.rfind(".lora_A"));
            lin->set_rank(info.rank_of(module));
            lin->set_adapter_scale(info.scale_of(module));
        }
}

void check_adapter_base(const std::string& base_dir, const std::string& adapter_dir,
                        const PeftAdapterInfo& info, bool allow_mismatch) {
    if (info.base_hash.empty()) {
        log_info(
            "adapter '{}' records no base hash ({} absent: written by PEFT?): its base '{}' "
            "cannot be verified",
            adapter_dir, kPeftBaseHashKey, base_dir);
        return;
    }
    const std::string have = model_dir_hash_like(base_dir, info.base_hash);
    if (have == info.base_hash) return;
    const std::string msg = fmt::format(
        "adapter '{}' was trained over a base with content hash {}, but '{}' hashes to {}: "
        "another base (or a changed one) gives a wrong model",
        adapter_dir, info.base_hash, base_dir, have);
    ETE_CHECK(allow_mismatch, "{} (pass --allow-base-mismatch to use it anyway)", msg);
    log_warn("{} (--allow-base-mismatch: going on)", msg);
}

}  // namespace ete
