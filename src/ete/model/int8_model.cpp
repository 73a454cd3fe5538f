// ete/model/int8_model.cpp
#include "ete/model/int8_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ete/core/error.h"
#include "ete/model/lora_spec.h"

namespace ete {

namespace {

constexpr const char* kSiteNames[kQatSites] = {
    "qkv_in", "o_in", "mlp_in", "down_in", "attn_out", "ffn_out", "residual_mid", "residual_out"};

bool chosen(const std::vector<ParamRole>& roles, ParamRole r) {
    return std::find(roles.begin(), roles.end(), r) != roles.end();
}

}  // namespace

std::string qat_point_key(int site, int layer, int layers) {
    if (site == kQatFinalNorm || layer == layers) return "final_norm";
    ETE_ASSERT(site >= 0 && site < kQatSites);
    return fmt::format("layers.{}.{}", layer, kSiteNames[site]);
}

bool parse_qat_point_key(const std::string& key, int layers, int* site, int* layer) {
    if (key == "final_norm") {
        *site = kQatFinalNorm;
        *layer = layers;
        return true;
    }
    int l = -1, n = 0;
    if (std::sscanf(key.c_str(), "layers.%d.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= layers)
        return false;
    const std::string name = key.substr(size_t(n));
    for (int s = 0; s < kQatSites; ++s)
        if (name == kSiteNames[s]) {
            *site = s;
            *layer = l;
            return true;
        }
    return false;
}

void check_int8_spec(const QatSpec& spec, const ModelConfig& c) {
    check_qat_spec(spec, c);
    ETE_CHECK(spec.has(QatPoint::Weight) && spec.has(QatPoint::LinearIn),
              "the integer model needs qat.points to include weight and linear_in (an integer "
              "GEMM quantizes both operands); this run has {}",
              qat_spec_to_json(spec)["points"].get<std::string>());
    const std::vector<ParamRole> roles = linear_roles(spec.linears, c.arch);
    using R = ParamRole;
    auto whole = [&](std::initializer_list<R> group, const char* names) {
        int n = 0;
        for (R r : group) n += chosen(roles, r);
        ETE_CHECK(n == 0 || n == int(group.size()),
                  "the integer model quantizes {} together (they read one input): qat.linears = "
                  "'{}' chooses only some of them",
                  names, qat_spec_to_json(spec)["linears"].get<std::string>());
    };
    if (!c.family().fused_tensors()) {
        whole({R::Q, R::K, R::V}, "q_proj, k_proj and v_proj");
        whole({R::Gate, R::Up}, "gate_proj and up_proj");
    }
}

bool int8_quantizes(const QatSpec& spec, const ModelConfig& c, const ParamSpec& s) {
    if (s.role == ParamRole::LmHead) return spec.quantizes_head();
    if (!param_is_decoder_linear(s) || s.layer < 0) return false;
    if (!spec.quantizes_layer(s.layer, c.num_layers)) return false;
    return chosen(linear_roles(spec.linears, c.arch), s.role);
}

bool int8_tied_head(const QatSpec& spec, const ModelConfig& c) {
    return spec.quantizes_head() && (c.family().always_tied || c.tie_word_embeddings);
}

Int8Tensor quantize_weight_int8(const QatSpec& spec, const float* w, int64_t rows, int64_t cols,
                                const std::vector<float>* scales) {
    Int8Tensor t;
    t.rows = rows;
    t.cols = cols;
    t.group = spec.weight_granularity == QatGranularity::Group ? spec.group_size : cols;
    ETE_CHECK(cols % t.group == 0, "qat.group_size = {} does not divide a weight's {} columns",
              t.group, cols);
    const int64_t per_row = cols / t.group;
    const QuantGrid g = spec.weight_grid();
    constexpr float inf = std::numeric_limits<float>::infinity();
    // Block ranges over finite values (the backend's min_max), one range for a per-tensor weight.
    std::vector<float> lo(size_t(rows * per_row), inf), hi(lo.size(), -inf);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
            const float v = w[r * cols + k];
            if (!std::isfinite(v)) continue;
            const size_t b = size_t(r * per_row + k / t.group);
            lo[b] = std::min(lo[b], v);
            hi[b] = std::max(hi[b], v);
        }
    if (spec.weight_granularity == QatGranularity::Tensor) {
        const float l = *std::min_element(lo.begin(), lo.end());
        const float h = *std::max_element(hi.begin(), hi.end());
        std::fill(lo.begin(), lo.end(), l);
        std::fill(hi.begin(), hi.end(), h);
    }
    t.scale.resize(lo.size());
    t.q.resize(size_t(rows * cols));
    for (size_t b = 0; b < lo.size(); ++b) {
        float z = 0;
        const bool empty = !(lo[b] <= hi[b]);
        quant_params(empty ? 0.0f : lo[b], empty ? 0.0f : hi[b], g, &t.scale[b], &z);
    }
    if (scales) {
        const bool one = spec.weight_granularity == QatGranularity::Tensor;
        ETE_CHECK(scales->size() == (one ? 1 : t.scale.size()),
                  "int8 model: {} scales for a weight of {} blocks", scales->size(),
                  t.scale.size());
        for (size_t b = 0; b < t.scale.size(); ++b) t.scale[b] = (*scales)[one ? 0 : b];
    }
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) {
            const float s = t.scale[size_t(r * per_row + k / t.group)];
            t.q[size_t(r * cols + k)] = int8_t(
                quantize_value(w[r * cols + k], 1.0f / s, 0.0f, float(g.qmin), float(g.qmax)));
        }
    return t;
}

}  // namespace ete
