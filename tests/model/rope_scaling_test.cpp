// tests/model/rope_scaling_test.cpp — yarn and longrope against Hugging Face's formulas
// (tests/golden/rope_scaling.safetensors, written by tools/gen_model_goldens.py), the Phi-3
// config keys, and the fused qkv_proj's tensor-parallel split.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "ete/io/safetensors.h"
#include "ete/model/config.h"
#include "ete/model/config_rope.h"
#include "ete/model/shard.h"
#include "numerics.h"
#include "test_util.h"

namespace ete {
namespace {

using json = nlohmann::json;

// Each golden is HF's f32 chain: the exponent 2j/R rounded (its error, times ln θ, moves
// θ^(2j/R) by |ln θ|·u relatively), pow, then up to six more rounded operations (the factor,
// the ramp's two terms and their sum, the division). ETE works in double and rounds nothing
// but the result: (|ln θ| + 8)·u relative. The attention factor is double arithmetic on both
// sides, stored as f32 in the golden: one rounding.
TEST(RopeScaling, FrequenciesMatchHuggingFace) {
    const SafetensorsFile f = SafetensorsFile::open(std::string(ETE_SOURCE_DIR) +
                                                    "/tests/golden/rope_scaling.safetensors");
    const json cases = json::parse(f.metadata().at("cases"));
    ASSERT_EQ(cases.size(), 5u);
    for (const json& c : cases) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        const RopeScaling sc =
            parse_rope_scaling(c["rope"], c["max_position_embeddings"], c["original"], "golden");
        const double theta = c["theta"];
        const RopeFrequencies got = rope_frequencies(c["rotary_dim"], theta, sc, c["seq_len"]);
        Tensor want = f.to_f32(name + ".inv_freq");
        ASSERT_EQ(int64_t(got.inv_freq.size()), want.numel());
        const double bound = (std::log(theta) + 8) * testing::kUnitF32;
        for (int64_t j = 0; j < want.numel(); ++j)
            EXPECT_NEAR(got.inv_freq[size_t(j)], want.f32()[j], bound * want.f32()[j]) << j;
        const double a = f.to_f32(name + ".attention_factor").f32()[0];
        EXPECT_NEAR(got.attention_factor, a, testing::kUnitF32 * a);
        EXPECT_NE(got.attention_factor, 1.0);  // every case scales its tables
    }
}

// The short factors up to the original context, the long ones past it.
TEST(RopeScaling, LongropeSwitchesPastTheOriginalContext) {
    RopeScaling sc;
    sc.type = "longrope";
    sc.original_max_position_embeddings = 16;
    sc.factor = 4;
    sc.short_factor = {1.0, 2.0};
    sc.long_factor = {3.0, 5.0};
    for (int T : {16, 17}) {
        const RopeFrequencies rf = rope_frequencies(4, 100.0, sc, T);
        const std::vector<double>& ext = T > 16 ? sc.long_factor : sc.short_factor;
        EXPECT_DOUBLE_EQ(rf.inv_freq[0], 1.0 / ext[0]);
        EXPECT_DOUBLE_EQ(rf.inv_freq[1], 0.1 / ext[1]);  // 100^(-2/4)
        EXPECT_DOUBLE_EQ(rf.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(16.0)));
    }
    // cos/sin carry the factor: (cos, sin) at t = 0 is (a, 0), and a² = cos² + sin² everywhere.
    std::vector<float> cos(3 * 2), sin(cos.size());
    rope_tables(cos.data(), sin.data(), 3, 4, 100.0, sc);
    const double a = std::sqrt(1.5);
    EXPECT_FLOAT_EQ(cos[0], float(a));
    EXPECT_EQ(sin[0], 0.0f);
    // Each table entry is libm's cosf/sinf (<= 1 ulp: 2u) times the f32 factor (u, and a's own
    // rounding u): 4u relative, so the sum of squares is within 2 · 4u · a² = 8u · 1.5 ≈ 7.2e-7.
    for (size_t i = 0; i < cos.size(); ++i)
        EXPECT_NEAR(double(cos[i]) * cos[i] + double(sin[i]) * sin[i], a * a,
                    8 * testing::kUnitF32 * a * a);
}

// Phi-4-mini's config.json, cut to a small model: fused tensors, 3/4 of each head rotated with
// LongRoPE, a window, a tied head.
json phi4_mini() {
    json j = {{"architectures", {"Phi3ForCausalLM"}},
              {"model_type", "phi3"},
              {"vocab_size", 200},
              {"hidden_size", 96},
              {"intermediate_size", 160},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 6},
              {"num_key_value_heads", 2},
              {"hidden_act", "silu"},
              {"max_position_embeddings", 131072},
              {"original_max_position_embeddings", 4096},
              {"partial_rotary_factor", 0.75},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 10000.0},
              {"sliding_window", 262144},
              {"tie_word_embeddings", true},
              {"resid_pdrop", 0.0},
              {"embd_pdrop", 0.0},
              {"attention_dropout", 0.0}};
    json shorts = json::array(), longs = json::array();
    for (int k = 0; k < 6; ++k) {  // (16 · 0.75) / 2 pairs
        shorts.push_back(1.0 + 0.05 * k);
        longs.push_back(1.0 + 3.0 * k);
    }
    j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}};
    return j;
}

TEST(HfConfig, Phi3ReadsPartialRotaryAndLongrope) {
    const ModelConfig c = config_from_hf_json(phi4_mini(), "phi4.json");
    EXPECT_EQ(c.arch, Arch::Phi3);
    EXPECT_EQ(c.D(), 16);
    EXPECT_EQ(c.rotary_dim(), 12);
    EXPECT_EQ(c.rope_scaling.type, "longrope");
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
    EXPECT_EQ(c.rope_scaling.factor, 32.0);  // 131072 / 4096
    EXPECT_EQ(c.rope_scaling.long_factor.size(), 6u);
    EXPECT_EQ(c.sliding_window, 262144);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.has_qkv_bias() || c.has_o_bias() || c.has_mlp_bias());
    // Saved as Phi-3 saves it: rope_scaling with exactly its three keys, the original context
    // top-level; and read back the same.
    const json out = config_to_hf_json(c);
    EXPECT_EQ(out["model_type"], "phi3");
    EXPECT_EQ(out["architectures"][0], "Phi3ForCausalLM");
    EXPECT_EQ(out["rope_scaling"].size(), 3u) << out["rope_scaling"].dump();
    EXPECT_EQ(out["rope_scaling"]["type"], "longrope");
    EXPECT_EQ(out["original_max_position_embeddings"], 4096);
    EXPECT_EQ(out["partial_rotary_factor"], 0.75);
    const ModelConfig back = config_from_hf_json(out, "saved.json");
    EXPECT_EQ(back.rope_scaling, c.rope_scaling);
    EXPECT_EQ(back.partial_rotary_factor, c.partial_rotary_factor);
    EXPECT_EQ(back.sliding_window, c.sliding_window);
    // The tensors: one qkv_proj (q | k | v rows) and one gate_up_proj per layer.
    const std::vector<ParamSpec> specs = param_specs(c);
    EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.qkv_proj.weight");
    EXPECT_EQ(specs[2].shape, (Shape{(6 + 2 * 2) * 16, 96}));
    EXPECT_EQ(specs[5].name, "model.layers.0.mlp.gate_up_proj.weight");
    EXPECT_EQ(specs[5].shape, (Shape{2 * 160, 96}));
}

TEST(HfConfig, Phi3ErrorsNameTheKey) {
    json j = phi4_mini();
    j["resid_pdrop"] = 0.1;
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "p.json"); }),
              "p.json: resid_pdrop = 0.1 is not supported (expected 0: ETE has no dropout)");
    j = phi4_mini();
    j["rope_scaling"]["short_factor"].erase(0);
    EXPECT_EQ(error_of([&] { config_from_hf_json(j, "p.json"); }),
              "rope_scaling longrope: short_factor has 5 and long_factor 6 entries, expected 6 "
              "each (rotary dims / 2)");
    j = phi4_mini();
    j["partial_rotary_factor"] = 0.7;  // int(16 · 0.7) = 11: odd
    EXPECT_NE(error_of([&] {
                  config_from_hf_json(j, "p.json");
              }).find("partial_rotary_factor = 0.7: expected (0, 1] leaving an even rotary"),
              std::string::npos);
    j = phi4_mini();
    j["rope_scaling"]["long_factor"][2] = -1;
    EXPECT_NE(error_of([&] {
                  config_from_hf_json(j, "p.json");
              }).find("long_factor holds -1: expected finite numbers > 0"),
              std::string::npos);
    // tp 4 would replicate a kv head beside this rank's q rows inside one tensor.
    const ModelConfig c = config_from_hf_json(phi4_mini(), "p.json");
    ModelParallel mp;
    mp.tp_size = 6;
    EXPECT_NE(error_of([&] {
                  (void)mp.resolved(c);
              }).find("phi3: parallel.tp = 6 exceeds model.num_kv_heads = 2"),
              std::string::npos);
}

// Qwen2.5's yarn: read with HF's defaults, written back with the same numbers.
TEST(HfConfig, YarnRoundTrips) {
    json j = {{"model_type", "qwen2"},
              {"hidden_size", 64},
              {"intermediate_size", 96},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"vocab_size", 100},
              {"max_position_embeddings", 131072},
              {"rope_theta", 1000000.0},
              {"use_sliding_window", false},
              {"rope_scaling",
               {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}};
    const ModelConfig c = config_from_hf_json(j, "q.json");
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
    EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
    EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
    EXPECT_TRUE(c.rope_scaling.truncate);
    const ModelConfig back = config_from_hf_json(config_to_hf_json(c), "saved.json");
    EXPECT_EQ(back.rope_scaling, c.rope_scaling);
    // 0.1 ln 4 + 1: YaRN's attention factor
    EXPECT_DOUBLE_EQ(
        rope_frequencies(c.rotary_dim(), c.rope_theta, c.rope_scaling, 8).attention_factor,
        0.1 * std::log(4.0) + 1);
}

// q | k | v with H = 4, KV = 2 (one row per head): each rank holds its q heads, then its k head
// and v head.
TEST(ShardRule, UnequalGroupsSplitPerGroup) {
    ParamSpec s;
    s.shard = ShardRule{0, 3, false, 2, 2};
    s.global_shape = {8, 1};
    s.shape = shard_shape(s.shard, s.global_shape, 2);
    EXPECT_EQ(s.shape, (Shape{4, 1}));
    const std::vector<float> global = {0, 1, 2, 3, 10, 11, 20, 21};  // q0..q3 k0 k1 v0 v1
    std::vector<float> local(4), back(8, -1);
    shard_from_global(s, 0, 2, global.data(), local.data());
    EXPECT_EQ(local, (std::vector<float>{0, 1, 10, 20}));
    shard_to_global(s, 0, 2, local.data(), back.data());
    shard_from_global(s, 1, 2, global.data(), local.data());
    EXPECT_EQ(local, (std::vector<float>{2, 3, 11, 21}));
    shard_to_global(s, 1, 2, local.data(), back.data());
    EXPECT_EQ(back, global);
}

}  // namespace
}  // namespace ete
