// tests/io/hf_model_test.cpp — HF model directories: save/load round trips for every family,
// BF16 weights, GPT-2 key variants (transformer. prefix, attention-mask buffers), and errors that
// name the offending tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ete/core/file_util.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "phi3_rope.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny(Arch arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 37;
    c.hidden_size = 16;
    c.intermediate_size = arch == Arch::GPT2 ? 64 : 24;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = arch == Arch::GPT2 ? 4 : 2;
    c.max_position_embeddings = 32;
    c.tie_word_embeddings = arch == Arch::GPT2;
    return c;
}

class HfModelTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_hf_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& n) const { return (dir_ / n).string(); }

    // Rewrites dir/model.safetensors through `edit`, which gets (name, tensor) pairs.
    void rewrite(const std::string& dir,
                 const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
        std::vector<std::pair<std::string, Tensor>> ts;
        {
            auto f = SafetensorsFile::open(dir + "/model.safetensors");
            for (const auto& n : f.names()) ts.emplace_back(n, f.to_tensor(n));
        }
        edit(ts);
        write_safetensors(dir + "/model.safetensors", ts);
    }

    fs::path dir_;
};

TEST_F(HfModelTest, RoundTripEveryFamily) {
    for (const Family& f : families()) {
        const Arch arch = f.arch;
        ModelConfig c = tiny(arch);
        c.use_family_defaults();
        if (f.window != WindowRule::None) c.sliding_window = 8;
        if (f.window == WindowRule::FromMaxWindowLayers) c.window_from_layer = 1;
        if (f.arch == Arch::Phi3) testing::phi3_rope(c, 0.5, 16);  // 2 of 4 dims, long factors
        HostParams a(param_specs(c));
        a.init(3);
        std::string d = path(arch_name(arch));
        save_hf_model(d, c, a, "");
        ModelConfig back = load_hf_config(d);
        EXPECT_EQ(back.arch, arch);
        EXPECT_EQ(back.num_kv_heads, c.num_kv_heads);
        EXPECT_EQ(back.intermediate_size, c.intermediate_size);
        EXPECT_EQ(back.sliding_window, c.sliding_window);
        EXPECT_EQ(back.window_from_layer, c.window_from_layer);
        EXPECT_EQ(back.window_pattern, c.window_pattern);
        EXPECT_EQ(back.attn_softcap, c.attn_softcap);
        EXPECT_EQ(back.final_softcap, c.final_softcap);
        EXPECT_EQ(back.rope_local_theta, c.rope_local_theta);
        EXPECT_EQ(back.rope_scaling, c.rope_scaling);
        EXPECT_EQ(back.partial_rotary_factor, c.partial_rotary_factor);
        HostParams b(param_specs(back));
        EXPECT_EQ(b.specs().size(), a.specs().size()) << f.name;  // the same biases
        load_hf_weights(d, b);
        ASSERT_EQ(a.numel(), b.numel());
        for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data()[i], b.data()[i]) << i;
        EXPECT_FALSE(fs::exists(d + "/tokenizer.json"));
        // No temporary directories are left next to the model.
        for (const auto& e : fs::directory_iterator(dir_))
            EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
    }
}

TEST_F(HfModelTest, Gpt2StoresConv1DTransposed) {
    ModelConfig c = tiny(Arch::GPT2);
    HostParams a(param_specs(c));
    a.init(5);
    save_hf_model(path("g"), c, a, "");
    auto f = SafetensorsFile::open(path("g") + "/model.safetensors");
    EXPECT_EQ(f.info("h.0.mlp.c_fc.weight").shape, (Shape{16, 64}));  // HF (in, out)
    Tensor w = f.to_f32("h.0.mlp.c_fc.weight");
    const float* p = a.param("h.0.mlp.c_fc.weight");  // ETE (out, in)
    EXPECT_EQ(w.f32()[3 * 64 + 5], p[5 * 16 + 3]);
}

TEST_F(HfModelTest, LoadsBf16AndGpt2KeyVariants) {
    ModelConfig c = tiny(Arch::GPT2);
    HostParams a(param_specs(c));
    a.init(7);
    std::string d = path("g2");
    save_hf_model(d, c, a, "");
    rewrite(d, [](auto& ts) {
        for (auto& [name, t] : ts) {
            Tensor bf = Tensor::empty(t.shape(), DType::BF16);
            convert_from_f32(bf.data(), DType::BF16, t.f32(), size_t(t.numel()));
            t = bf;
            name = "transformer." + name;
        }
        ts.emplace_back("transformer.h.0.attn.bias", Tensor::zeros({1, 1, 32, 32}));
        ts.emplace_back("transformer.h.1.attn.masked_bias", Tensor::zeros({}));
    });
    HostParams b(param_specs(c));
    load_hf_weights(d, b);
    for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_EQ(b.data()[i], bf16_to_f32(f32_to_bf16(a.data()[i]))) << i;
}

TEST_F(HfModelTest, ErrorsNameTheTensor) {
    ModelConfig c = tiny(Arch::Llama);
    HostParams a(param_specs(c));
    std::string d = path("l");
    save_hf_model(d, c, a, "");
    auto message =
        [&](const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
            save_hf_model(d, c, a, "");
            rewrite(d, edit);
            HostParams b(param_specs(c));
            try {
                load_hf_weights(d, b);
            } catch (const Error& e) {
                return std::string(e.what());
            }
            return std::string();
        };
    std::string missing = message([](auto& ts) {
        std::erase_if(ts, [](const auto& p) { return p.first == "lm_head.weight"; });
    });
    EXPECT_NE(missing.find("'lm_head.weight' is missing"), std::string::npos) << missing;
    std::string shape = message([](auto& ts) {
        for (auto& [n, t] : ts)
            if (n == "model.norm.weight") t = Tensor::zeros({15});
    });
    EXPECT_NE(shape.find("'model.norm.weight' has shape [15], expected [16]"), std::string::npos)
        << shape;
    std::string extra =
        message([](auto& ts) { ts.emplace_back("model.extra", Tensor::zeros({1})); });
    EXPECT_NE(extra.find("'model.extra' is not a parameter"), std::string::npos) << extra;
    std::string dtype = message([](auto& ts) {
        for (auto& [n, t] : ts)
            if (n == "model.norm.weight") t = Tensor::zeros({16}, DType::I32);
    });
    EXPECT_NE(dtype.find("dtype I32, expected F32, BF16 or F16"), std::string::npos) << dtype;
    EXPECT_THROW(load_hf_config(path("nonexistent")), Error);
}

}  // namespace
}  // namespace ete
