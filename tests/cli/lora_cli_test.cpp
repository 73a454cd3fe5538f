// tests/cli/lora_cli_test.cpp — a QLoRA run through the real binary: final/ is a PEFT adapter
// dir, checkpoints hold adapters only, a resume continues bit for bit, a resume onto another base
// is refused, and `ete eval --adapter` scores base + adapter exactly as the model in process.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/core/json_file.h"
#include "ete/data/token_shard.h"
#include "ete/io/hf_model.h"
#include "ete/io/peft.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "numerics.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

ModelConfig tiny_llama() {
    ModelConfig c;
    c.vocab_size = 29;
    c.hidden_size = 32;
    c.intermediate_size = 40;
    c.num_layers = 2;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.max_position_embeddings = 16;
    return c;
}

// Two computations of the tiny model's forward that sum the same products in other orders (the
// CLI's inference model against the training one, other batch shapes, a merged weight against
// base + adapter): within reorder_prob of the chain of reductions to the loss (numerics.h), plus
// `extra` terms (an adapter's rank and the merge's rounding).
double forward_tolerance(const ModelConfig& c, int64_t T, int64_t N, int64_t extra = 0) {
    return testing::reorder_prob(testing::model_chain(c, T, N) + double(extra));
}

class LoraCli : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_lora_cli_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        auto be = make_cpu_backend();
        for (uint64_t seed : {11, 12}) {  // the base, and a different one
            Transformer m(cfg_, *be);
            m.params().init(seed);
            save_hf_model(path(seed == 11 ? "base" : "other"), cfg_, m.params().to_host(), "");
        }
        std::vector<int32_t> ids;
        for (int i = 0; i < 4000; ++i) ids.push_back((i * 7 + i / 5) % 29);
        write_token_shard(path("t.bin"), ids, 29);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& s) const { return (dir_ / s).string(); }
    ShellResult train(const std::string& base, const std::string& out, const std::string& extra) {
        return run_shell(
            ete_cmd("train --set model.init_from=" + path(base) + " --set lora.enabled=true" +
                    " --set lora.targets=all-linear --set lora.r=4 --set train.steps=6" +
                    " --set train.micro_batch=2 --set train.seq_len=8 --set train.eval_every=0" +
                    " --set train.checkpoint_every=3 --set data.train=" + path("t.bin") +
                    " --set data.tokenizer=\"\" --out " + path(out) + " " + extra + " 2>&1"));
    }

    fs::path dir_;
    ModelConfig cfg_ = tiny_llama();
};

TEST_F(LoraCli, FinalIsAPeftDirAndResumeIsBitExact) {
    ShellResult r = train("base", "run", "");
    ASSERT_EQ(r.code, 0) << r.out;
    // The start prints the memory estimate by term; the first steps the measured peak beside it.
    for (const char* term :
         {"memory estimate (rank 0): runtime", "| frozen base", "| adapters", "| optimizer",
          "| activations", "| workspace", "| peak", "memory: measured peak RSS"})
        EXPECT_NE(r.out.find(term), std::string::npos) << term << "\n" << r.out;
    const json cfg = json::parse(read_file(path("run/final/adapter_config.json")));
    EXPECT_EQ(cfg["peft_type"], "LORA");
    EXPECT_EQ(cfg["r"], 4);
    EXPECT_EQ(cfg["target_modules"].size(), 7u);
    EXPECT_EQ(cfg["base_model_name_or_path"], fs::absolute(path("base")).string());
    const auto final_w = SafetensorsFile::open(path("run/final/adapter_model.safetensors"));
    EXPECT_EQ(final_w.names().size(), 2u * 7 * 2);  // layers x modules x (A, B)
    EXPECT_TRUE(final_w.has("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"));
    // Checkpoints hold the adapters (and their moments), not the base.
    const auto ck = SafetensorsFile::open(path("run/checkpoints/step_00000003/model.safetensors"));
    EXPECT_EQ(ck.names().size(), final_w.names().size());
    for (const auto& n : ck.names()) EXPECT_NE(n.find(".lora_"), std::string::npos) << n;

    // Resume from step 3 in a fresh dir: the same final adapter, byte for byte.
    fs::create_directories(path("resumed/checkpoints"));
    fs::copy(path("run/checkpoints/step_00000003"), path("resumed/checkpoints/step_00000003"));
    r = train("base", "resumed", "--resume auto");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(read_file(path("resumed/final/adapter_model.safetensors")),
              read_file(path("run/final/adapter_model.safetensors")));

    // Onto another base: refused, naming why.
    fs::create_directories(path("wrong/checkpoints"));
    fs::copy(path("run/checkpoints/step_00000003"), path("wrong/checkpoints/step_00000003"));
    r = train("other", "wrong", "--resume auto");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("the base model's contents changed"), std::string::npos) << r.out;
}

// Checkpoints and adapters of an ETE from before the XXH3 fingerprint recorded the base's FNV one
// (16 hex digits): a resume compares in that form and goes on recording it, eval verifies it, and
// another base is still refused by each.
TEST_F(LoraCli, OlderFingerprintsOfTheBaseStillVerify) {
    ASSERT_EQ(train("base", "run", "").code, 0);
    const std::string legacy = model_dir_hash_like(path("base"), "0123456789abcdef");
    ASSERT_TRUE(is_legacy_model_dir_hash(legacy)) << legacy;
    ASSERT_NE(legacy, model_dir_hash(path("base")));
    // An older ETE's checkpoint: its state.json without file hashes and checksum.
    for (const char* out : {"old", "old_other"}) {
        const fs::path ck = path(std::string(out) + "/checkpoints/step_00000003");
        fs::create_directories(ck.parent_path());
        fs::copy(path("run/checkpoints/step_00000003"), ck);
        json st = json::parse(read_file((ck / "state.json").string()));
        st["run"]["lora.base_hash"] = legacy;
        st.erase("files");
        st.erase("checksum");
        write_file_atomic((ck / "state.json").string(), st.dump(2));
    }
    ShellResult r = train("base", "old", "--resume auto");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(read_file(path("old/final/adapter_model.safetensors")),
              read_file(path("run/final/adapter_model.safetensors")));
    EXPECT_EQ(read_json_file(path("old/final/adapter_config.json"))[kPeftBaseHashKey], legacy);
    r = train("other", "old_other", "--resume auto");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("the base model's contents changed"), std::string::npos) << r.out;
    const std::string tokens = " --tokens " + path("t.bin") + " --batch 2 --seq 6 2>&1";
    r = run_shell(
        ete_cmd("eval --model " + path("base") + " --adapter " + path("old/final") + tokens));
    EXPECT_EQ(r.code, 0) << r.out;
    r = run_shell(
        ete_cmd("eval --model " + path("other") + " --adapter " + path("old/final") + tokens));
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(
        r.out.find("was trained over a base with content hash " + legacy + ", but '" +
                   path("other") + "' hashes to " + model_dir_hash_like(path("other"), legacy)),
        std::string::npos)
        << r.out;
}

TEST_F(LoraCli, EvalWithAdapterScoresBasePlusAdapter) {
    ASSERT_EQ(train("base", "run", "").code, 0);
    const int B = 2, T = 6;
    ShellResult r =
        run_shell(ete_cmd("eval --model " + path("base") + " --adapter " + path("run/final") +
                          " --tokens " + path("t.bin") + " --batch 2 --seq 6 --json"));
    ASSERT_EQ(r.code, 0) << r.out;
    const double loss = json::parse(r.out)["loss"].get<double>();
    ShellResult plain = run_shell(ete_cmd("eval --model " + path("base") + " --tokens " +
                                          path("t.bin") + " --batch 2 --seq 6 --json"));
    ASSERT_EQ(plain.code, 0) << plain.out;
    EXPECT_NE(loss, json::parse(plain.out)["loss"].get<double>());  // the adapter matters

    // In process: the NF4 base plus the adapter (what the run trained).
    auto be = make_cpu_backend();
    const PeftAdapterInfo info = load_peft_config(path("run/final"), cfg_);
    EXPECT_EQ(info.spec.base_format, "nf4");
    Transformer m(cfg_, *be, {}, DType::F32, info.spec);
    load_hf_weights(path("base"), m.params());
    load_peft_weights(path("run/final"), cfg_, m.params(),
                      [&](int i, const float* v) { m.params().upload(i, v); });
    TokenShard shard(path("t.bin"));
    std::vector<int32_t> in, tgt;
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            in.push_back(shard.at(uint64_t(b * (T + 1) + t)));
            tgt.push_back(shard.at(uint64_t(b * (T + 1) + t + 1)));
        }
    m.setup(B, T);
    const double want = m.forward_loss(in.data(), tgt.data(), B, T) / (B * T);
    EXPECT_NEAR(loss, want, forward_tolerance(cfg_, T, B * T, 4) * want);
}

// final/ records the base's content hash: eval, generate and export merged over another base of
// the same shape are refused naming both (exit 1, nothing written) unless --allow-base-mismatch;
// an adapter without the hash (as PEFT writes it) loads with a notice.
TEST_F(LoraCli, AnAdapterOverAnotherBaseIsRefused) {
    ASSERT_EQ(train("base", "run", "").code, 0);
    const json cfg = read_json_file(path("run/final/adapter_config.json"));
    EXPECT_EQ(cfg[kPeftBaseHashKey], model_dir_hash(path("base")));
    const std::string other = "--model " + path("other") + " --adapter " + path("run/final");
    const std::string tokens = " --tokens " + path("t.bin") + " --batch 2 --seq 6";
    for (const std::string& cmd : {"eval " + other + tokens, "generate " + other + " --prompt x",
                                   "export merged " + other + " --out " + path("merged")}) {
        const ShellResult r = run_shell(ete_cmd(cmd + " 2>&1"));
        EXPECT_EQ(r.code, 1) << cmd;
        EXPECT_NE(r.out.find("was trained over a base with content hash " +
                             cfg[kPeftBaseHashKey].get<std::string>() + ", but '" + path("other") +
                             "' hashes to " + model_dir_hash(path("other"))),
                  std::string::npos)
            << r.out;
    }
    EXPECT_FALSE(fs::exists(path("merged")));
    ShellResult r = run_shell(ete_cmd("export merged " + other + " --out " + path("merged") +
                                      " --allow-base-mismatch 2>&1"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("--allow-base-mismatch: going on"), std::string::npos) << r.out;
    // The right base loads silently; a PEFT-written adapter (no hash) with a notice.
    r = run_shell(ete_cmd("eval --model " + path("base") + " --adapter " + path("run/final") +
                          tokens + " 2>&1"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("cannot be verified"), std::string::npos) << r.out;
    json peft = cfg;
    peft.erase(kPeftBaseHashKey);
    write_file_atomic(path("run/final/adapter_config.json"), peft.dump(2));
    r = run_shell(ete_cmd("eval " + other + tokens + " 2>&1"));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("records no base hash"), std::string::npos) << r.out;
}

double eval_loss(const std::string& args) {
    ShellResult r = run_shell(ete_cmd("eval " + args + " --batch 2 --seq 6 --json"));
    EXPECT_EQ(r.code, 0) << r.out;
    return r.code == 0 ? json::parse(r.out)["loss"].get<double>() : -1;
}

TEST_F(LoraCli, QuantizedDirTrainsBitIdenticallyAndMergesExactly) {
    ShellResult q = run_shell(ete_cmd("quantize --scheme nf4 --double-quant true --model " +
                                      path("base") + " --out " + path("q") + " 2>&1"));
    ASSERT_EQ(q.code, 0) << q.out;
    EXPECT_NE(q.out.find("bits per quantized parameter"), std::string::npos) << q.out;
    ASSERT_EQ(train("base", "from_base", "").code, 0);
    ASSERT_EQ(train("q", "from_q", "").code, 0);
    // Quantizing on load and loading the quantized dir: the same run, byte for byte.
    EXPECT_EQ(read_file(path("from_q/final/adapter_model.safetensors")),
              read_file(path("from_base/final/adapter_model.safetensors")));

    ShellResult m = run_shell(ete_cmd("export merged --model " + path("q") + " --adapter " +
                                      path("from_q/final") + " --out " + path("merged") + " 2>&1"));
    ASSERT_EQ(m.code, 0) << m.out;
    // The drift on the export's 2 x 16 probe: the merged weight W + s·B·A rounded once (1 + r
    // more terms on the chain), relative to the largest logit it printed beside it.
    const auto at = m.out.find("max |Δlogit| = "), at_max = m.out.find("(max |logit| ");
    ASSERT_NE(at, std::string::npos) << m.out;
    ASSERT_NE(at_max, std::string::npos) << m.out;
    const double drift = std::stod(m.out.substr(at + std::string("max |Δlogit| = ").size()));
    const double logit = std::stod(m.out.substr(at_max + std::string("(max |logit| ").size()));
    EXPECT_LT(drift, forward_tolerance(cfg_, 16, 32, 5) * logit) << m.out;
    const std::string data = " --tokens " + path("t.bin");
    const double merged = eval_loss("--model " + path("merged") + data);
    const double adapted =
        eval_loss("--model " + path("q") + " --adapter " + path("from_q/final") + data);
    EXPECT_NEAR(merged, adapted, forward_tolerance(cfg_, 6, 12, 5) * adapted);

    ShellResult nf4 =
        run_shell(ete_cmd("export merged --model " + path("q") + " --adapter " +
                          path("from_q/final") + " --out " + path("m4") + " --dtype nf4 2>&1"));
    EXPECT_NE(nf4.code, 0);
    EXPECT_NE(nf4.out.find("merging into NF4 is refused"), std::string::npos) << nf4.out;
    EXPECT_FALSE(fs::exists(path("m4")));
}

// Dynamic rank (patience 2): after step 4 a grow (|grad B|/|B| is large while B is young), after
// step 6 a shrink back (forced: every improvement is below the threshold 1), both logged; a
// resume from before them continues bit for bit (the controller's state is in the checkpoint);
// final/ holds rank-4 adapters whose lora_alpha keeps the trained scale (16 / 4).
TEST_F(LoraCli, DynamicRankChangesAreLoggedAndResumeIsBitExact) {
    const std::string dyn =
        "--set lora.dynamic_rank=true --set lora.r_max=8 --set lora.rank_patience=2 "
        "--set lora.rank_shrink_threshold=1";
    ShellResult r = train("base", "dyn", dyn);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("lora rank: 4 -> 8 after step 4 (grow"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("lora rank: 8 -> 4 after step 6 (shrink"), std::string::npos) << r.out;
    const std::string metrics = read_file(path("dyn/metrics.jsonl"));
    EXPECT_NE(metrics.find("\"rank_change\":\"grow 4 -> 8\""), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\"rank_change\":\"shrink 8 -> 4\""), std::string::npos);
    EXPECT_NE(metrics.find("\"lora_rank\":8"), std::string::npos);
    const json cfg = json::parse(read_file(path("dyn/final/adapter_config.json")));
    EXPECT_EQ(cfg["r"], 4);
    EXPECT_EQ(cfg["lora_alpha"], 16.0);
    const auto f = SafetensorsFile::open(path("dyn/final/adapter_model.safetensors"));
    EXPECT_EQ(f.info("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape,
              (Shape{4, 32}));
    fs::create_directories(path("dyn2/checkpoints"));
    fs::copy(path("dyn/checkpoints/step_00000003"), path("dyn2/checkpoints/step_00000003"));
    r = train("base", "dyn2", dyn + " --resume auto");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(read_file(path("dyn2/final/adapter_model.safetensors")),
              read_file(path("dyn/final/adapter_model.safetensors")));
    // eval --adapter reads the rank-2 adapter and scores it with the trained scale.
    const double loss = eval_loss("--model " + path("base") + " --adapter " + path("dyn/final") +
                                  " --tokens " + path("t.bin"));
    EXPECT_GT(loss, 0);
}

// An adapter dir laid out as PEFT's save_pretrained writes one (every adapter_config.json field
// PEFT 0.13 writes, target_modules in PEFT's set order, "format": "pt"), written here by hand
// rather than by ETE's own writer: B non-zero, so the adapter changes the model.
void write_peft_style_dir(const std::string& dir, const ModelConfig& c, int r) {
    fs::create_directories(dir);
    const int64_t C = c.hidden_size, F = c.intermediate_size, D = C / c.num_heads;
    const int64_t KV = c.num_kv_heads * D;
    const std::vector<std::tuple<std::string, int64_t, int64_t>> modules = {
        {"self_attn.q_proj", C, C}, {"self_attn.k_proj", KV, C}, {"self_attn.v_proj", KV, C},
        {"self_attn.o_proj", C, C}, {"mlp.gate_proj", F, C},     {"mlp.up_proj", F, C},
        {"mlp.down_proj", C, F}};
    std::vector<std::pair<std::string, Tensor>> tensors;
    float k = 0;
    auto filled = [&](int64_t rows, int64_t cols) {
        Tensor t = Tensor::empty({rows, cols});
        for (int64_t i = 0; i < rows * cols; ++i) t.f32()[i] = 0.05f * std::sin(k += 0.7f);
        return t;
    };
    for (int l = 0; l < c.num_layers; ++l)
        for (const auto& [m, out, in] : modules) {
            const std::string p = "base_model.model.model.layers." + std::to_string(l) + "." + m;
            tensors.emplace_back(p + ".lora_A.weight", filled(r, in));
            tensors.emplace_back(p + ".lora_B.weight", filled(out, r));
        }
    write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
    const json cfg = {
        {"alpha_pattern", json::object()},
        {"auto_mapping", nullptr},
        {"base_model_name_or_path", "some-org/tiny-llama"},
        {"bias", "none"},
        {"fan_in_fan_out", false},
        {"inference_mode", true},
        {"init_lora_weights", true},
        {"layer_replication", nullptr},
        {"layers_pattern", nullptr},
        {"layers_to_transform", nullptr},
        {"loftq_config", json::object()},
        {"lora_alpha", 16},
        {"lora_dropout", 0.05},
        {"megatron_config", nullptr},
        {"megatron_core", "megatron.core"},
        {"modules_to_save", nullptr},
        {"peft_type", "LORA"},
        {"r", r},
        {"rank_pattern", json::object()},
        {"revision", nullptr},
        {"target_modules",
         {"down_proj", "k_proj", "up_proj", "o_proj", "q_proj", "gate_proj", "v_proj"}},
        {"task_type", "CAUSAL_LM"},
        {"use_dora", false},
        {"use_rslora", false}};
    write_file_atomic(dir + "/adapter_config.json", cfg.dump(2));
}

std::map<std::string, std::vector<float>> read_all(const std::string& file) {
    std::map<std::string, std::vector<float>> out;
    auto f = SafetensorsFile::open(file);
    for (const std::string& n : f.names()) {
        Tensor t = f.to_f32(n);
        out[n].assign(t.f32(), t.f32() + t.numel());
    }
    return out;
}

double first_loss(const std::string& run) {
    const std::string m = read_file(run + "/metrics.jsonl");
    return json::parse(m.substr(0, m.find('\n')))["loss"].get<double>();
}

// lora.init_from starts a run's adapters from a PEFT dir — on one process and on a tp x pp mesh,
// where each rank keeps its slice: at a learning rate of 1e-9 the final adapters are the dir's
// (each moves by at most ~lr per step). The dir must describe the run's adapters.
TEST_F(LoraCli, InitFromAPeftDirStartsTheAdaptersOnEveryLayout) {
    write_peft_style_dir(path("peft"), cfg_, 4);
    const std::string slow =
        " --set train.lr=1e-9 --set train.min_lr=0 --set train.steps=2 --set lora.base_format=f32";
    ShellResult fresh = train("base", "fresh", slow);
    ASSERT_EQ(fresh.code, 0) << fresh.out;
    const auto want = read_all(path("peft/adapter_model.safetensors"));
    for (const std::string& launch : {std::string(), std::string("launch -n 4 -- ")}) {
        const std::string out = launch.empty() ? "one" : "mesh";
        ShellResult r = run_shell(
            "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 "
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " +
            ete_cmd(launch + "train --set model.init_from=" + path("base") +
                    " --set lora.enabled=true --set lora.targets=all-linear --set lora.r=4" +
                    " --set lora.init_from=" + path("peft") + slow +
                    " --set train.micro_batch=2 --set train.seq_len=8 --set train.eval_every=0" +
                    " --set data.train=" + path("t.bin") + " --set data.tokenizer=\"\"" +
                    (launch.empty() ? "" : " --set parallel.tp=2 --set parallel.pp=2") + " --out " +
                    path(out) + " 2>&1"));
        ASSERT_EQ(r.code, 0) << r.out;
        EXPECT_NE(r.out.find("lora: adapters from " + path("peft")), std::string::npos) << r.out;
        const auto got = read_all(path(out + "/final/adapter_model.safetensors"));
        ASSERT_EQ(got.size(), want.size()) << out;
        for (const auto& [name, w] : want) {
            const auto& g = got.at(name);
            ASSERT_EQ(g.size(), w.size()) << name;
            // Two AdamW steps of at most ~2·lr each (|m̂/√v̂| stays near 1), each rounded once.
            for (size_t i = 0; i < w.size(); ++i)
                ASSERT_NEAR(g[i], w[i], 2 * (2e-9 + testing::kUnitF32 * std::fabs(w[i])))
                    << out << name << i;
        }
        // Its step-1 loss is base + the dir's adapters', not the fresh (B = 0) base's.
        EXPECT_GT(std::fabs(first_loss(path(out)) - first_loss(path("fresh"))), 1e-4) << out;
    }
    // The same dir scores base + adapter in eval.
    EXPECT_NE(eval_loss("--model " + path("base") + " --adapter " + path("peft") + " --tokens " +
                        path("t.bin")),
              eval_loss("--model " + path("base") + " --tokens " + path("t.bin")));
    // A dir for another rank or scale is refused, naming both.
    ShellResult bad =
        train("base", "bad", slow + " --set lora.r=8 --set lora.init_from=" + path("peft"));
    EXPECT_NE(bad.code, 0);
    EXPECT_NE(bad.out.find("its adapters have rank 4, but lora.r = 8 (expected the same rank)"),
              std::string::npos)
        << bad.out;
    bad = train("base", "bad2", slow + " --set lora.alpha=32 --set lora.init_from=" + path("peft"));
    EXPECT_NE(bad.out.find("lora_alpha 16 use_rslora false, but this run has lora.alpha = 32"),
              std::string::npos)
        << bad.out;
}

TEST_F(LoraCli, BadLoraConfigIsAOneLineError) {
    ShellResult r =
        run_shell(ete_cmd("train --set lora.enabled=true --set lora.base_format=nf3 "
                          "--dump-config 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("lora.base_format = 'nf3': expected f32, bf16 or nf4"), std::string::npos)
        << r.out;
    r =
        run_shell(ete_cmd("train --set lora.enabled=true --set lora.nf4_blocksize=48 "
                          "--dump-config 2>&1"));
    EXPECT_NE(r.out.find("lora.nf4_blocksize = 48: expected a power of two in [32, 4096]"),
              std::string::npos)
        << r.out;
    for (const char* p : {"1", "-0.1", "0.999999999"}) {  // the last rounds to 1 as a float
        r = run_shell(ete_cmd(std::string("train --set lora.enabled=true --set lora.dropout=") + p +
                              " --dump-config 2>&1"));
        EXPECT_NE(r.code, 0) << p;
        EXPECT_NE(r.out.find("expected a probability in [0, 1)"), std::string::npos) << r.out;
    }
    r = run_shell(ete_cmd("eval --model " + path("base") + " --adapter " + path("nope") +
                          " --tokens " + path("t.bin") + " --seq 4 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("adapter_config.json is missing"), std::string::npos) << r.out;
}

// Rewrites one tensor of a safetensors file through f (the others as they were, in F32).
void edit_tensor(const std::string& file, const std::string& name,
                 const std::function<void(std::vector<float>&)>& f) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    auto all = read_all(file);
    ASSERT_TRUE(all.count(name)) << name;
    f(all[name]);
    const auto src = SafetensorsFile::open(file);
    for (auto& [n, v] : all) {
        Tensor t = Tensor::empty(src.info(n).shape);
        std::copy(v.begin(), v.end(), t.f32());
        tensors.emplace_back(n, std::move(t));
    }
    write_safetensors(file, tensors, {{"format", "pt"}});
}

// alpha_pattern gives the q_proj adapters 64 / 2 = 32 instead of 16 / 2 = 8: the same model as
// the plain config with those B scaled by 4, bit for bit (powers of two scale exactly) — in eval
// and in the merged weights. It was ignored before (the scale silently 8).
TEST_F(LoraCli, AlphaPatternScalesItsAdapters) {
    write_peft_style_dir(path("ap"), cfg_, 2);
    json cfg = json::parse(read_file(path("ap/adapter_config.json")));
    cfg["alpha_pattern"] = {{"q_proj", 64}};
    write_file_atomic(path("ap/adapter_config.json"), cfg.dump(2));
    write_peft_style_dir(path("x4"), cfg_, 2);
    for (int l = 0; l < cfg_.num_layers; ++l)
        edit_tensor(
            path("x4/adapter_model.safetensors"),
            fmt::format("base_model.model.model.layers.{}.self_attn.q_proj.lora_B.weight", l),
            [](auto& v) {
                for (float& x : v) x *= 4;
            });
    const std::string eval = "eval --model " + path("base") + " --tokens " + path("t.bin") +
                             " --batch 2 --seq 6 --json --adapter ";
    const ShellResult a = run_shell(ete_cmd(eval + path("ap"))),
                      b = run_shell(ete_cmd(eval + path("x4")));
    ASSERT_EQ(a.code, 0) << a.out;
    ASSERT_EQ(b.code, 0) << b.out;
    EXPECT_EQ(json::parse(a.out)["loss"], json::parse(b.out)["loss"]);
    const std::string merge = "export merged --model " + path("base") + " --adapter ";
    ASSERT_EQ(run_shell(ete_cmd(merge + path("ap") + " --out " + path("m_ap"))).code, 0);
    ASSERT_EQ(run_shell(ete_cmd(merge + path("x4") + " --out " + path("m_x4"))).code, 0);
    EXPECT_EQ(read_file(path("m_ap/model.safetensors")), read_file(path("m_x4/model.safetensors")));
    // Without the pattern the same tensors score differently: the pattern is what matched.
    cfg.erase("alpha_pattern");
    write_file_atomic(path("ap/adapter_config.json"), cfg.dump(2));
    const ShellResult c = run_shell(ete_cmd(eval + path("ap")));
    ASSERT_EQ(c.code, 0) << c.out;
    EXPECT_NE(json::parse(c.out)["loss"], json::parse(b.out)["loss"]);
}

// A failed allocation (ulimit -v, a cgroup without overcommit) ended in a bare std::bad_alloc:
// now one line that names the cause, exit 1. (This fixture has the run's data; no adapter.)
TEST_F(LoraCli, AFailedAllocationIsAOneLineError) {
    const ShellResult r = run_shell(
        "ETE_FAULT=oom@step=2 " +
        ete_cmd("train --set model.init_from=" + path("base") + " --set train.steps=3" +
                " --set train.micro_batch=2 --set train.seq_len=8 --set train.eval_every=0" +
                " --set data.train=" + path("t.bin") + " --set data.tokenizer=\"\" --out " +
                path("oom") + " 2>&1"));
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("ete: error: out of memory (an allocation failed;"), std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
}

// A NaN or infinity in an adapter or a model is refused on load, naming the file, the tensor and
// the element; finite adapters whose merge overflows float are refused before anything is
// written; `eval` whose loss is not finite exits non-zero after printing it.
TEST_F(LoraCli, NonFiniteAdaptersAndModelsAreRefused) {
    const std::string a = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight";
    write_peft_style_dir(path("nan"), cfg_, 2);
    edit_tensor(path("nan/adapter_model.safetensors"), a, [](auto& v) { v[3] = NAN; });
    const std::string merge = "export merged --model " + path("base") + " --adapter ";
    ShellResult r = run_shell(ete_cmd(merge + path("nan") + " --out " + path("m1") + " 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find(path("nan/adapter_model.safetensors") + ": tensor '" + a +
                         "' element 3 is nan, expected a finite value"),
              std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(path("m1")));
    const std::string eval =
        "eval --model " + path("base") + " --tokens " + path("t.bin") + " --batch 2 --seq 6";
    r = run_shell(ete_cmd(eval + " --adapter " + path("nan") + " 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("element 3 is nan"), std::string::npos) << r.out;

    // Finite, but B·A overflows float: 1e20 x 1e20 x scale.
    write_peft_style_dir(path("huge"), cfg_, 2);
    for (const char* m : {"lora_A", "lora_B"})
        edit_tensor(path("huge/adapter_model.safetensors"),
                    "base_model.model.model.layers.0.mlp.down_proj." + std::string(m) + ".weight",
                    [](auto& v) { std::fill(v.begin(), v.end(), 1e20f); });
    r = run_shell(ete_cmd(merge + path("huge") + " --out " + path("m2") + " 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("export merged: 'model.layers.0.mlp.down_proj.weight' + its adapter "
                         "overflows to inf at element 0"),
              std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(path("m2")));
    r = run_shell(ete_cmd(eval + " --adapter " + path("huge") + " --json 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("eval: the loss is "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("computes non-finite logits on this data"), std::string::npos) << r.out;

    // A model dir with an infinity in one weight.
    fs::copy(path("base"), path("inf"), fs::copy_options::recursive);
    edit_tensor(path("inf/model.safetensors"), "model.layers.0.mlp.up_proj.weight",
                [](auto& v) { v[7] = -INFINITY; });
    r = run_shell(ete_cmd("eval --model " + path("inf") + " --tokens " + path("t.bin") +
                          " --batch 2 --seq 6 2>&1"));
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("tensor 'model.layers.0.mlp.up_proj.weight' element 7 is -inf"),
              std::string::npos)
        << r.out;
}

}  // namespace
}  // namespace ete
