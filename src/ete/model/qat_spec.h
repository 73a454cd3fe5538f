// ete/model/qat_spec.h — what quantization-aware training fake-quantizes (the [qat] config
// section; DESIGN.md §6, core/fake_quant.h).
//
// Points, by name (`qat.points`, comma-separated, several at once):
//   weight     the weights of the chosen linears (`qat.linears`: PEFT module names or
//              all-linear, and lm_head for the head, tied or not), on the symmetric grid,
//              per output channel, per tensor or per group of `group_size` input columns;
//   linear_in  the input of every chosen linear (the W·A scheme a real integer model needs);
//   attn_out   the attention block's output, after the output projection;
//   ffn_out    the MLP's output, after the down projection;
//   post_norm  the output of each norm (attention, MLP, and the final norm);
//   residual   the residual stream after each residual add;
// activations on the affine `act_bits` grid, per tensor from an observer, or per token
// (dynamic, torchao's int8 per-token asymmetric).
//
// learnable_scale (LSQ, Esser et al. 2020): the weights' scales are parameters, trained with the
// gradient of core/fake_quant.h's lsq_scale_slope times 1/√(elements per scale · qmax).
//
// Schedule: for steps < warmup_steps the observers watch and nothing is fake-quantized; from
// then on every point is; from freeze_step on (0 = never) the observers stop and the scales stay.
// Layers listed in skip_layers (indices; negative ones count from the end, so "0,-1" is the first
// and the last) are left in full precision.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ete/core/fake_quant.h"
#include "ete/model/config.h"
#include "ete/model/param_spec.h"
#include "ete/quant/observer.h"

namespace ete {

enum class QatPoint : uint8_t { Weight, LinearIn, AttnOut, FfnOut, PostNorm, Residual };
enum class QatGranularity : uint8_t { Tensor, Channel, Group, Token };

struct QatSpec {
    bool enabled = false;
    std::vector<QatPoint> points = {QatPoint::Weight, QatPoint::LinearIn};
    std::vector<std::string> linears = {"all-linear"};
    int weight_bits = 8, act_bits = 8;
    QatGranularity weight_granularity = QatGranularity::Channel;
    QatGranularity act_granularity = QatGranularity::Tensor;
    int group_size = 128;
    ObserverKind observer = ObserverKind::MovingAverage;
    float averaging_constant = 0.01f;
    int64_t warmup_steps = 0, freeze_step = 0;
    std::vector<int> skip_layers;  // as written (negative = from the end)
    // LSQ: each quantized weight's scales are trainable parameters (model/param_spec.h), set
    // from the weight's range at the first fake-quantized step, then trained by the optimizer.
    bool learnable_scale = false;

    bool has(QatPoint p) const;
    // qat.linears lists lm_head (all-linear does not include it, as in PEFT): the LM head's
    // weight is quantized at `weight`, its input (the final norm's output) at `linear_in`.
    bool quantizes_head() const;
    // Whether layer l (0-based) of n is quantized.
    bool quantizes_layer(int l, int n) const;
    QuantGrid weight_grid() const { return QuantGrid::of(weight_bits, QParamRule::Symmetric); }
    QuantGrid act_grid() const {
        return QuantGrid::of(act_bits, act_granularity == QatGranularity::Token
                                           ? QParamRule::PerToken
                                           : QParamRule::Affine);
    }
    // The phase of a step (0-based): fake quantization on, observers on.
    bool fake_quant_at(int64_t step) const { return enabled && step >= warmup_steps; }
    bool observe_at(int64_t step) const {
        return enabled && (freeze_step <= 0 || step < freeze_step);
    }
};

std::string qat_point_name(QatPoint p);
std::string qat_granularity_name(QatGranularity g);

// From the config's strings; each throws naming its `qat.*` key and what was expected.
std::vector<QatPoint> qat_points_from_string(const std::string& s);
QatGranularity qat_granularity_from_name(const std::string& s, const char* key);
std::vector<int> qat_layers_from_string(const std::string& s);

// Throws ete::Error naming the `qat.*` key unless the spec is valid for config c.
void check_qat_spec(const QatSpec& s, const ModelConfig& c);

// The spec as JSON with the config's key names and strings (final/qat.json, the int8 model's
// quantization_config), and back; `what` names the file in errors.
nlohmann::json qat_spec_to_json(const QatSpec& s);
QatSpec qat_spec_from_json(const nlohmann::json& j, const std::string& what);

}  // namespace ete
