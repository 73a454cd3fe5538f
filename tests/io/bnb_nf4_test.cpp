// tests/io/bnb_nf4_test.cpp — NF4 weights in bitsandbytes' safetensors layout: write -> read bit
// for bit (with and without double quantization), `ete quantize` dirs that load into the exact
// NF4 buffers quantize-on-load gives, and one-line errors for malformed quantized tensors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/io/bnb_nf4.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "numerics.h"
#include "test_util.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct TmpDir {
    fs::path p = fs::temp_directory_path() /
                 ("ete_bnb_" + std::to_string(::getpid()) + "_" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TmpDir() { fs::create_directories(p); }
    ~TmpDir() { fs::remove_all(p); }
    std::string operator/(const std::string& s) const { return (p / s).string(); }
};

Nf4Tensor random_nf4(int64_t rows, int64_t cols, bool dq) {
    std::mt19937 g(3);
    std::normal_distribution<float> nd;
    std::vector<float> x(size_t(rows * cols));
    for (auto& v : x) v = nd(g);
    return nf4_quantize(x.data(), rows, cols, {64, dq});
}

void write(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& t) {
    write_safetensors(path, t, {{"format", "pt"}});
}

TEST(BnbNf4, WriteThenReadIsBitForBit) {
    TmpDir d;
    for (bool dq : {true, false}) {
        const Nf4Tensor t = random_nf4(70, 33, dq);  // 2310 elements: a partial last block
        std::vector<std::pair<std::string, Tensor>> out;
        append_bnb_nf4(out, "w.weight", t);
        write(d / "a.safetensors", out);
        const auto f = SafetensorsFile::open(d / "a.safetensors");
        EXPECT_TRUE(is_bnb_quantized(f, "w.weight"));
        EXPECT_EQ(f.info("w.weight").shape, (Shape{1155, 1}));
        EXPECT_EQ(f.info("w.weight.absmax").dtype, dq ? DType::U8 : DType::F32);
        EXPECT_EQ(f.has("w.weight.nested_quant_map"), dq);
        const Nf4Tensor back = read_bnb_nf4(f, "w.weight", {70, 33});
        EXPECT_EQ(back.packed, t.packed);
        EXPECT_EQ(back.absmax, t.absmax);
        EXPECT_EQ(back.absmax_q, t.absmax_q);
        EXPECT_EQ(back.nested_absmax, t.nested_absmax);
        EXPECT_EQ(back.nested_map, t.nested_map);
        EXPECT_EQ(back.offset, t.offset);
        const std::string st(
            reinterpret_cast<const char*>(f.bytes("w.weight" + std::string(kBnbNf4State)).data()),
            f.bytes("w.weight" + std::string(kBnbNf4State)).size());
        const json j = json::parse(st);
        EXPECT_EQ(j["quant_type"], "nf4");
        EXPECT_EQ(j["blocksize"], 64);
        EXPECT_EQ(j["shape"], json({70, 33}));
    }
}

// A quantized tensor with one entry replaced by `bad` (or removed when bad is undefined).
std::string error_with(const std::string& dir, const std::string& entry, std::optional<Tensor> bad,
                       const std::string& state = "") {
    const Nf4Tensor t = random_nf4(8, 64, true);
    std::vector<std::pair<std::string, Tensor>> out;
    append_bnb_nf4(out, "w.weight", t);
    std::erase_if(out, [&](const auto& e) { return e.first == entry && !bad; });
    for (auto& [n, v] : out) {
        if (n == entry) v = *bad;
        if (!state.empty() && n == "w.weight" + std::string(kBnbNf4State)) {
            v = Tensor::empty({int64_t(state.size())}, DType::U8);
            std::memcpy(v.data(), state.data(), state.size());
        }
    }
    write(dir + "/b.safetensors", out);
    const auto f = SafetensorsFile::open(dir + "/b.safetensors");
    return error_of([&] { read_bnb_nf4(f, "w.weight", {8, 64}); });
}

TEST(BnbNf4, MalformedTensorsAreOneLineErrors) {
    TmpDir d;
    const std::string dir = d / "";
    EXPECT_NE(error_with(dir, "w.weight.nested_absmax", Tensor::zeros({2}, DType::F32))
                  .find("has 2 elements, expected 1"),
              std::string::npos);
    Tensor nan1 = Tensor::zeros({1}, DType::F32);
    nan1.f32()[0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_NE(error_with(dir, "w.weight.nested_absmax", nan1).find("element 0 is nan"),
              std::string::npos);
    Tensor map = Tensor::zeros({16}, DType::F32);
    EXPECT_NE(error_with(dir, "w.weight.quant_map", map).find("quant_map[0] = 0, expected the NF4"),
              std::string::npos);
    EXPECT_NE(error_with(dir, "", std::nullopt,
                         R"({"quant_type": "fp4", "blocksize": 64, "shape": [8, 64]})")
                  .find("quant_type 'fp4', expected nf4"),
              std::string::npos);
    EXPECT_NE(error_with(dir, "", std::nullopt,
                         R"({"quant_type": "nf4", "blocksize": 48, "shape": [8, 64]})")
                  .find("NF4 block size 48 is not a power of two"),
              std::string::npos);
    EXPECT_NE(error_with(dir, "", std::nullopt,
                         R"({"quant_type": "nf4", "blocksize": 64, "shape": [64, 8]})")
                  .find("quant state shape [64,8], expected [8, 64]"),
              std::string::npos);
    EXPECT_NE(error_with(dir, "w.weight.nested_quant_map", std::nullopt)
                  .find("'w.weight.nested_quant_map' is missing"),
              std::string::npos);
}

// Numbers are never narrowed (64.5 read as 64, "64" a bare JSON type error) and the statistics
// are checked for range, not only finiteness (a negative absmax flips a block; an all-zero map
// decodes every absmax to the offset; 3e38 overflowed every product).
TEST(BnbNf4, QuantStateNumbersAndStatisticsAreChecked) {
    TmpDir d;
    const std::string dir = d / "";
    for (const char* bs : {"64.5", "\"64\"", "true", "18446744073709551616"}) {
        const std::string e = error_with(
            dir, "", std::nullopt,
            fmt::format(R"({{"quant_type": "nf4", "blocksize": {}, "shape": [8, 64]}})", bs));
        EXPECT_NE(e.find("quant state: field 'blocksize' = "), std::string::npos)
            << bs << ": " << e;
    }
    Tensor neg = Tensor::zeros({1}, DType::F32);
    neg.f32()[0] = -0.5f;
    EXPECT_NE(
        error_with(dir, "w.weight.nested_absmax", neg).find("element 0 is -0.5, expected [0,"),
        std::string::npos);
    Tensor huge = Tensor::zeros({1}, DType::F32);
    huge.f32()[0] = 3e38f;
    const std::string e_huge = error_with(dir, "w.weight.nested_absmax", huge);
    EXPECT_NE(e_huge.find("element 0 is 3e+38, expected [0, "), std::string::npos) << e_huge;
    EXPECT_NE(error_with(dir, "w.weight.nested_quant_map", Tensor::zeros({256}, DType::F32))
                  .find("is not bitsandbytes' dynamic map"),
              std::string::npos);
}

TEST(BnbNf4, QuantizedDirLoadsTheBuffersQuantizeOnLoadGives) {
    TmpDir d;
    ModelConfig c;
    c.vocab_size = 40;
    c.hidden_size = 64;
    c.intermediate_size = 100;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.max_position_embeddings = 16;
    auto be = make_cpu_backend();
    Transformer full(c, *be);
    full.params().init(5);
    save_hf_model(d / "base", c, full.params().to_host(), "");
    const double bits = quantize_model_dir(d / "base", d / "q", {64, true});
    EXPECT_GT(bits, 4.127);  // small tensors: the per-tensor 1 KB map counts
    const json cfg = json::parse(read_file(d / "q/config.json"));
    EXPECT_EQ(cfg["quantization_config"]["bnb_4bit_quant_type"], "nf4");
    EXPECT_EQ(cfg["quantization_config"]["bnb_4bit_use_double_quant"], true);
    LoraSpec s;
    s.enabled = true;
    s.base_format = "nf4";
    Transformer on_load(c, *be, {}, DType::F32, s), pre(c, *be, {}, DType::F32, s);
    load_hf_weights(d / "base", on_load.params());
    load_hf_weights(d / "q", pre.params());
    for (int i = 0; i < pre.params().size(); ++i) {
        if (pre.params().trainable(i)) continue;
        EXPECT_EQ(pre.params().download(i), on_load.params().download(i))
            << pre.params().specs()[size_t(i)].name;
    }
    // Quantizing twice is refused; a plain model loads the quantized dir dequantized.
    EXPECT_NE(
        error_of([&] { quantize_model_dir(d / "q", d / "q2", {}); }).find("already quantized"),
        std::string::npos);
    Transformer plain(c, *be);
    load_hf_weights(d / "q", plain.params());
    const int q0 = plain.params().index("model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(plain.params().download(q0), on_load.params().download(on_load.params().index(
                                               "model.layers.0.self_attn.q_proj.weight")));
}

// A dir in bitsandbytes' layout written by tools/gen_bnb_dir.py (an independent implementation of
// its serialisation): ETE reads its NF4 weights bit for bit, and runs the model it describes.
TEST(BnbNf4, ReadsADirWrittenInBitsandbytesLayout) {
    const std::string dir = std::string(ETE_SOURCE_DIR) + "/tests/golden/hf/llama_bnb_nf4";
    const ModelConfig c = load_hf_config(dir);
    const auto expected = SafetensorsFile::open(dir + "/expected.safetensors");
    auto be = make_cpu_backend();
    LoraSpec s;
    s.enabled = true;
    s.base_format = "nf4";
    Transformer q(c, *be, {}, DType::F32, s);
    load_hf_weights(dir, q.params());
    int checked = 0;
    for (int i = 0; i < q.params().size(); ++i) {
        if (!q.params().is_nf4(i)) continue;
        const std::string& name = q.params().specs()[size_t(i)].name;
        Tensor want = expected.to_f32("dequant." + name);
        const std::vector<float> got = q.params().download(i);
        ASSERT_EQ(got.size(), size_t(want.numel()));
        for (size_t k = 0; k < got.size(); ++k)
            ASSERT_EQ(got[k], want.f32()[k]) << name << " [" << k << "]";
        ++checked;
    }
    EXPECT_EQ(checked, 14);
    // The plain (f32) model reads the same weights dequantized; its logits are the golden's.
    Transformer plain(c, *be);
    load_hf_weights(dir, plain.params());
    Tensor in = expected.to_tensor("inputs");
    const int B = int(in.dim(0)), T = int(in.dim(1));
    std::vector<int32_t> ids(in.i32(), in.i32() + in.numel());
    std::vector<float> logits(size_t(B * T * c.vocab_size));
    plain.setup(B, T);
    plain.forward_logits(ids.data(), B, T, logits.data());
    Tensor want = expected.to_f32("logits");
    double err = 0, scale = 0;
    for (size_t k = 0; k < logits.size(); ++k) {
        err = std::max(err, std::fabs(double(logits[k]) - want.f32()[k]));
        scale = std::max(scale, std::fabs(double(want.f32()[k])));
    }
    // The golden is float64 maths on the dequantized weights (rounded once to f32): ETE's own f32
    // rounding along the forward chain, with 4 more roundings a layer for its approximate
    // exp/sigmoid (numerics.h; as tests/io/hf_dirs_test.cpp).
    EXPECT_LT(err / scale, testing::golden_logit_bound(c, T));
}

}  // namespace
}  // namespace ete
