// tests/model/int8_model_test.cpp — the integer model (model/int8_model.h, nn/int8_linear.h,
// io/int8_dir.h): a model calibrated like post-training quantization, then run with integer
// GEMMs, against the same model with fake quantization (the numbers QAT trains with) — Llama and
// GPT-2, 8- and 4-bit weights per channel, per tensor and per group, static and per-token
// activations, skipped layers, extra points; the guarded backend (memory the host cannot touch)
// bit for bit with the CPU one; the dir written and read back; what a spec or a file cannot be.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ete/core/file_util.h"
#include "ete/io/int8_dir.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "numerics.h"

namespace ete {
namespace int8_model_test {

namespace fs = std::filesystem;

ModelConfig config(Arch arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 67;
    c.hidden_size = 64;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = arch == Arch::Llama ? 2 : 4;
    c.intermediate_size = arch == Arch::Llama ? 96 : 128;
    c.max_position_embeddings = 32;
    c.tie_word_embeddings = arch == Arch::GPT2;
    c.initializer_range = 0.2;
    return c;
}

constexpr int B = 3, T = 16;

void batch(int k, int V, std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
    in.resize(size_t(B) * T);
    tgt.resize(in.size());
    for (int i = 0; i < B * T; ++i) {
        in[size_t(i)] = int32_t((i * 37 + 11 + 5 * k) % V);
        tgt[size_t(i)] = int32_t((i * 53 + 5 + 3 * k) % V);
    }
}

QatSpec spec_of(const std::string& points) {
    QatSpec s;
    s.enabled = true;
    s.points = qat_points_from_string(points);
    s.observer = ObserverKind::MinMax;
    s.warmup_steps = 1000;  // calibration: observe, never fake-quantize
    return s;
}

// A model with random weights whose observers saw two batches, then in inference mode (fake
// quantization on, frozen).
std::unique_ptr<Transformer> calibrated(const ModelConfig& c, Backend& be, const QatSpec& spec) {
    auto m = std::make_unique<Transformer>(c, be);
    m->params().init(7);
    m->enable_qat(spec);
    m->setup(B, T);
    m->set_qat_calibration(true);
    std::vector<int32_t> in, tgt;
    for (int k = 0; k < 2; ++k) {
        batch(k, c.vocab_size, in, tgt);
        m->qat()->begin_step(k);
        m->forward_loss(in.data(), tgt.data(), B, T);
        m->qat()->end_step(m->qat()->step_ranges());
    }
    m->set_qat_calibration(false);
    m->qat()->set_inference();
    return m;
}

std::unique_ptr<Transformer> integer(const ModelConfig& c, Backend& be, const Int8Model& im,
                                     const HostParams& host) {
    auto m = std::make_unique<Transformer>(c, be);
    m->params().from_host(host);
    m->enable_int8(im);
    m->setup(B, T);
    return m;
}

double loss(Transformer& m, int k = 5) {
    std::vector<int32_t> in, tgt;
    batch(k, m.config().vocab_size, in, tgt);
    return m.forward_loss(in.data(), tgt.data(), B, T) / double(B * T);
}

std::vector<float> logits(Transformer& m) {
    std::vector<int32_t> in, tgt;
    batch(5, m.config().vocab_size, in, tgt);
    std::vector<float> out(size_t(B) * T * size_t(m.config().vocab_size));
    m.forward_logits(in.data(), B, T, out.data());
    return out;
}

struct Case {
    Arch arch;
    std::string points;
    int weight_bits;
    QatGranularity wg, ag;
    std::vector<int> skip;
    bool head = false;  // lm_head too (untied for Llama unless `tied`; GPT-2's is tied)
    bool tied = false;
};

// The integer model computes fq(x)·fq(W)ᵀ with exact integer sums instead of fp32 ones, and the
// rest of its forward rounds the same operations on those results: the two losses differ by at
// most twice the forward's rounding, reorder_prob(n_fwd + V) along its chain of reductions
// (numerics.h; 2.9e-5 for Llama: 3 layers, C = 64, T = 16; measured <= 2.7e-8 under every kernel
// choice). A tie flip (docs/numerics.md) moves one activation by a grid step, far less than the
// quantization itself moves the loss — a value the test also checks, so a model that silently ran
// in fp32 would fail.
TEST(Int8Model, MatchesTheFakeQuantizedModel) {
    auto be = make_cpu_backend();
    using G = QatGranularity;
    for (const Case& k :
         {Case{Arch::Llama, "weight,linear_in", 8, G::Channel, G::Tensor, {}},
          Case{Arch::Llama,
               "weight,linear_in,post_norm,residual,attn_out,ffn_out",
               8,
               G::Tensor,
               G::Tensor,
               {-1}},
          Case{Arch::Llama, "weight,linear_in", 4, G::Group, G::Token, {0}},
          Case{Arch::Llama, "weight,linear_in", 4, G::Channel, G::Tensor, {}},
          Case{Arch::Llama, "weight,linear_in", 8, G::Channel, G::Tensor, {}, true},
          Case{Arch::Llama, "weight,linear_in", 8, G::Group, G::Token, {1}, true},
          Case{Arch::Llama, "weight,linear_in", 8, G::Channel, G::Token, {}, true, true},
          Case{Arch::GPT2, "weight,linear_in,post_norm", 8, G::Channel, G::Tensor, {}},
          Case{Arch::GPT2, "weight,linear_in", 8, G::Channel, G::Tensor, {}, true},
          Case{Arch::GPT2, "weight,linear_in", 4, G::Group, G::Tensor, {}}}) {
        ModelConfig c = config(k.arch);
        c.tie_word_embeddings = c.tie_word_embeddings || k.tied;
        QatSpec spec = spec_of(k.points);
        spec.weight_bits = k.weight_bits;
        spec.weight_granularity = k.wg;
        spec.act_granularity = k.ag;
        spec.group_size = 32;
        spec.skip_layers = k.skip;
        if (k.head) spec.linears = {"all-linear", "lm_head"};
        SCOPED_TRACE(qat_spec_to_json(spec).dump());
        auto fake = calibrated(c, *be, spec);
        const HostParams host = fake->params().to_host();
        const Int8Model im = make_int8_model(spec, c, host, *fake->qat());
        const int per_layer = k.arch == Arch::Llama ? 7 : 4;
        const int layers = c.num_layers - int(k.skip.size());
        EXPECT_EQ(int(im.weights.size()), per_layer * layers + int(k.head));
        const bool final_norm =
            (k.head || k.points.find("post_norm") != std::string::npos) && k.ag == G::Tensor;
        EXPECT_EQ(im.act_scales.count("final_norm"), size_t(final_norm));
        auto q = integer(c, *be, im, host);
        EXPECT_EQ(q->int8_linears(), size_t(4 * layers + int(k.head)));
        Transformer plain(c, *be);
        plain.params().from_host(host);
        plain.setup(B, T);
        const double lf = loss(*fake), lq = loss(*q), lp = loss(plain);
        EXPECT_NEAR(lq, lf,
                    testing::reorder_prob(testing::model_forward_chain(c, T) + c.vocab_size) * lf);
        EXPECT_GT(std::fabs(lq - lp), 20 * std::fabs(lq - lf)) << "quantization changed nothing";
    }
}

// The per-token path and every op of the integer linears on memory the host cannot touch: the
// same numbers as the CPU backend, bit for bit.
TEST(Int8Model, GuardedBackendMatchesBitForBit) {
    auto cpu = make_cpu_backend();
    auto guarded = make_guarded_backend();
    for (const QatGranularity ag : {QatGranularity::Tensor, QatGranularity::Token}) {
        const ModelConfig c = config(Arch::Llama);
        QatSpec spec = spec_of("weight,linear_in,residual");
        spec.act_granularity = ag;
        auto fake = calibrated(c, *cpu, spec);
        const HostParams host = fake->params().to_host();
        const Int8Model im = make_int8_model(spec, c, host, *fake->qat());
        auto a = integer(c, *cpu, im, host);
        auto b = integer(c, *guarded, im, host);
        EXPECT_EQ(logits(*a), logits(*b));
    }
}

class Int8Dir : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_int8_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

// Written and read back: the same model (logits bit for bit), the format as documented.
TEST_F(Int8Dir, RoundTripsAndChecksWhatItReads) {
    auto be = make_cpu_backend();
    const ModelConfig c = config(Arch::Llama);
    QatSpec spec = spec_of("weight,linear_in,ffn_out");
    spec.weight_bits = 4;
    spec.weight_granularity = QatGranularity::Group;
    spec.group_size = 32;
    auto fake = calibrated(c, *be, spec);
    const HostParams host = fake->params().to_host();
    const Int8Model im = make_int8_model(spec, c, host, *fake->qat());
    const std::string out = (dir_ / "m").string();
    save_int8_model(out, c, host, im, {{"from", "test"}}, "", "");
    ASSERT_TRUE(is_int8_model_dir(out));
    auto a = integer(c, *be, im, host);
    auto b = load_int8_model(*be, out);
    b->setup(B, T);
    EXPECT_EQ(logits(*a), logits(*b));
    const auto f = SafetensorsFile::open(out + "/model.safetensors");
    const std::string q = "model.layers.1.self_attn.q_proj.weight";
    EXPECT_EQ(f.info(q).dtype, DType::I8);
    EXPECT_EQ(f.info(q).shape, (Shape{64, 64}));
    EXPECT_EQ(f.info(q + "_scale").shape, (Shape{64, 2}));
    EXPECT_EQ(f.info("model.norm.weight").dtype, DType::F32);
    const nlohmann::json qc =
        nlohmann::json::parse(read_file(out + "/config.json"))["quantization_config"];
    EXPECT_EQ(qc["quant_method"], "ete_int8");
    EXPECT_EQ(qc["weight_bits"], 4);
    EXPECT_EQ(qc["activation_scales"].size(), size_t(3 * 5));  // 4 linear inputs + ffn_out
    EXPECT_TRUE(qc["activation_scales"].contains("layers.2.ffn_out"));

    // Damaged copies: each refused with a line naming the tensor or key.
    auto damaged = [&](const std::function<void(nlohmann::json&)>& edit_config,
                       const std::string& bad_tensor, float value) {
        const std::string d = (dir_ / "bad").string();
        fs::remove_all(d);
        fs::copy(out, d);
        nlohmann::json cj = nlohmann::json::parse(read_file(d + "/config.json"));
        edit_config(cj);
        write_file_atomic(d + "/config.json", cj.dump());
        if (!bad_tensor.empty()) {
            const auto src = SafetensorsFile::open(out + "/model.safetensors");
            std::vector<std::pair<std::string, Tensor>> ts;
            for (const std::string& n : src.names()) {
                Tensor t = src.to_tensor(n);
                if (n == bad_tensor) {
                    if (t.dtype() == DType::I8)
                        static_cast<int8_t*>(t.data())[3] = int8_t(value);
                    else
                        t.f32()[3] = value;
                }
                ts.emplace_back(n, std::move(t));
            }
            write_safetensors(d + "/model.safetensors", ts);
        }
        try {
            load_int8_model(*be, d);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    auto none = [](nlohmann::json&) {};
    EXPECT_NE(damaged(none, q, 9.0f).find("holds 9, outside the 4-bit grid [-7, 7]"),
              std::string::npos);
    EXPECT_NE(damaged(none, q + "_scale", -1.0f).find("holds the scale -1 (expected finite, > 0)"),
              std::string::npos);
    EXPECT_NE(damaged(
                  [](nlohmann::json& j) {
                      j["quantization_config"]["activation_scales"]["layers.0.o_in"] = {0.1, 300};
                  },
                  "", 0)
                  .find("activation_scales[\"layers.0.o_in\"] = [0.1, 300]"),
              std::string::npos);
    EXPECT_NE(damaged(
                  [](nlohmann::json& j) {
                      j["quantization_config"]["activation_scales"]["layers.9.o_in"] = {0.1, 0};
                  },
                  "", 0)
                  .find("'layers.9.o_in' is not an activation point of a 3-layer model"),
              std::string::npos);
    EXPECT_NE(damaged(
                  [](nlohmann::json& j) {
                      j["quantization_config"]["activation_scales"].erase("layers.1.mlp_in");
                  },
                  "", 0)
                  .find("the input of 'model.layers.1.mlp.gate_proj.weight' has no scale "
                        "(layers.1.mlp_in)"),
              std::string::npos);
    EXPECT_NE(damaged([](nlohmann::json& j) { j["quantization_config"]["weight_bits"] = 5; }, "", 0)
                  .find("qat.weight_bits = 5: expected 4 or 8"),
              std::string::npos);
}

// A tied head (GPT-2): its integers as lm_head.weight beside the fp32 embedding the lookup reads;
// written and read back bit for bit, and refused when they are missing.
TEST_F(Int8Dir, TiedHeadRoundTrips) {
    auto be = make_cpu_backend();
    const ModelConfig c = config(Arch::GPT2);
    QatSpec spec = spec_of("weight,linear_in");
    spec.linears = {"all-linear", "lm_head"};
    auto fake = calibrated(c, *be, spec);
    const HostParams host = fake->params().to_host();
    const Int8Model im = make_int8_model(spec, c, host, *fake->qat());
    const std::string out = (dir_ / "tied").string();
    save_int8_model(out, c, host, im, {{"from", "test"}}, "", "");
    auto a = integer(c, *be, im, host);
    auto b = load_int8_model(*be, out);
    EXPECT_EQ(b->int8_linears(), size_t(4 * c.num_layers + 1));
    b->setup(B, T);
    EXPECT_EQ(logits(*a), logits(*b));
    const auto f = SafetensorsFile::open(out + "/model.safetensors");
    EXPECT_EQ(f.info("lm_head.weight").dtype, DType::I8);
    EXPECT_EQ(f.info("lm_head.weight").shape, (Shape{67, 64}));
    EXPECT_EQ(f.info("wte.weight").dtype, DType::F32);
    std::vector<std::pair<std::string, Tensor>> ts;
    for (const std::string& n : f.names())
        if (!n.starts_with("lm_head.")) ts.emplace_back(n, f.to_tensor(n));
    write_safetensors(out + "/model.safetensors", ts, {{"format", "pt"}});
    try {
        load_int8_model(*be, out);
        ADD_FAILURE() << "a tied head without its integers was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'lm_head.weight' is missing"),
                  std::string::npos)
            << e.what();
    }
}

// Beyond max_shard_bytes the dir is sharded like an HF dir (model-0000K-of-0000N.safetensors and
// the index), each integer weight beside its scales, and reads back bit for bit.
TEST_F(Int8Dir, ShardsLikeAnHfDir) {
    auto be = make_cpu_backend();
    const ModelConfig c = config(Arch::Llama);
    QatSpec spec = spec_of("weight,linear_in");
    auto fake = calibrated(c, *be, spec);
    const HostParams host = fake->params().to_host();
    const Int8Model im = make_int8_model(spec, c, host, *fake->qat());
    const std::string out = (dir_ / "sharded").string();
    save_int8_model(out, c, host, im, {{"from", "test"}}, "", "", "", 20000);
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
    const nlohmann::json map =
        nlohmann::json::parse(read_file(out + "/model.safetensors.index.json"))["weight_map"];
    const std::string q = "model.layers.1.self_attn.q_proj.weight";
    EXPECT_EQ(map[q], map[q + "_scale"]);
    std::set<std::string> files;
    for (const auto& [name, file] : map.items()) files.insert(file.get<std::string>());
    EXPECT_GE(files.size(), 5u);
    EXPECT_TRUE(files.count(fmt::format("model-00001-of-{:05d}.safetensors", files.size())));
    auto a = integer(c, *be, im, host);
    auto b = load_int8_model(*be, out);
    b->setup(B, T);
    EXPECT_EQ(logits(*a), logits(*b));
    fs::remove(out + "/" + map[q].get<std::string>());
    try {
        load_int8_model(*be, out);
        ADD_FAILURE() << "a missing shard was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
    }
}

TEST(Int8Model, SpecsThatCannotBeIntegerAreNamed) {
    const ModelConfig c = config(Arch::Llama);
    auto error_of = [&](const QatSpec& s) {
        try {
            check_int8_spec(s, c);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(error_of(spec_of("weight,post_norm")),
              "the integer model needs qat.points to include weight and linear_in (an integer GEMM "
              "quantizes both operands); this run has weight,post_norm");
    QatSpec s = spec_of("weight,linear_in");
    s.linears = {"q_proj", "o_proj"};
    EXPECT_EQ(error_of(s),
              "the integer model quantizes q_proj, k_proj and v_proj together (they read one "
              "input): qat.linears = 'q_proj,o_proj' chooses only some of them");
    s.linears = {"q_proj", "k_proj", "v_proj", "down_proj"};
    EXPECT_EQ(error_of(s), "no error");
    s.linears = {"lm_head"};
    EXPECT_EQ(error_of(s), "no error");
    ModelConfig tied = c;
    tied.tie_word_embeddings = true;
    check_int8_spec(s, tied);  // a tied head too, with range scales
    s.learnable_scale = true;
    try {
        check_int8_spec(s, tied);
        ADD_FAILURE() << "a tied head with learned scales was accepted";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(),
                     "qat.linears = lm_head with qat.learnable_scale: the head is the token "
                     "embedding here (tie_word_embeddings), whose gradient also holds the "
                     "embedding lookup's; learned scales need an untied head");
    }
}

}  // namespace int8_model_test
}  // namespace ete
