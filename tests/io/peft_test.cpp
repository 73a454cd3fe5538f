// tests/io/peft_test.cpp — PEFT adapter dirs: the file layout PEFT expects, export -> import bit
// for bit (a rank_pattern too), and one-line errors for dirs that do not fit the base.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/core/file_util.h"
#include "ete/io/peft.h"
#include "ete/io/safetensors.h"
#include "ete/model/param_spec.h"
#include "ete/nn/lora.h"
#include "test_util.h"

namespace ete {
namespace peft_test {

namespace fs = std::filesystem;
using json = nlohmann::json;

ModelConfig tiny(Arch arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 32;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 2;
    c.num_heads = 2;
    c.num_kv_heads = arch == Arch::Llama ? 1 : 2;
    c.max_position_embeddings = 16;
    return c;
}

LoraSpec spec(std::vector<std::string> targets, int r = 4) {
    LoraSpec s;
    s.enabled = true;
    s.r = r;
    s.alpha = 8;
    s.targets = std::move(targets);
    s.base_format = "nf4";
    return s;
}

struct TmpDir {
    fs::path p = fs::temp_directory_path() /
                 ("ete_peft_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TmpDir() { fs::create_directories(p); }
    ~TmpDir() { fs::remove_all(p); }
    std::string operator/(const std::string& s) const { return (p / s).string(); }
};

HostParams random_adapters(const ModelConfig& c, const LoraSpec& s) {
    HostParams h(param_specs(c, {}, s));
    h.init(5);
    for (int64_t k = 0; k < h.numel(); ++k) h.data()[k] += 0.001f * float(k % 17);  // B != 0
    return h;
}

TEST(Peft, WritesThePeftLayoutAndReadsItBackBitForBit) {
    for (Arch arch : {Arch::Llama, Arch::GPT2}) {
        TmpDir d;
        const ModelConfig c = tiny(arch);
        const LoraSpec s =
            spec(arch == Arch::Llama ? std::vector<std::string>{"q_proj", "down_proj"}
                                     : std::vector<std::string>{"c_attn", "c_proj"});
        const HostParams h = random_adapters(c, s);
        save_peft_adapter(d / "a", c, s, h, "/models/base", "0123456789abcdef",
                          [&](const std::string&) { return s.r; });
        const json cfg = json::parse(read_file(d / "a/adapter_config.json"));
        EXPECT_EQ(cfg["peft_type"], "LORA");
        EXPECT_EQ(cfg[kPeftBaseHashKey], "0123456789abcdef");
        EXPECT_EQ(load_peft_config(d / "a", c).base_hash, "0123456789abcdef");
        EXPECT_EQ(cfg["r"], 4);
        EXPECT_EQ(cfg["lora_alpha"], 8.0);
        EXPECT_EQ(cfg["fan_in_fan_out"], arch == Arch::GPT2);
        EXPECT_EQ(cfg["base_model_name_or_path"], "/models/base");
        const auto f = SafetensorsFile::open(d / "a/adapter_model.safetensors");
        EXPECT_EQ(f.metadata().at("format"), "pt");
        const std::string key =
            arch == Arch::Llama ? "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"
                                : "base_model.model.transformer.h.1.attn.c_attn.lora_B.weight";
        ASSERT_TRUE(f.has(key));
        EXPECT_EQ(f.info(key).shape, arch == Arch::Llama ? (Shape{4, 16}) : (Shape{48, 4}));
        // 2 layers x (A, B) x modules: Llama q_proj, down_proj; GPT-2 c_attn and c_proj, which
        // matches attn.c_proj and mlp.c_proj both.
        EXPECT_EQ(f.names().size(), arch == Arch::Llama ? 8u : 12u);

        const PeftAdapterInfo info = load_peft_config(d / "a", c);
        EXPECT_EQ(info.spec.base_format, "nf4");
        HostParams back(param_specs(c, {}, info.spec));
        load_peft_weights(d / "a", c, back, [&](int i, const float* v) {
            std::copy(v, v + back.numel(i), back.param(i));
        });
        EXPECT_EQ(back.data_vector(), h.data_vector());
    }
}

TEST(Peft, RankPatternWritesAndReadsSmallerAdapters) {
    TmpDir d;
    const ModelConfig c = tiny(Arch::Llama);
    const LoraSpec s = spec({"q_proj", "v_proj"});
    HostParams h = random_adapters(c, s);
    auto rank = [](const std::string& m) { return m == "model.layers.0.self_attn.v_proj" ? 2 : 4; };
    save_peft_adapter(d / "a", c, s, h, "", "", rank);
    const json cfg = json::parse(read_file(d / "a/adapter_config.json"));
    EXPECT_EQ(cfg["rank_pattern"], json({{"model.layers.0.self_attn.v_proj", 2}}));
    const auto f = SafetensorsFile::open(d / "a/adapter_model.safetensors");
    EXPECT_EQ(f.info("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight").shape,
              (Shape{8, 2}));
    const PeftAdapterInfo info = load_peft_config(d / "a", c);
    HostParams back(param_specs(c, {}, info.spec));
    load_peft_weights(d / "a", c, back, [&](int i, const float* v) {
        std::copy(v, v + back.numel(i), back.param(i));
    });
    // PEFT scales that adapter by alpha / 2: the alpha_pattern entry keeps ETE's one scale.
    const float scale = lora_scale(s.alpha, s.r, s.rslora);
    EXPECT_EQ(cfg["alpha_pattern"], json({{"model.layers.0.self_attn.v_proj", scale * 2}}));
    EXPECT_EQ(info.rank_of("model.layers.0.self_attn.v_proj"), 2);
    EXPECT_EQ(info.scale_of("model.layers.0.self_attn.v_proj"), scale);
    EXPECT_EQ(info.scale_of("model.layers.1.self_attn.v_proj"), scale);
    // v_proj of layer 0 came back at rank 2: its A rows 2, 3 and B columns 2, 3 are zero.
    const int ia = back.index("model.layers.0.self_attn.v_proj.lora_A.weight");
    for (int k = 0; k < 2 * 16; ++k) EXPECT_EQ(back.param(ia)[k], h.param(ia)[k]);
    for (int k = 2 * 16; k < 4 * 16; ++k) EXPECT_EQ(back.param(ia)[k], 0.0f);
}

TEST(Peft, DirsThatDoNotFitTheBaseAreOneLineErrors) {
    TmpDir d;
    const ModelConfig c = tiny(Arch::Llama);
    const LoraSpec s = spec({"q_proj"});
    save_peft_adapter(d / "a", c, s, random_adapters(c, s), "", "",
                      [](const std::string&) { return 4; });
    // A different base width: the adapter shapes no longer fit.
    ModelConfig wider = c;
    wider.hidden_size = 32;
    wider.num_heads = 2;
    const PeftAdapterInfo info = load_peft_config(d / "a", wider);
    HostParams t(param_specs(wider, {}, info.spec));
    const std::string e =
        error_of([&] { load_peft_weights(d / "a", wider, t, [](int, const float*) {}); });
    EXPECT_NE(e.find("lora_A.weight' has shape [4, 16], expected [4, 32]"), std::string::npos) << e;
    // Targets that are not linears of the base.
    json cfg = json::parse(read_file(d / "a/adapter_config.json"));
    cfg["target_modules"] = {"c_attn"};
    write_file_atomic(d / "a/adapter_config.json", cfg.dump());
    EXPECT_NE(
        error_of([&] { load_peft_config(d / "a", c); }).find("'c_attn' is not a linear of a llama"),
        std::string::npos);
    // A file whose config says another rank than its tensors.
    cfg["target_modules"] = {"q_proj"};
    cfg["r"] = 8;
    write_file_atomic(d / "a/adapter_config.json", cfg.dump());
    const PeftAdapterInfo i8 = load_peft_config(d / "a", c);
    HostParams t8(param_specs(c, {}, i8.spec));
    EXPECT_NE(error_of([&] {
                  load_peft_weights(d / "a", c, t8, [](int, const float*) {});
              }).find("has shape [4, 16], expected [8, 16] for this base (r = 8)"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  load_peft_config(d / "nothing", c);
              }).find("adapter_config.json is missing"),
              std::string::npos);
}

// Numbers in adapter_config.json and the weights' metadata are read strictly: r = 2^32 + 4 loaded
// as 4, r = 4.5 as 4, and "abc" or "maybe" in the metadata as stoi's error or false.
TEST(Peft, NumbersAreNeverNarrowed) {
    TmpDir d;
    const ModelConfig c = tiny(Arch::Llama);
    const LoraSpec s = spec({"q_proj"});
    save_peft_adapter(d / "a", c, s, random_adapters(c, s), "", "",
                      [&](const std::string&) { return s.r; });
    const std::string cfg_path = d / "a/adapter_config.json";
    const json good = json::parse(read_file(cfg_path));
    for (const json& r : {json(4294967300LL), json(4.5), json("4"), json(true)}) {
        json j = good;
        j["r"] = r;
        write_file_atomic(cfg_path, j.dump());
        EXPECT_NE(error_of([&] {
                      load_peft_config(d / "a", c);
                  }).find("adapter_config.json: field 'r' = " + r.dump() + ": expected "),
                  std::string::npos)
            << r.dump();
    }
    write_file_atomic(cfg_path, good.dump());
    const std::string w = d / "a/adapter_model.safetensors";
    auto f = SafetensorsFile::open(w);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : f.names()) tensors.emplace_back(n, f.to_f32(n));
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, std::string>>{{"ete.nf4_blocksize", "abc"},
                                                          {"ete.nf4_blocksize", "64.5"},
                                                          {"ete.double_quant", "maybe"}}) {
        auto meta = f.metadata();
        meta[key] = value;
        write_safetensors(w + ".new", tensors, meta);
        std::filesystem::rename(w + ".new", w);
        EXPECT_NE(error_of([&] {
                      load_peft_config(d / "a", c);
                  }).find("metadata " + key + ": '" + value + "': expected"),
                  std::string::npos)
            << key << "=" << value;
    }
}

// rank_pattern / alpha_pattern keys as PEFT reads them: a regex matching a whole suffix of the
// module path at a "." boundary (get_pattern_key: (.*\.)?(key)$). alpha_pattern was ignored
// before: adapters using it were evaluated, merged and trained at the wrong scale.
TEST(Peft, PatternKeysMatchModulesAsPeftDoes) {
    PeftAdapterInfo info;
    info.spec.r = 8;
    info.spec.alpha = 16;
    info.rank_pattern = {{"q_proj", 4}, {"layers.1.mlp.down_proj", 2}};
    info.alpha_pattern = {{"layers\\.[0-9]+\\.self_attn\\.k_proj", 64.0f}};
    EXPECT_EQ(info.rank_of("model.layers.0.self_attn.q_proj"), 4);
    EXPECT_EQ(info.rank_of("model.layers.7.self_attn.q_proj"), 4);
    EXPECT_EQ(info.rank_of("model.layers.0.self_attn.xq_proj"), 8);  // not at a "." boundary
    EXPECT_EQ(info.rank_of("model.layers.1.mlp.down_proj"), 2);
    EXPECT_EQ(info.rank_of("model.layers.11.mlp.down_proj"), 8);
    EXPECT_EQ(info.alpha_of("model.layers.3.self_attn.k_proj"), 64.0f);
    EXPECT_EQ(info.alpha_of("model.layers.3.self_attn.v_proj"), 16.0f);
    EXPECT_EQ(info.scale_of("model.layers.3.self_attn.k_proj"), 8.0f);  // 64 / 8
    EXPECT_EQ(info.scale_of("model.layers.3.self_attn.q_proj"), 4.0f);  // 16 / 4
    info.spec.rslora = true;
    EXPECT_EQ(info.scale_of("model.layers.3.self_attn.q_proj"), 8.0f);  // 16 / √4
    info.arch = Arch::GPT2;  // PEFT sees GPT-2's modules under "transformer."
    info.rank_pattern = {{"transformer.h.0.attn.c_attn", 4}};
    EXPECT_EQ(info.rank_of("h.0.attn.c_attn"), 4);
    info.arch = Arch::Llama;
    info.rank_pattern = {{"q_proj", 4}, {"self_attn.q_proj", 2}};
    EXPECT_NE(error_of([&] {
                  info.rank_of("model.layers.0.self_attn.q_proj");
              }).find("rank_pattern keys 'q_proj' and 'self_attn.q_proj' both match"),
              std::string::npos);
    info.rank_pattern = {{"q_proj", 4}, {"self_attn.q_proj", 4}};  // the same value: fine
    EXPECT_EQ(info.rank_of("model.layers.0.self_attn.q_proj"), 4);
}

}  // namespace peft_test
}  // namespace ete
