// tests/model/qat_spec_test.cpp — the [qat] spec: point and granularity names, layer lists with
// negative indices, the warm-up / freeze schedule, grids, and every validation error naming its
// key.
#include <gtest/gtest.h>

#include "ete/model/qat_runtime.h"
#include "ete/model/qat_spec.h"
#include "test_util.h"

namespace ete {
namespace {

ModelConfig llama() {
    ModelConfig c;
    c.arch = Arch::Llama;
    c.vocab_size = 64;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_layers = 4;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.max_position_embeddings = 32;
    return c;
}

TEST(QatSpec, PointsGranularitiesAndLayers) {
    EXPECT_EQ(qat_points_from_string(" attn_out,ffn_out ,attn_out,, residual"),
              (std::vector<QatPoint>{QatPoint::AttnOut, QatPoint::FfnOut, QatPoint::Residual}));
    EXPECT_EQ(qat_granularity_from_name("group", "qat.weight_granularity"), QatGranularity::Group);
    EXPECT_EQ(qat_layers_from_string("0, -1"), (std::vector<int>{0, -1}));
    QatSpec s;
    s.skip_layers = {0, -1};
    EXPECT_FALSE(s.quantizes_layer(0, 4));
    EXPECT_TRUE(s.quantizes_layer(1, 4));
    EXPECT_TRUE(s.quantizes_layer(2, 4));
    EXPECT_FALSE(s.quantizes_layer(3, 4));
    EXPECT_TRUE(s.has(QatPoint::Weight) && s.has(QatPoint::LinearIn));  // the W·A default
    EXPECT_FALSE(s.has(QatPoint::Residual));
}

TEST(QatSpec, ScheduleAndGrids) {
    QatSpec s;
    s.enabled = true;
    s.warmup_steps = 3;
    s.freeze_step = 6;
    EXPECT_FALSE(s.fake_quant_at(2));
    EXPECT_TRUE(s.fake_quant_at(3));
    EXPECT_TRUE(s.observe_at(5));
    EXPECT_FALSE(s.observe_at(6));
    s.weight_bits = 4;
    EXPECT_EQ(s.weight_grid().qmin, -7);
    EXPECT_EQ(s.act_grid().qmin, -128);
    EXPECT_EQ(s.act_grid().rule, QParamRule::Affine);
    s.act_granularity = QatGranularity::Token;
    EXPECT_EQ(s.act_grid().rule, QParamRule::PerToken);
    s.enabled = false;
    EXPECT_FALSE(s.fake_quant_at(10));
}

TEST(QatSpec, BadValuesNameTheirKey) {
    EXPECT_EQ(error_of([] { qat_points_from_string("weight,mlp_out"); }),
              "qat.points: 'mlp_out' is not a point (expected weight, linear_in, attn_out, "
              "ffn_out, post_norm or residual)");
    EXPECT_EQ(error_of([] { qat_points_from_string(" , "); }),
              "qat.points is empty: expected some of weight, linear_in, attn_out, ffn_out, "
              "post_norm, residual");
    EXPECT_EQ(error_of([] { qat_granularity_from_name("row", "qat.act_granularity"); }),
              "qat.act_granularity = 'row': expected tensor, channel, group or token");
    EXPECT_EQ(error_of([] { qat_layers_from_string("0,last"); }),
              "qat.skip_layers: 'last' is not a layer index (expected integers such as 0,-1)");
    const ModelConfig c = llama();
    auto check = [&](auto edit) {
        QatSpec s;
        s.enabled = true;
        edit(s);
        return error_of([&] { check_qat_spec(s, c); });
    };
    EXPECT_EQ(check([](QatSpec&) {}), "<no error>");
    EXPECT_EQ(check([](QatSpec& s) { s.weight_bits = 6; }), "qat.weight_bits = 6: expected 4 or 8");
    EXPECT_EQ(check([](QatSpec& s) { s.act_granularity = QatGranularity::Channel; }),
              "qat.act_granularity = channel: expected tensor or token");
    EXPECT_EQ(check([](QatSpec& s) { s.weight_granularity = QatGranularity::Token; }),
              "qat.weight_granularity = token: expected channel, tensor or group (per token is "
              "for activations)");
    EXPECT_EQ(check([](QatSpec& s) { s.averaging_constant = 0; }),
              "qat.averaging_constant = 0: expected in (0, 1]");
    EXPECT_EQ(check([](QatSpec& s) {
                  s.warmup_steps = 5;
                  s.freeze_step = 5;
              }),
              "qat.freeze_step = 5: expected 0 (never) or a step after qat.warmup_steps = 5");
    EXPECT_EQ(check([](QatSpec& s) { s.skip_layers = {4}; }),
              "qat.skip_layers: 4 is not a layer of a 4-layer model (expected -4..3)");
    EXPECT_EQ(check([](QatSpec& s) { s.linears = {"c_fc"}; }),
              "qat.linears: 'c_fc' is not a linear of a llama model (expected q_proj, k_proj, "
              "v_proj, o_proj, gate_proj, up_proj, down_proj or all-linear)");
    EXPECT_EQ(check([](QatSpec& s) {
                  s.weight_granularity = QatGranularity::Group;
                  s.group_size = 48;
              }),
              "qat.group_size = 48: expected a divisor of every linear's input width (64 is not "
              "a multiple)");
}

// linear_in quantizes the inputs of the linears qat.linears chooses, and only those; post_norm
// every norm's output; skipped layers nothing (the final norm is not a layer); each output point
// its own sites.
TEST(QatRuntime, SitesFollowThePointsTheLinearsAndTheSkippedLayers) {
    auto be = make_ref_backend();
    QatSpec s;
    s.enabled = true;
    s.points = {QatPoint::LinearIn};
    s.linears = {"down_proj", "o_proj"};
    QatRuntime q(s, *be, Arch::Llama, 4, nullptr);
    EXPECT_FALSE(q.site_on(kQatLn1, 0));
    EXPECT_TRUE(q.site_on(kQatAtt, 0));
    EXPECT_FALSE(q.site_on(kQatLn2, 1));
    EXPECT_TRUE(q.site_on(kQatAct, 3));
    EXPECT_FALSE(q.site_on(kQatFinalNorm, 4));
    s.points.push_back(QatPoint::PostNorm);
    s.skip_layers = {-1};
    QatRuntime p(s, *be, Arch::Llama, 4, nullptr);
    EXPECT_TRUE(p.site_on(kQatLn1, 0));
    EXPECT_TRUE(p.site_on(kQatLn2, 2));
    EXPECT_FALSE(p.site_on(kQatAct, 3));
    EXPECT_TRUE(p.site_on(kQatFinalNorm, 4));
    s.points = {QatPoint::Residual, QatPoint::FfnOut};
    s.skip_layers = {};
    QatRuntime r(s, *be, Arch::Llama, 4, nullptr);
    EXPECT_TRUE(r.site_on(kQatResidMid, 0) && r.site_on(kQatResidOut, 3));
    EXPECT_TRUE(r.site_on(kQatFfnOut, 1));
    EXPECT_FALSE(r.site_on(kQatAttnOut, 1) || r.site_on(kQatLn1, 1) || r.site_on(kQatAct, 1));
}

}  // namespace
}  // namespace ete
