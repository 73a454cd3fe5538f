// tests/model/lora_golden_test.cpp — LoRA and QLoRA models against PyTorch goldens.
//
// tests/golden/lora_*.safetensors are written by tools/gen_lora_goldens.py: the plain-torch
// Llama / GPT-2 of gen_model_goldens.py with PEFT-style adapters, over an f32 base or over
// dequant(NF4(base)) quantized by gen_nf4_goldens.py's independent bitsandbytes implementation,
// in float64. ETE quantizes the same f32 base itself (ParamStore::upload), so the comparison
// covers the quantizer, the NF4 GEMMs, the adapters and their gradients. Also: only adapters are
// trainable, and an adapter with B = 0 leaves the base model's output unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ete/io/safetensors.h"
#include "ete/model/nf4_shard.h"
#include "ete/model/shard.h"
#include "ete/model/transformer.h"
#include "numerics.h"
#include "test_util.h"

namespace ete {
namespace lora_golden_test {

using json = nlohmann::json;

// max |a - b| / max |b| over a tensor.
double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        err = std::max(err, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return scale > 0 ? err / scale : err;
}

// The chains of reductions of a LoRA model (numerics.h): the base model's, plus the adapter's r
// terms on each of the 4 projections along a layer's chain (q|k|v, o, the MLP's in and out) and,
// over an NF4 base, 2 roundings' worth for its absmax, which ETE computes in double and torch in
// float32 (an ulp apart at some codes).
struct Chains {
    double fwd, all;
};
Chains lora_chains(const ModelConfig& c, const LoraSpec& s, int B, int T) {
    const int64_t L = c.num_layers, C = c.hidden_size, D = c.D(), F = c.intermediate_size;
    const double extra = double(L * 4 * (s.r + (s.nf4() ? 2 : 0)));
    return {testing::decoder_forward_chain(L, C, D, T, F) + extra,
            testing::decoder_chain(L, C, D, T, F, c.vocab_size, int64_t(B) * T) + 2 * extra};
}

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
    Tensor t = f.to_f32(name);
    return std::vector<float>(t.f32(), t.f32() + t.numel());
}

LoraSpec spec_from(const json& j) {
    LoraSpec s;
    s.enabled = true;
    s.r = j.at("r");
    s.alpha = j.at("alpha");
    s.rslora = j.at("rslora");
    s.targets = j.at("targets").get<std::vector<std::string>>();
    s.base_format = j.at("base_format");
    s.nf4_block = j.at("nf4_block");
    return s;
}

// Every parameter of the model from the golden: base tensors from HF layout, adapters as is.
void load(ParamStore& ps, const SafetensorsFile& f) {
    for (int i = 0; i < ps.size(); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        std::vector<float> hf = read_f32(f, s.name), v(hf.size());
        param_from_hf(s, hf.data(), v.data());
        ps.upload(i, v.data());
    }
}

struct Case {
    std::string variant, backend;
};

class LoraGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LoraGolden, LogitsLossAndAdapterGradients) {
    const Case c = GetParam();
    const auto f = SafetensorsFile::open(std::string(ETE_SOURCE_DIR) + "/tests/golden/" +
                                         c.variant + ".safetensors");
    const ModelConfig cfg = config_from_hf_json(json::parse(f.metadata().at("config")), c.variant);
    const LoraSpec spec = spec_from(json::parse(f.metadata().at("lora")));
    auto be = make_backend(c.backend);
    Transformer m(cfg, *be, {}, DType::F32, spec);
    ParamStore& ps = m.params();
    int64_t adapters = 0;
    for (int i = 0; i < ps.size(); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        const bool lora = s.role == ParamRole::LoraA || s.role == ParamRole::LoraB;
        EXPECT_EQ(ps.trainable(i), lora) << s.name;
        EXPECT_EQ(ps.is_nf4(i),
                  spec.nf4() && s.kind == ParamKind::Matrix && !lora && s.role != ParamRole::LmHead)
            << s.name;
        if (lora) adapters += ps.numel(i);
    }
    EXPECT_EQ(ps.numel(), adapters);  // the flat trainable buffers hold the adapters only
    load(ps, f);

    Tensor in = f.to_tensor("inputs"), tg = f.to_tensor("targets");
    const int B = int(in.dim(0)), T = int(in.dim(1));
    std::vector<int32_t> inputs(in.i32(), in.i32() + in.numel());
    std::vector<int32_t> targets(tg.i32(), tg.i32() + tg.numel());
    const int n = int(
        std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoreIndex; }));
    m.setup(B, T);
    // The golden is float64 maths on the same f32 values (and the same f32 dequant(NF4) base),
    // rounded once to f32 (u); ETE rounds along the model's chains (lora_chains), within
    // gamma_prob of them, as in golden_test.cpp: the loss at the end of the forward chain and the
    // log-sum-exp (1.2e-5 for the NF4 Llama); the logits against the largest, the head's C
    // products cancelling to ~1/√C (9.4e-5); an adapter's gradient against its largest, its
    // B·T per-token terms likewise (6.4e-5). A wrong NF4 code or block is off by ~1e-2.
    const Chains chain = lora_chains(cfg, spec, B, T);
    const double u = testing::kUnitF32;
    std::vector<float> logits(size_t(B * T * cfg.vocab_size));
    m.forward_logits(inputs.data(), B, T, logits.data());
    EXPECT_LT(rel_max_err(logits, read_f32(f, "logits")),
              (testing::gamma_prob(chain.fwd) + u) * std::sqrt(double(cfg.hidden_size)));
    ps.zero_grads();
    const double loss =
        m.forward_backward(inputs.data(), targets.data(), B, T, 1.0f / float(n)) / n;
    const double want = read_f32(f, "loss")[0];
    EXPECT_LT(std::fabs(loss - want) / want, testing::gamma_prob(chain.fwd + cfg.vocab_size) + u);
    for (int i = 0; i < ps.size(); ++i) {
        if (!ps.trainable(i)) continue;
        const std::string& name = ps.specs()[size_t(i)].name;
        const double e = rel_max_err(ps.download_grad(i), read_f32(f, "grad." + name));
        EXPECT_LT(e, (testing::gamma_prob(chain.all) + u) * std::sqrt(double(B * T))) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LoraGolden,
    ::testing::Values(Case{"lora_llama_nf4", "ref"}, Case{"lora_llama_nf4", "cpu"},
                      Case{"lora_llama_f32", "cpu"}, Case{"lora_gpt2_nf4", "ref"},
                      Case{"lora_gpt2_nf4", "cpu"}, Case{"lora_gpt2_nf4", "guarded"}),
    [](const auto& info) { return info.param.variant + "_" + info.param.backend; });

// The f32 Llama golden (its base weights, config and LoRA spec), adapters on every linear.
struct LlamaGolden {
    SafetensorsFile f = SafetensorsFile::open(std::string(ETE_SOURCE_DIR) +
                                              "/tests/golden/lora_llama_f32.safetensors");
    ModelConfig cfg = config_from_hf_json(json::parse(f.metadata().at("config")), "cfg");
    LoraSpec spec = all_linear(spec_from(json::parse(f.metadata().at("lora"))));

    static LoraSpec all_linear(LoraSpec s) {
        s.targets = {"all-linear"};
        return s;
    }
};

TEST(LoraModel, ZeroBLeavesTheBaseModelUnchanged) {
    const LlamaGolden g;
    const SafetensorsFile& f = g.f;
    const ModelConfig& cfg = g.cfg;
    const LoraSpec& spec = g.spec;
    auto be = make_cpu_backend();
    Transformer base(cfg, *be), lora(cfg, *be, {}, DType::F32, spec);
    load(base.params(), f);
    lora.params().init(7);  // A Kaiming-uniform, B zero (PEFT)
    for (int i = 0; i < lora.params().size(); ++i) {
        const ParamSpec& s = lora.params().specs()[size_t(i)];
        if (s.role == ParamRole::LoraA || s.role == ParamRole::LoraB) continue;
        lora.params().upload(i, base.params().download(base.params().index(s.name)).data());
    }
    const int B = 2, T = 5;
    std::vector<int32_t> ids = {1, 5, 9, 3, 7, 2, 4, 6, 8, 0};
    base.setup(B, T);
    lora.setup(B, T);
    std::vector<float> a(size_t(B * T * cfg.vocab_size)), b(a.size());
    base.forward_logits(ids.data(), B, T, a.data());
    lora.forward_logits(ids.data(), B, T, b.data());
    // The frozen base runs q, k, v (and gate, up) as separate GEMMs, the trainable one fused, and
    // B = 0 adds exact zeros: the same sums in another blocking, two orders along the forward
    // chain, the head's C products cancelling to ~1/√C of the largest logit (numerics.h):
    // reorder_prob(n_fwd)·√C, 1.8e-4. B = 0.1 below moves the logits by 0.3.
    EXPECT_LT(rel_max_err(b, a), testing::reorder_prob(testing::model_forward_chain(cfg, T)) *
                                     std::sqrt(double(cfg.hidden_size)));
    // ... while a non-zero B does change it.
    const int ib = lora.params().find_lora(ParamRole::Q, 0, true);
    lora.params().upload(ib, std::vector<float>(size_t(lora.params().numel(ib)), 0.1f).data());
    lora.forward_logits(ids.data(), B, T, b.data());
    EXPECT_GT(rel_max_err(b, a), 1e-3);
    const int ia = lora.params().find_lora(ParamRole::Q, 0, false);
    ASSERT_GE(ia, 0);
    const std::vector<float> av = lora.params().download(ia);
    const float bound = 1.0f / std::sqrt(float(cfg.hidden_size));
    EXPECT_TRUE(std::all_of(av.begin(), av.end(), [&](float v) { return std::fabs(v) <= bound; }));
    EXPECT_GT(*std::max_element(av.begin(), av.end()), 0.5f * bound);
}

// Adapters initialised as PEFT does, then B set non-zero everywhere, so every adapter's output
// (and gradient path) matters.
void init_nonzero_b(ParamStore& ps) {
    ps.init(7);
    for (int i = 0; i < ps.size(); ++i)
        if (ps.specs()[size_t(i)].role == ParamRole::LoraB)
            ps.upload(i, std::vector<float>(size_t(ps.numel(i)), 0.05f).data());
}

// One micro-batch of the tests below: rows [row0, row0 + rows) of a (2, 5) batch.
constexpr int B = 2, T = 5;
const std::vector<int32_t> ids = {1, 5, 9, 3, 7, 2, 4, 6, 8, 0},
                           tg = {5, 9, 3, 7, 2, 4, 6, 8, 0, 1};
double train(Transformer& m, int64_t step, int64_t first, int rows, int row0) {
    m.set_micro_batch(0, step, first);
    return m.forward_backward(ids.data() + row0 * T, tg.data() + row0 * T, rows, T, 0.1f);
}
std::vector<float> grads(const Transformer& m) {
    return m.params().download_grads();
}

// A recomputed layer re-runs its forward without the layer output: it must still save what
// backward reads, down_proj's adapter u included (it once did not, and down_proj's B got the
// gradient of stale scratch).
TEST(LoraModel, RecomputeGivesTheSameGradients) {
    const LlamaGolden g;
    const ModelConfig& cfg = g.cfg;
    const LoraSpec& spec = g.spec;
    auto be = make_cpu_backend();
    Transformer a(cfg, *be, {}, DType::F32, spec), r(cfg, *be, {}, DType::F32, spec);
    init_nonzero_b(a.params());
    init_nonzero_b(r.params());
    a.setup(B, T);
    r.setup(B, T, Recompute::Full);
    a.params().zero_grads();
    r.params().zero_grads();
    EXPECT_EQ(train(r, 0, 0, B, 0), train(a, 0, 0, B, 0));
    EXPECT_EQ(grads(r), grads(a));
}

// lora.dropout: training forwards draw masks from (seed, step, layer, site, global token);
// evaluation draws none. Same micro-batch: the same loss and gradients, with or without
// recomputation (backward regenerates the forward's masks); another step or another place in
// the global batch: other masks; one batch of 2 rows = two micro-batches of 1 row each.
TEST(LoraModel, DropoutMasksTrainingOnlyAndFollowTheGlobalBatch) {
    const LlamaGolden g;
    const ModelConfig& cfg = g.cfg;
    const LoraSpec& plain = g.spec;
    LoraSpec drop = plain;
    drop.dropout = 0.3f;
    drop.dropout_seed = 5;
    auto be = make_cpu_backend();
    Transformer a(cfg, *be, {}, DType::F32, plain), d(cfg, *be, {}, DType::F32, drop),
        r(cfg, *be, {}, DType::F32, drop);
    for (Transformer* m : {&a, &d, &r}) init_nonzero_b(m->params());
    a.setup(B, T);
    d.setup(B, T);
    r.setup(B, T, Recompute::Full);
    EXPECT_EQ(d.forward_loss(ids.data(), tg.data(), B, T),
              a.forward_loss(ids.data(), tg.data(), B, T));
    a.params().zero_grads();
    const double l_plain = train(a, 3, 8, B, 0);
    d.params().zero_grads();
    const double l1 = train(d, 3, 8, B, 0);
    const std::vector<float> g1 = grads(d);
    EXPECT_GT(std::fabs(l1 - l_plain), 1e-4 * l_plain);  // the masks do something
    EXPECT_GT(rel_max_err(g1, grads(a)), 1e-3);
    d.params().zero_grads();
    EXPECT_EQ(train(d, 3, 8, B, 0), l1);
    EXPECT_EQ(grads(d), g1);
    r.params().zero_grads();
    EXPECT_EQ(train(r, 3, 8, B, 0), l1);  // recomputed layers draw the same masks
    EXPECT_EQ(grads(r), g1);
    d.params().zero_grads();
    EXPECT_NE(train(d, 4, 8, B, 0), l1);
    d.params().zero_grads();
    EXPECT_NE(train(d, 3, 10, B, 0), l1);
    // Rows 0 and 1 as samples 8 and 9 in micro-batches of their own: the same terms, the
    // gradients summed in another order (two orders along the chains, as in transformer_test.cpp:
    // the loss reorder_prob(n_fwd + V), a gradient reorder_prob(n)·√(B·T), 1.1e-4).
    d.params().zero_grads();
    const double split = train(d, 3, 8, 1, 0) + train(d, 3, 9, 1, 1);
    const Chains chain = lora_chains(cfg, drop, B, T);
    EXPECT_NEAR(split, l1, testing::reorder_prob(chain.fwd + cfg.vocab_size) * l1);
    EXPECT_LT(rel_max_err(grads(d), g1),
              testing::reorder_prob(chain.all) * std::sqrt(double(B * T)));
}

TEST(LoraModel, BadSpecIsAOneLineError) {
    ModelConfig cfg;
    cfg.vocab_size = 32;
    cfg.hidden_size = 16;
    cfg.intermediate_size = 24;
    cfg.num_layers = 1;
    cfg.num_heads = 2;
    cfg.num_kv_heads = 2;
    auto be = make_cpu_backend();
    LoraSpec s;
    s.enabled = true;
    s.targets = {"q_proj", "c_attn"};
    EXPECT_EQ(error_of([&] { Transformer t(cfg, *be, {}, DType::F32, s); }),
              "lora.targets: 'c_attn' is not a linear of a llama model (expected q_proj, k_proj, "
              "v_proj, o_proj, gate_proj, up_proj, down_proj or all-linear)");
}

// An NF4 shard is cut from the whole quantized tensor: the same codes and absmax as the matching
// rows/columns of one process's tensor; a shard that would cut blocks is refused.
TEST(LoraModel, Nf4ShardsAreSlicesOfTheWholeTensor) {
    ModelConfig c;
    c.vocab_size = 32;
    c.hidden_size = 64;
    c.intermediate_size = 64;
    c.num_layers = 1;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    LoraSpec s;
    s.enabled = true;
    s.base_format = "nf4";
    s.nf4_block = 32;
    ModelParallel mp;
    mp.tp_size = 2;
    for (int rank = 0; rank < 2; ++rank) {
        mp.tp_rank = rank;
        for (const ParamSpec& p : param_specs(c, mp, s)) {
            if (p.nf4_block == 0) continue;
            std::vector<float> w(size_t(shape_numel(p.global_shape)));
            for (size_t k = 0; k < w.size(); ++k) w[k] = std::sin(0.37f * float(k));
            const Nf4Tensor g =
                nf4_quantize(w.data(), p.global_shape[0], p.global_shape[1], {32, true});
            const Nf4Tensor t = nf4_shard(p, rank, 2, g);
            std::vector<float> whole(w.size()), part(size_t(t.numel())), want(part.size());
            nf4_dequantize(g, whole.data());
            nf4_dequantize(t, part.data());
            shard_from_global(p, rank, 2, whole.data(), want.data());
            EXPECT_EQ(part, want) << p.name << " rank " << rank;
        }
    }
    s.nf4_block = 64;  // o_proj's shards are 32 columns wide: 64-element blocks would straddle
    mp.tp_rank = 0;
    for (const ParamSpec& p : param_specs(c, mp, s)) {
        if (p.role != ParamRole::AttnOut) continue;
        std::vector<float> w(size_t(shape_numel(p.global_shape)), 0.5f);
        const Nf4Tensor g =
            nf4_quantize(w.data(), p.global_shape[0], p.global_shape[1], {64, true});
        const std::string at = fmt::format(
            "parameter '{}': NF4 blocks of 64 elements would straddle its shards at parallel.tp "
            "= 2 (a shard run of 32 elements at element 0); ",
            p.name);
        // The remedy names the block size that fits (32, the smallest), and what sets it:
        // lora.nf4_blocksize where ETE quantizes, re-quantizing the dir where the blocks are
        // stored.
        EXPECT_EQ(error_of([&] { nf4_shard(p, 0, 2, g); }),
                  at + "use lora.nf4_blocksize = 32, or another tp");
        EXPECT_EQ(error_of([&] { nf4_shard(p, 0, 2, g, Nf4Origin::Stored); }),
                  at + "the base dir stores blocks of 64 (lora.nf4_blocksize cannot change "
                       "them): re-quantize its full-precision weights with `ete quantize "
                       "--blocksize 32`, or use another tp");
    }
}

}  // namespace lora_golden_test
}  // namespace ete
