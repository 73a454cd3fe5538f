// ete/model/int8_from_qat.cpp — make_int8_model (model/int8_model.h): the integer model of a QAT
// run or a calibration, from its weights and its runtime's scales and observers. The integer
// format's pure parts (point keys, which weights, quantizing one) are model/int8_model.cpp.
#include "ete/core/error.h"
#include "ete/model/int8_model.h"

namespace ete {

Int8Model make_int8_model(const QatSpec& spec, const ModelConfig& c, const HostParams& params,
                          const QatRuntime& qat) {
    check_int8_spec(spec, c);
    Int8Model m;
    m.spec = spec;
    for (int i = 0; i < params.size(); ++i) {
        const ParamSpec& s = params.specs()[size_t(i)];
        if (!int8_quantizes(spec, c, s)) continue;
        const std::vector<float> learned = qat.weight_scales(s.name);
        m.weights.emplace(s.name,
                          quantize_weight_int8(spec, params.param(i), s.shape[0], s.shape[1],
                                               learned.empty() ? nullptr : &learned));
    }
    if (int8_tied_head(spec, c)) {  // the embedding's values, on the head's grid
        const int e = params.find(ParamRole::TokenEmbed);
        const ParamSpec& s = params.specs()[size_t(e)];
        m.weights.emplace(kLmHeadName,
                          quantize_weight_int8(spec, params.param(e), s.shape[0], s.shape[1]));
    }
    if (spec.act_granularity != QatGranularity::Tensor) return m;  // dynamic: nothing frozen
    for (int l = 0; l <= c.num_layers; ++l)
        for (int s = 0; s < kQatSites; ++s) {
            const int site = l == c.num_layers ? kQatFinalNorm : s;
            if (!qat.site_on(site, l)) continue;
            const std::string key = qat_point_key(site, l, c.num_layers);
            ETE_CHECK(qat.point_observed(site, l),
                      "activation point {} was never observed (did the run end within "
                      "qat.warmup_steps, or calibrate on no batch?)",
                      key);
            m.act_scales[key] = qat.point_params(site, l);
            if (site == kQatFinalNorm) break;
        }
    return m;
}

}  // namespace ete
