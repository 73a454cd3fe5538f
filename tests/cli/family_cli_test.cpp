// tests/cli/family_cli_test.cpp — the model-family contract through the real binary, for every
// family: a Hugging Face dir fine-tunes (`ete train --set model.init_from=DIR`) into a final/ of
// the same family (model_type, class, tensor names, config keys), QLoRA over it writes a PEFT dir
// with the family's module names, and `ete generate` and `ete export merged` run base + adapter.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "ete/model/lora_spec.h"
#include "phi3_rope.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Each family on one small shape: GQA, a window of 4 where the family has one, Phi-3 rotating
// half of each head with LongRoPE (the runs' sequences of 8 pass its original context of 4).
ModelConfig tiny(const Family& f, int vocab) {
    ModelConfig c;
    c.arch = f.arch;
    c.use_family_defaults();
    c.vocab_size = vocab;
    c.hidden_size = 64;
    c.intermediate_size = 64;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = f.layout == Layout::GPT2 ? 4 : 2;
    c.max_position_embeddings = 32;
    c.tie_word_embeddings = f.always_tied;
    if (f.window != WindowRule::None) c.sliding_window = 4;
    if (f.window == WindowRule::FromMaxWindowLayers) c.window_from_layer = 1;
    if (f.arch == Arch::Phi3) testing::phi3_rope(c, 0.5, 4);
    return c;
}

std::set<std::string> tensor_names(const std::string& file) {
    const auto f = SafetensorsFile::open(file);
    return {f.names().begin(), f.names().end()};
}

class FamilyCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_family_cli_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        vocab_ = Tokenizer::load(tok_).vocab_size();
        std::vector<int32_t> ids;
        for (int i = 0; i < 2000; ++i) ids.push_back(int32_t((i * 7 + i / 5) % vocab_));
        write_token_shard(path("t.bin"), ids, vocab_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& s) const { return (dir_ / s).string(); }
    ShellResult train(const std::string& out, const std::string& extra) {
        return run_shell(ete_cmd(
            "train --set model.init_from=" + path("base") +
            " --set train.steps=2 --set train.micro_batch=2" +
            " --set train.seq_len=8 --set train.eval_every=0" + " --set data.train=" +
            path("t.bin") + " --set data.tokenizer=\"\" --out " + path(out) + extra + " 2>&1"));
    }

    fs::path dir_;
    std::string tok_ = std::string(ETE_SOURCE_DIR) + "/tests/data/llama2_tokenizer.json";
    int vocab_ = 0;
};

TEST_F(FamilyCli, EveryFamilyFineTunesGeneratesAndSavesItsOwnFormat) {
    for (const Family& f : families()) {
        SCOPED_TRACE(f.name);
        fs::remove_all(dir_ / "base");
        for (const char* d : {"full", "lora", "merged"}) fs::remove_all(dir_ / d);
        const ModelConfig c = tiny(f, vocab_);
        HostParams p(param_specs(c));
        p.init(5);
        save_hf_model(path("base"), c, p, tok_);

        // Full fine-tune: final/ is the same family with the same keys and tensors.
        ShellResult r = train("full", "");
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(r.out.find("ignoring"), std::string::npos) << r.out;  // every key is read
        const json base_cfg = read_json_file(path("base/config.json"));
        const json final_cfg = read_json_file(path("full/final/config.json"));
        for (const char* key : {"model_type", "architectures", "rope_scaling", "sliding_window",
                                "partial_rotary_factor", "layer_types", "final_logit_softcapping",
                                "attn_logit_softcapping", "original_max_position_embeddings"})
            EXPECT_EQ(final_cfg.value(key, json()), base_cfg.value(key, json())) << key;
        EXPECT_EQ(final_cfg["model_type"], f.model_type);
        EXPECT_EQ(tensor_names(path("full/final/model.safetensors")),
                  tensor_names(path("base/model.safetensors")));
        EXPECT_TRUE(fs::exists(path("full/final/tokenizer.json")));

        // QLoRA on every linear: a PEFT dir with the family's module names.
        r = train("lora",
                  " --set lora.enabled=true --set lora.targets=all-linear"
                  " --set lora.r=4 --set lora.base_format=nf4 --set lora.nf4_blocksize=32");
        ASSERT_EQ(r.code, 0) << r.out;
        const json ac = read_json_file(path("lora/final/adapter_config.json"));
        std::set<std::string> want;
        for (ParamRole role : linear_roles({"all-linear"}, f.arch))
            want.insert(lora_module_name(role, f.arch));
        EXPECT_EQ(ac["target_modules"].get<std::set<std::string>>(), want);
        const std::set<std::string> adapters =
            tensor_names(path("lora/final/adapter_model.safetensors"));
        for (const std::string& m : want) {
            bool found = false;
            for (const std::string& n : adapters)
                found = found || n.find("." + m + ".lora_B.weight") != std::string::npos;
            EXPECT_TRUE(found) << m;
        }

        // Base + adapter generate and merge into a dir of the family.
        r = run_shell(ete_cmd("generate --model " + path("base") + " --adapter " +
                              path("lora/final") +
                              " --prompt Hello --temperature 0 --max-new-tokens 4 2>&1"));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(r.out.rfind("Hello", 0), 0u) << r.out;
        r = run_shell(ete_cmd("export merged --model " + path("base") + " --adapter " +
                              path("lora/final") + " --out " + path("merged") + " 2>&1"));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_EQ(load_hf_config(path("merged")).arch, f.arch);
    }
}

// A key that neither ETE nor the family's class reads is named once, and the dir still loads; one
// that asks for what the class does not build is a one-line error and a non-zero exit.
TEST_F(FamilyCli, ConfigKeysNoOneReadsAreNamedAndChangesAreRefused) {
    const ModelConfig c = tiny(family(Arch::Phi3), vocab_);
    HostParams p(param_specs(c));
    p.init(5);
    save_hf_model(path("base"), c, p, tok_);
    json cfg = read_json_file(path("base/config.json"));
    cfg["zeta_scale"] = 2;
    write_file_atomic(path("base/config.json"), cfg.dump());
    ShellResult r = run_shell(ete_cmd("inspect --summary " + path("base") + " 2>&1"));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string note =
        "config.json: ignoring zeta_scale (Hugging Face's Phi3ForCausalLM "
        "does not read it either)";
    ASSERT_NE(r.out.find(note), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(note, r.out.find(note) + 1), std::string::npos) << r.out;  // once
    // A hostile key is shown cut at 64 characters, control characters as '?'.
    const std::string hostile = "line\nbreak" + std::string(100, 'k');
    cfg[hostile] = 1;
    write_file_atomic(path("base/config.json"), cfg.dump());
    r = run_shell(ete_cmd("inspect --summary " + path("base") + " 2>&1"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ignoring line?break" + std::string(54, 'k') + ", zeta_scale (Hugging"),
              std::string::npos)
        << r.out;
    cfg.erase(hostile);

    cfg["lm_head_bias"] = true;
    write_file_atomic(path("base/config.json"), cfg.dump());
    r = run_shell(ete_cmd("inspect --summary " + path("base") + " 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("config.json: lm_head_bias = true is not supported for phi3"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

}  // namespace
}  // namespace ete
