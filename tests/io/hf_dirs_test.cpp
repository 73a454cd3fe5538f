// tests/io/hf_dirs_test.cpp — real HF model directories: the dirs in tests/golden/hf (written by
// tools/gen_hf_dirs.py the way save_pretrained writes them) load and reproduce PyTorch's logits;
// sharded saving follows HF's split and naming and round-trips bit-exactly; a sharded dir that
// disagrees with its index is rejected with a message naming the file and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/core/rng.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "numerics.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Tensors = std::vector<std::pair<std::string, Tensor>>;

// max |ete - torch| / max |torch| over the logits. The torch logits are float64 maths on the
// stored weights (rounded once to f32), so this bounds ETE's own f32 rounding on the cpu backend
// (blocked GEMMs, SIMD reductions, approximate exp/tanh — a few ulp each, counted as 4 more
// roundings a layer): gamma_prob of the forward chain (numerics.h; ~1.5e-5 for these 2-layer
// models, measured ~2.7e-7). A wrong layout, a transposed Conv1D or a mis-converted BF16 weight
// gives errors of order 1.
double logit_tolerance(const ModelConfig& c, int64_t T) {
    return testing::golden_logit_bound(c, T);
}

std::string hf_dir(const std::string& name) {
    return std::string(ETE_SOURCE_DIR) + "/tests/golden/hf/" + name;
}

// Loads `dir` into a fresh Transformer and returns the relative max logit error; its bound in
// *tol_out.
double logit_error(const std::string& dir, ModelConfig* cfg_out = nullptr,
                   std::vector<float>* params_out = nullptr, double* tol_out = nullptr) {
    ModelConfig cfg = load_hf_config(dir);
    auto expected = SafetensorsFile::open(dir + "/expected.safetensors");
    Tensor in = expected.to_tensor("inputs"), want = expected.to_f32("logits");
    int B = int(in.dim(0)), T = int(in.dim(1));
    EXPECT_EQ(want.shape(), (Shape{B, T, cfg.vocab_size}));
    auto backend = make_cpu_backend();
    Transformer model(cfg, *backend);
    model.setup(B, T);
    load_hf_weights(dir, model.params());
    std::vector<float> got(size_t(B) * size_t(T) * size_t(cfg.vocab_size));
    model.forward_logits(in.i32(), B, T, got.data());
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::abs(double(got[i]) - double(want.f32()[i])));
        ref = std::max(ref, std::abs(double(want.f32()[i])));
    }
    if (cfg_out) *cfg_out = cfg;
    if (params_out) *params_out = model.params().to_host().data_vector();
    if (tol_out) *tol_out = logit_tolerance(cfg, T);
    return err / ref;
}

TEST(HfDirsTest, Gpt2PrefixedWithMaskBuffersMatchesTorch) {
    ModelConfig cfg;
    double tol = 0;
    double err = logit_error(hf_dir("gpt2_prefixed"), &cfg, nullptr, &tol);
    std::cout << "gpt2_prefixed: relative max logit error " << err << "\n";
    EXPECT_EQ(cfg.arch, Arch::GPT2);
    EXPECT_EQ(cfg.intermediate_size, 4 * cfg.hidden_size);  // n_inner null -> 4C
    EXPECT_LT(err, tol);
}

TEST(HfDirsTest, LlamaBf16GqaUntiedMatchesTorch) {
    ModelConfig cfg;
    double tol = 0;
    double err = logit_error(hf_dir("llama_bf16"), &cfg, nullptr, &tol);
    std::cout << "llama_bf16: relative max logit error " << err << "\n";
    EXPECT_EQ(cfg.arch, Arch::Llama);
    EXPECT_EQ(cfg.num_kv_heads, 2);
    EXPECT_EQ(cfg.num_heads, 4);
    EXPECT_FALSE(cfg.tie_word_embeddings);
    EXPECT_LT(err, tol);
}

TEST(HfDirsTest, LlamaBf16ShardedMatchesTorchAndSingleFile) {
    std::vector<float> sharded, single;
    double tol = 0;
    double err = logit_error(hf_dir("llama_bf16_sharded"), nullptr, &sharded, &tol);
    std::cout << "llama_bf16_sharded: relative max logit error " << err << "\n";
    EXPECT_LT(err, tol);
    EXPECT_FALSE(fs::exists(hf_dir("llama_bf16_sharded") + "/model.safetensors"));
    logit_error(hf_dir("llama_bf16"), nullptr, &single);
    ASSERT_EQ(sharded.size(), single.size());
    for (size_t i = 0; i < single.size(); ++i) ASSERT_EQ(sharded[i], single[i]) << i;
}

ModelConfig tiny_llama() {
    ModelConfig c;
    c.arch = Arch::Llama;
    c.vocab_size = 37;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.max_position_embeddings = 32;
    c.tie_word_embeddings = false;
    return c;
}

uint64_t f32_bytes(const ParamSpec& s) {
    return uint64_t(shape_numel(hf_shape(s))) * 4;
}

class HfShardTest : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("ete_hf_dirs_" + std::to_string(::getpid()));
        fs::create_directories(root_);
        store_.init(11);
    }
    void TearDown() override { fs::remove_all(root_); }

    // Saves the tiny model split at `limit` bytes into root/name and returns the dir.
    std::string save(const std::string& name, uint64_t limit) {
        std::string d = (root_ / name).string();
        save_hf_model(d, cfg_, store_, "", limit);
        return d;
    }
    static json index(const std::string& d) {
        return json::parse(read_file(d + "/model.safetensors.index.json"));
    }
    // The load error for `d`, or "" when it loads.
    std::string load_error(const std::string& d) {
        HostParams b(param_specs(cfg_));
        try {
            load_hf_weights(d, b);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    static Tensors read_all(const std::string& path) {
        Tensors ts;
        auto f = SafetensorsFile::open(path);
        for (const auto& n : f.names()) ts.emplace_back(n, f.to_tensor(n));
        return ts;
    }

    ModelConfig cfg_ = tiny_llama();
    HostParams store_{param_specs(tiny_llama())};
    fs::path root_;
};

TEST_F(HfShardTest, SplitsLikeHfAndRoundTripsBitExact) {
    const auto& specs = store_.specs();
    uint64_t total = 0;
    for (const auto& s : specs) total += f32_bytes(s);
    const uint64_t limit = total / 3;
    std::string d = save("m", limit);
    json j = index(d);
    EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), total);
    EXPECT_FALSE(fs::exists(d + "/model.safetensors"));
    const json& map = j["weight_map"];
    EXPECT_EQ(map.size(), specs.size());  // every tensor once, nothing else
    // Expected split, recomputed: ParamSpec order, new shard when the next tensor won't fit.
    std::vector<int> shard_of;
    uint64_t fill = 0;
    int k = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        if (i > 0 && fill + f32_bytes(specs[i]) > limit) ++k, fill = 0;
        fill += f32_bytes(specs[i]);
        shard_of.push_back(k);
    }
    const int n = k + 1;
    ASSERT_GE(n, 3);
    for (size_t i = 0; i < specs.size(); ++i) {
        ASSERT_TRUE(map.contains(specs[i].name)) << specs[i].name;
        std::string file = map[specs[i].name];
        // HF's naming: 1-based shard index and count, both zero-padded to 5 digits.
        EXPECT_EQ(file, fmt::format("model-{:05d}-of-{:05d}.safetensors", shard_of[i] + 1, n));
        EXPECT_TRUE(SafetensorsFile::open(d + "/" + file).has(specs[i].name)) << specs[i].name;
    }
    int files = 0;
    for (const auto& e : fs::directory_iterator(d)) {
        std::string name = e.path().filename().string();
        files += name.rfind("model-", 0) == 0 && name.ends_with(".safetensors");
    }
    EXPECT_EQ(files, n);

    HostParams b(param_specs(load_hf_config(d)));
    load_hf_weights(d, b);
    ASSERT_EQ(b.numel(), store_.numel());
    for (int64_t i = 0; i < b.numel(); ++i) ASSERT_EQ(b.data()[i], store_.data()[i]) << i;
}

TEST_F(HfShardTest, TensorLargerThanLimitGetsOwnShardAndDefaultIsOneFile) {
    // A 1-byte limit: every tensor exceeds it, so each sits alone.
    std::string d = save("tiny_limit", 1);
    const size_t n = store_.specs().size();
    json map = index(d)["weight_map"];
    std::set<std::string> files;
    for (const auto& [name, file] : map.items()) files.insert(file.get<std::string>());
    EXPECT_EQ(files.size(), n);
    EXPECT_EQ(map[store_.specs().back().name],
              fmt::format("model-{:05d}-of-{:05d}.safetensors", n, n));
    EXPECT_EQ(load_error(d), "");
    // Re-saving with the default limit over the same dir replaces the shards with one file.
    save_hf_model(d, cfg_, store_, "");
    EXPECT_TRUE(fs::exists(d + "/model.safetensors"));
    EXPECT_FALSE(fs::exists(d + "/model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(d + "/model-00001-of-" + fmt::format("{:05d}", n) + ".safetensors"));
    EXPECT_THROW(save_hf_model(d, cfg_, store_, "", 0), Error);
}

// Saving from a fetch (what a trainer on many ranks does, one tensor at a time) writes the same
// bytes as saving a host copy, single-file and sharded, in each dtype, fetching each parameter
// exactly once; a fetch that throws half-way leaves the dir that was there as it was, and no
// temporary dir behind.
TEST_F(HfShardTest, SavingFromAFetchWritesTheSameFilesAndAFailedFetchKeepsTheOldDir) {
    const uint64_t several = f32_bytes(store_.specs()[0]);  // the embedding's bytes: shards
    for (DType dt : {DType::F32, DType::BF16}) {
        for (uint64_t max_bytes : {kDefaultMaxShardBytes, several}) {
            const std::string a = (root_ / "a").string(), b = (root_ / "b").string();
            save_hf_model(a, cfg_, store_, "", max_bytes, dt);
            std::vector<int> fetched(size_t(store_.size()), 0);
            save_hf_model(
                b, cfg_, ParamTable(store_.specs()),
                [&](int i, float* out) {
                    ++fetched[size_t(i)];
                    std::copy_n(store_.param(i), store_.numel(i), out);
                },
                "", max_bytes, dt);
            for (int i = 0; i < store_.size(); ++i) EXPECT_EQ(fetched[size_t(i)], 1) << i;
            std::set<std::string> names;
            for (const auto& e : fs::directory_iterator(a)) {
                const std::string n = e.path().filename().string();
                names.insert(n);
                EXPECT_EQ(read_file(b + "/" + n), read_file(e.path().string())) << n;
            }
            EXPECT_GT(names.size(), max_bytes == kDefaultMaxShardBytes ? 2u : 4u);
            for (const auto& e : fs::directory_iterator(b))
                EXPECT_TRUE(names.count(e.path().filename().string())) << e.path();
        }
    }
    const std::string d = save("kept", kDefaultMaxShardBytes);
    const std::string before = read_file(d + "/model.safetensors");
    int calls = 0;
    auto failing = [&](int i, float* out) {
        if (++calls == 3) throw Error("rank 2 lost");
        std::copy_n(store_.param(i), store_.numel(i), out);
    };
    try {
        save_hf_model(d, cfg_, ParamTable(store_.specs()), failing, "");
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2 lost"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_file(d + "/model.safetensors"), before);
    for (const auto& e : fs::directory_iterator(root_))
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A saved dir carries its tokenizer's tokenizer_config.json and special_tokens_map.json (the chat
// template, the special tokens) byte for byte when they sit beside the tokenizer.json it copies;
// with a bare tokenizer.json it writes neither.
TEST_F(HfShardTest, SaveKeepsTheFilesBesideTheTokenizer) {
    const fs::path src = root_ / "tok";
    fs::create_directories(src);
    const std::string tj = (src / "tokenizer.json").string(), tokenizer = R"({"model": {}})";
    const std::string config =
        R"({"chat_template": "{{ messages[0].content }}", "eos_token": "e"})";
    const std::string specials = R"({"eos_token": {"content": "e"}})";
    write_file_atomic(tj, tokenizer);
    save_hf_model((root_ / "bare").string(), cfg_, store_, tj);
    EXPECT_EQ(read_file((root_ / "bare" / "tokenizer.json").string()), tokenizer);
    EXPECT_FALSE(fs::exists(root_ / "bare" / "tokenizer_config.json"));
    EXPECT_FALSE(fs::exists(root_ / "bare" / "special_tokens_map.json"));
    write_file_atomic((src / "tokenizer_config.json").string(), config);
    write_file_atomic((src / "special_tokens_map.json").string(), specials);
    save_hf_model((root_ / "m").string(), cfg_, store_, tj);
    EXPECT_EQ(read_file((root_ / "m" / "tokenizer.json").string()), tokenizer);
    EXPECT_EQ(read_file((root_ / "m" / "tokenizer_config.json").string()), config);
    EXPECT_EQ(read_file((root_ / "m" / "special_tokens_map.json").string()), specials);
}

// model_dir_hash: "xxh3:" and 16 hex digits, the same for a copy, another for a flipped byte of a
// weight file or an edited config.json; model_dir_hash_like gives the FNV-1a form ETE recorded
// before for a value of that form (checked against the loop below), the new one otherwise.
TEST_F(HfShardTest, ModelDirHashAndItsOlderForm) {
    const std::string d = save("h", 4000);
    const std::string h = model_dir_hash(d);
    ASSERT_EQ(h.size(), 21u);
    EXPECT_EQ(h.rfind("xxh3:", 0), 0u);
    EXPECT_EQ(h.find_first_not_of("0123456789abcdef", 5), std::string::npos) << h;
    fs::copy(d, root_ / "copy");
    EXPECT_EQ(model_dir_hash((root_ / "copy").string()), h);
    EXPECT_EQ(model_dir_hash_like(d, h), h);
    // The older form, computed here from its definition: FNV-1a 64 of each file's bytes,
    // "name:hex;" of config.json and the .safetensors files in name order, stable_hash of that
    // (core/rng.h: FNV-1a with its own frozen offset basis).
    auto fnv = [](const std::string& bytes) {
        uint64_t x = 14695981039346656037ull;
        for (char c : bytes) x = (x ^ uint8_t(c)) * 1099511628211ull;
        return x;
    };
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d))
        if (e.path().filename() == "config.json" || e.path().extension() == ".safetensors")
            names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    ASSERT_GT(names.size(), 2u);  // several shards
    std::string all;
    for (const std::string& n : names)
        all += fmt::format("{}:{:016x};", n, fnv(read_file(d + "/" + n)));
    const std::string old = fmt::format("{:016x}", stable_hash(all));
    EXPECT_EQ(model_dir_hash_like(d, "0123456789abcdef"), old);
    EXPECT_TRUE(is_legacy_model_dir_hash(old));
    for (const std::string& not_old :
         {h, std::string(""), std::string("0123456789abcde"), std::string("0123456789ABCDEF")})
        EXPECT_FALSE(is_legacy_model_dir_hash(not_old)) << not_old;
    // A flipped byte in a shard, an edited config: other fingerprints in both forms.
    const std::string shard = (root_ / "copy" / names[1]).string();
    std::string b = read_file(shard, UINT64_MAX);
    b[b.size() / 2] = char(b[b.size() / 2] ^ 1);
    write_file_atomic(shard, b);
    EXPECT_NE(model_dir_hash((root_ / "copy").string()), h);
    EXPECT_NE(model_dir_hash_like((root_ / "copy").string(), old), old);
    fs::copy(d, root_ / "copy2");
    write_file_atomic((root_ / "copy2" / "config.json").string(),
                      read_file(d + "/config.json") + " ");
    EXPECT_NE(model_dir_hash((root_ / "copy2").string()), h);
}

// The error tests break a dir saved with a 4000-byte limit (several shards of the 20 kB model).
TEST_F(HfShardTest, MissingShardNamesFileAndTensor) {
    std::string d = save("m", 4000);
    std::string file = index(d)["weight_map"]["model.norm.weight"];
    fs::remove(d + "/" + file);
    std::string msg = load_error(d);
    EXPECT_NE(msg.find("shard '" + file + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is missing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
}

TEST_F(HfShardTest, TensorMissingFromItsShardIsNamed) {
    std::string d = save("m", 4000);
    std::string file = index(d)["weight_map"]["model.norm.weight"];
    Tensors ts = read_all(d + "/" + file);
    std::erase_if(ts, [](const auto& p) { return p.first == "model.norm.weight"; });
    write_safetensors(d + "/" + file, ts);
    std::string msg = load_error(d);
    EXPECT_NE(msg.find(file + ": tensor 'model.norm.weight' listed in"), std::string::npos) << msg;
}

TEST_F(HfShardTest, ShardMustAgreeWithIndex) {
    std::string d = save("m", 4000);
    json j = index(d);
    std::string f1 = j["weight_map"]["model.embed_tokens.weight"];
    std::string fn = j["weight_map"]["lm_head.weight"];
    ASSERT_NE(f1, fn);
    // A tensor in a shard that the index does not list: reject rather than silently load it.
    json dropped = j;
    dropped["weight_map"].erase("model.norm.weight");
    write_file_atomic(d + "/model.safetensors.index.json", dropped.dump());
    std::string msg = load_error(d);
    EXPECT_NE(msg.find("tensor 'model.norm.weight' is not in the index weight_map"),
              std::string::npos)
        << msg;
    // The same tensor in two shards.
    write_file_atomic(d + "/model.safetensors.index.json", j.dump());
    Tensors last = read_all(d + "/" + fn);
    last.emplace_back("model.embed_tokens.weight",
                      SafetensorsFile::open(d + "/" + f1).to_tensor("model.embed_tokens.weight"));
    write_safetensors(d + "/" + fn, last);
    msg = load_error(d);
    EXPECT_NE(msg.find("tensor 'model.embed_tokens.weight' is also in shard '" + f1 + "'"),
              std::string::npos)
        << msg;
}

TEST_F(HfShardTest, BadIndexIsRejected) {
    std::string d = save("m", 4000);
    const std::string index_path = d + "/model.safetensors.index.json";
    json j = index(d);
    auto error_with = [&](const std::string& text) {
        write_file_atomic(index_path, text);
        return load_error(d);
    };
    std::string msg = error_with("{\"weight_map\": {");
    EXPECT_NE(msg.find(index_path + ": invalid JSON"), std::string::npos) << msg;
    msg = error_with(R"({"metadata": {"total_size": 1}})");
    EXPECT_NE(msg.find(index_path + ": expected an object with a \"weight_map\""),
              std::string::npos)
        << msg;
    json escape = j;
    escape["weight_map"]["model.norm.weight"] = "../model.safetensors";
    msg = error_with(escape.dump());
    EXPECT_NE(msg.find("tensor 'model.norm.weight' maps to '../model.safetensors'"),
              std::string::npos)
        << msg;
    // Neither weights file: the message names both.
    fs::remove(index_path);
    msg = load_error(d);
    EXPECT_NE(msg.find("neither model.safetensors nor model.safetensors.index.json"),
              std::string::npos)
        << msg;
}

}  // namespace
}  // namespace ete
