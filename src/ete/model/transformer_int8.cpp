// ete/model/transformer_int8.cpp — the integer model in the Transformer (model/int8_model.h):
// which linears multiply integers, with which input scales.
#include "ete/model/transformer.h"

namespace ete {

// lin computes with the integers of the weights `names` (its rows, in order), reading site's
// input.
void Transformer::int8_add_linear(Linear& lin, const std::vector<std::string>& names,
                                  const Int8Model& m, int site, int l) {
    const std::string& first = names[0];
    if (!m.weights.count(first)) return;
    Int8Tensor all;
    for (const std::string& name : names) {
        const auto it = m.weights.find(name);
        ETE_CHECK(it != m.weights.end(),
                  "int8 model: '{}' is quantized but '{}' (fused with it) is not", first, name);
        const Int8Tensor& t = it->second;
        ETE_CHECK(all.rows == 0 || (t.cols == all.cols && t.group == all.group),
                  "int8 model: '{}' does not match '{}' (columns or group size)", name, first);
        all.cols = t.cols;
        all.group = t.group;
        all.rows += t.rows;
        all.q.insert(all.q.end(), t.q.begin(), t.q.end());
        all.scale.insert(all.scale.end(), t.scale.begin(), t.scale.end());
    }
    Int8Input input;
    input.grid = qat_->spec().act_grid();
    if (!input.per_token()) {
        ETE_CHECK(qat_->point_observed(site, l), "int8 model: the input of '{}' has no scale ({})",
                  first, qat_point_key(site, l, cfg_.num_layers));
        std::tie(input.scale, input.zero) = qat_->point_params(site, l);
    }
    int8_weights_.push_back(std::make_unique<Int8Weight>(be_, all.q, all.rows, all.cols, all.scale,
                                                         all.group, input, *int8_scratch_));
    lin.set_int8(int8_weights_.back().get());
}

void Transformer::enable_int8(const Int8Model& m) {
    ETE_CHECK(mp_.tp_size == 1 && mp_.layer_begin == 0 && mp_.layer_end == cfg_.num_layers,
              "int8 model: runs on one process (tp = pp = 1)");
    check_int8_spec(m.spec, cfg_);
    // The activation points, without fake-quantized weights: the integers replace them.
    QatSpec acts = m.spec;
    std::erase(acts.points, QatPoint::Weight);
    acts.learnable_scale = false;  // the weights' scales are in the integer weights
    enable_qat(acts);
    for (const auto& [key, sz] : m.act_scales) {
        int site = 0, l = 0;
        ETE_CHECK(parse_qat_point_key(key, cfg_.num_layers, &site, &l),
                  "int8 model: '{}' is not an activation point of a {}-layer model", key,
                  cfg_.num_layers);
        qat_->set_point_params(site, l, sz.first, sz.second);
    }
    qat_->set_inference();
    int8_scratch_ = std::make_unique<Int8Scratch>(be_);
    const bool split = !cfg_.family().fused_tensors();  // a tensor per member
    using R = ParamRole;
    for (int l = 0; l < cfg_.num_layers; ++l) {
        if (!m.spec.quantizes_layer(l, cfg_.num_layers)) continue;
        DecoderLayer& L = layers_[size_t(l)];
        auto at = [&](R r) { return params_.specs()[size_t(params_.find(r, l))].name; };
        auto group = [&](FusedLinear& f, std::vector<R> roles, int site) {
            if (f.size() == 1) {
                std::vector<std::string> names;
                for (R r : roles) names.push_back(at(r));
                int8_add_linear(f.part(0), names, m, site, l);
            } else {
                for (int k = 0; k < f.size(); ++k)
                    int8_add_linear(f.part(k), {at(roles[size_t(k)])}, m, site, l);
            }
        };
        group(L.qkv, split ? std::vector<R>{R::Q, R::K, R::V} : std::vector<R>{R::Qkv}, kQatLn1);
        int8_add_linear(L.o, {at(R::AttnOut)}, m, kQatAtt, l);
        group(L.fc, split ? std::vector<R>{R::Gate, R::Up} : std::vector<R>{R::Fc}, kQatLn2);
        int8_add_linear(L.proj, {at(R::Down)}, m, kQatAct, l);
    }
    if (m.spec.quantizes_head())
        int8_add_linear(head_, {kLmHeadName}, m, kQatFinalNorm, cfg_.num_layers);  // tied or not
    ETE_CHECK(!int8_weights_.empty(), "int8 model: no linear is quantized");
}

size_t Transformer::int8_weight_bytes() const {
    size_t bytes = 0;
    for (const auto& w : int8_weights_) bytes += w->bytes();
    return bytes;
}

}  // namespace ete
