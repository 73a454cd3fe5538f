// ete/model/qat_spec.cpp
#include "ete/model/qat_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "ete/core/error.h"
#include "ete/model/lora_spec.h"

namespace ete {

namespace {

const std::vector<std::pair<QatPoint, const char*>>& point_names() {
    static const std::vector<std::pair<QatPoint, const char*>> names = {
        {QatPoint::Weight, "weight"},      {QatPoint::LinearIn, "linear_in"},
        {QatPoint::AttnOut, "attn_out"},   {QatPoint::FfnOut, "ffn_out"},
        {QatPoint::PostNorm, "post_norm"}, {QatPoint::Residual, "residual"}};
    return names;
}

}  // namespace

bool QatSpec::has(QatPoint p) const {
    return std::find(points.begin(), points.end(), p) != points.end();
}

bool QatSpec::quantizes_head() const {
    return std::find(linears.begin(), linears.end(), "lm_head") != linears.end();
}

bool QatSpec::quantizes_layer(int l, int n) const {
    for (int s : skip_layers)
        if ((s < 0 ? n + s : s) == l) return false;
    return true;
}

std::string qat_point_name(QatPoint p) {
    for (const auto& [point, name] : point_names())
        if (point == p) return name;
    ETE_ASSERT(false);
    return {};
}

std::string qat_granularity_name(QatGranularity g) {
    switch (g) {
        case QatGranularity::Tensor:
            return "tensor";
        case QatGranularity::Channel:
            return "channel";
        case QatGranularity::Group:
            return "group";
        case QatGranularity::Token:
            return "token";
    }
    return {};
}

std::vector<QatPoint> qat_points_from_string(const std::string& s) {
    std::vector<QatPoint> out;
    for (const std::string& item : split_comma_list(s)) {
        auto it = std::find_if(point_names().begin(), point_names().end(),
                               [&](const auto& p) { return item == p.second; });
        ETE_CHECK(it != point_names().end(),
                  "qat.points: '{}' is not a point (expected weight, linear_in, attn_out, "
                  "ffn_out, post_norm or residual)",
                  item);
        if (std::find(out.begin(), out.end(), it->first) == out.end()) out.push_back(it->first);
    }
    ETE_CHECK(!out.empty(),
              "qat.points is empty: expected some of weight, linear_in, attn_out, ffn_out, "
              "post_norm, residual");
    return out;
}

QatGranularity qat_granularity_from_name(const std::string& s, const char* key) {
    for (QatGranularity g : {QatGranularity::Tensor, QatGranularity::Channel, QatGranularity::Group,
                             QatGranularity::Token})
        if (s == qat_granularity_name(g)) return g;
    throw_error(fmt::format("{} = '{}': expected tensor, channel, group or token", key, s));
}

std::vector<int> qat_layers_from_string(const std::string& s) {
    std::vector<int> out;
    for (const std::string& item : split_comma_list(s)) {
        int v = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        ETE_CHECK(ec == std::errc() && end == item.data() + item.size(),
                  "qat.skip_layers: '{}' is not a layer index (expected integers such as 0,-1)",
                  item);
        out.push_back(v);
    }
    return out;
}

void check_qat_spec(const QatSpec& s, const ModelConfig& c) {
    if (!s.enabled) return;
    ETE_CHECK(s.weight_bits == 4 || s.weight_bits == 8, "qat.weight_bits = {}: expected 4 or 8",
              s.weight_bits);
    ETE_CHECK(s.act_bits == 8, "qat.act_bits = {}: expected 8", s.act_bits);
    ETE_CHECK(s.weight_granularity != QatGranularity::Token,
              "qat.weight_granularity = token: expected channel, tensor or group (per token is "
              "for activations)");
    ETE_CHECK(
        s.act_granularity == QatGranularity::Tensor || s.act_granularity == QatGranularity::Token,
        "qat.act_granularity = {}: expected tensor or token",
        qat_granularity_name(s.act_granularity));
    ETE_CHECK(s.group_size >= 8 && s.group_size % 8 == 0,
              "qat.group_size = {}: expected a multiple of 8", s.group_size);
    ETE_CHECK(std::isfinite(s.averaging_constant) && s.averaging_constant > 0 &&
                  s.averaging_constant <= 1,
              "qat.averaging_constant = {}: expected in (0, 1]", s.averaging_constant);
    ETE_CHECK(s.warmup_steps >= 0, "qat.warmup_steps = {}: expected >= 0", s.warmup_steps);
    ETE_CHECK(s.freeze_step >= 0 && (s.freeze_step == 0 || s.freeze_step > s.warmup_steps),
              "qat.freeze_step = {}: expected 0 (never) or a step after qat.warmup_steps = {}",
              s.freeze_step, s.warmup_steps);
    ETE_CHECK(!s.learnable_scale || s.has(QatPoint::Weight),
              "qat.learnable_scale = true: expected qat.points to include weight (the scales "
              "it learns are the weights')");
    std::vector<std::string> decoder = s.linears;
    std::erase(decoder, "lm_head");
    if (!decoder.empty() || s.linears.empty()) check_linear_names(decoder, c.arch, "qat.linears");
    // A tied head's gradient also holds the embedding lookup's, which the STE mask of learned
    // scales must not touch (with range scales every weight is inside its grid: no mask).
    ETE_CHECK(!s.quantizes_head() || !s.learnable_scale ||
                  (!c.family().always_tied && !c.tie_word_embeddings),
              "qat.linears = lm_head with qat.learnable_scale: the head is the token embedding "
              "here (tie_word_embeddings), whose gradient also holds the embedding lookup's; "
              "learned scales need an untied head");
    for (int l : s.skip_layers)
        ETE_CHECK(l >= -c.num_layers && l < c.num_layers,
                  "qat.skip_layers: {} is not a layer of a {}-layer model (expected {}..{})", l,
                  c.num_layers, -c.num_layers, c.num_layers - 1);
    if (s.weight_granularity == QatGranularity::Group && s.has(QatPoint::Weight)) {
        for (int64_t in : {int64_t(c.hidden_size), int64_t(c.intermediate_size)})
            ETE_CHECK(in % s.group_size == 0,
                      "qat.group_size = {}: expected a divisor of every linear's input width "
                      "({} is not a multiple)",
                      s.group_size, in);
    }
}

nlohmann::json qat_spec_to_json(const QatSpec& s) {
    std::string points, linears, skip;
    for (QatPoint p : s.points) points += (points.empty() ? "" : ",") + qat_point_name(p);
    for (const std::string& l : s.linears) linears += (linears.empty() ? "" : ",") + l;
    for (int l : s.skip_layers) skip += (skip.empty() ? "" : ",") + std::to_string(l);
    return {{"points", points},
            {"linears", linears},
            {"weight_bits", s.weight_bits},
            {"act_bits", s.act_bits},
            {"weight_granularity", qat_granularity_name(s.weight_granularity)},
            {"act_granularity", qat_granularity_name(s.act_granularity)},
            {"group_size", s.group_size},
            {"observer", s.observer == ObserverKind::MinMax ? "minmax" : "moving_average"},
            {"averaging_constant", s.averaging_constant},
            {"warmup_steps", s.warmup_steps},
            {"freeze_step", s.freeze_step},
            {"skip_layers", skip},
            {"learnable_scale", s.learnable_scale}};
}

QatSpec qat_spec_from_json(const nlohmann::json& j, const std::string& what) {
    ETE_CHECK(j.is_object(), "{}: the QAT spec is not a JSON object", what);
    auto get = [&](const char* key) -> const nlohmann::json& {
        ETE_CHECK(j.contains(key), "the QAT spec has no \"{}\"", key);
        return j.at(key);
    };
    try {
        QatSpec s;
        s.enabled = true;
        s.points = qat_points_from_string(get("points").get<std::string>());
        s.linears = split_comma_list(get("linears").get<std::string>());
        s.weight_bits = get("weight_bits").get<int>();
        s.act_bits = get("act_bits").get<int>();
        s.weight_granularity = qat_granularity_from_name(
            get("weight_granularity").get<std::string>(), "qat.weight_granularity");
        s.act_granularity = qat_granularity_from_name(get("act_granularity").get<std::string>(),
                                                      "qat.act_granularity");
        s.group_size = get("group_size").get<int>();
        s.observer = observer_kind_from_name(get("observer").get<std::string>(), "qat.observer");
        s.averaging_constant = get("averaging_constant").get<float>();
        s.warmup_steps = get("warmup_steps").get<int64_t>();
        s.freeze_step = get("freeze_step").get<int64_t>();
        s.skip_layers = qat_layers_from_string(get("skip_layers").get<std::string>());
        s.learnable_scale = j.value("learnable_scale", false);  // absent before LSQ
        return s;
    } catch (const nlohmann::json::exception& e) {
        throw_error(fmt::format("{}: a QAT spec value has the wrong type ({})", what, e.what()));
    } catch (const Error& e) {
        throw_error(fmt::format("{}: {}", what, e.what()));
    }
}

}  // namespace ete
