// ete/io/int8_config.cpp — the integer model dir's quantization_config (io/int8_dir.h).
#include <cmath>

#include "ete/core/error.h"
#include "ete/io/int8_dir.h"

namespace ete {

using json = nlohmann::json;

Int8Model read_int8_config(const json& qc, const ModelConfig& c, const std::string& where) {
    ETE_CHECK(qc.is_object(), "{}: quantization_config is not an object", where);
    json spec_json = qc;
    spec_json["warmup_steps"] = 0;
    spec_json["freeze_step"] = 0;
    Int8Model m;
    m.spec = qat_spec_from_json(spec_json, where + " quantization_config");
    check_int8_spec(m.spec, c);
    ETE_CHECK(qc.value("format_version", 0) == 1,
              "{}: quantization_config.format_version {}, expected 1", where,
              qc.value("format_version", json()).dump());
    const json scales = qc.value("activation_scales", json::object());
    ETE_CHECK(scales.is_object(), "{}: quantization_config.activation_scales is not an object",
              where);
    for (const auto& [key, v] : scales.items()) {
        ETE_CHECK(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number(),
                  "{}: activation_scales[\"{}\"] is not [scale, zero_point]", where, key);
        const float s = v[0].get<float>(), z = v[1].get<float>();
        const QuantGrid g = m.spec.act_grid();
        ETE_CHECK(std::isfinite(s) && s > 0 && z == std::nearbyint(z) && z >= g.qmin && z <= g.qmax,
                  "{}: activation_scales[\"{}\"] = [{}, {}]: expected a finite scale > 0 and an "
                  "integral zero point in [{}, {}]",
                  where, key, s, z, g.qmin, g.qmax);
        m.act_scales[key] = {s, z};
    }
    return m;
}

}  // namespace ete
