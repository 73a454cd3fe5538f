// tests/cli/eval_test.cpp — the `ete eval` contract: B rows of T+1 tokens, row b starting at
// b·(T+1); the JSON loss is the mean over the B×T predictions; --dump-logits writes F32 [B, T, V].
#include <gtest/gtest.h>

#include <unistd.h>
#include "numerics.h"
#include "phi3_rope.h"
#include "shell.h"

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/backend/backend.h"
#include "ete/core/file_util.h"
#include "ete/data/sft.h"
#include "ete/data/sft_chat.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"

namespace ete {
namespace eval_test {

namespace fs = std::filesystem;

// A small GQA Llama (2 heads, 1 kv head) for the CLI round trips.
ModelConfig tiny_llama(int layers, int vocab = 29) {
    ModelConfig c;
    c.vocab_size = vocab;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = layers;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.max_position_embeddings = 16;
    return c;
}

// `ete eval` (the inference model, in another process, on its own batch shapes) and the
// in-process training model sum the same products in other orders: within reorder_prob of the
// chain of reductions to the loss (numerics.h).
double eval_tolerance(const ModelConfig& c, int64_t T, int64_t N) {
    return testing::reorder_prob(testing::model_chain(c, T, N));
}

// The contract on one model: `ete eval` of its HF dir equals the in-process model's loss within
// eval_tolerance and its logits bit for bit (the same kernels, the same order).
void expect_eval_follows_the_contract(const ModelConfig& c) {
    SCOPED_TRACE(arch_name(c.arch));
    fs::path dir = fs::temp_directory_path() /
                   ("ete_eval_" + std::to_string(::getpid()) + "_" + arch_name(c.arch));
    fs::create_directories(dir);
    auto be = make_cpu_backend();
    Transformer m(c, *be);
    m.params().init(11);
    save_hf_model((dir / "model").string(), c, m.params().to_host(), "");
    EXPECT_EQ(load_hf_config((dir / "model").string()).arch, c.arch);
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back((i * 5 + i / 3) % 29);
    write_token_shard((dir / "t.bin").string(), ids, 29);

    const int B = 3, T = 6;
    ShellResult r = run_shell(ete_cmd("eval --model " + (dir / "model").string() + " --tokens " +
                                      (dir / "t.bin").string() + " --batch 3 --seq 6 --json " +
                                      "--dump-logits " + (dir / "l.st").string()));
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string& out = r.out;
    double loss = nlohmann::json::parse(out)["loss"].get<double>();

    // The same computation in process: row b is ids[b(T+1) .. b(T+1)+T].
    std::vector<int32_t> in, tgt;
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            in.push_back(ids[size_t(b * (T + 1) + t)]);
            tgt.push_back(ids[size_t(b * (T + 1) + t + 1)]);
        }
    m.setup(B, T);
    double expect = m.forward_loss(in.data(), tgt.data(), B, T) / (B * T);
    EXPECT_NEAR(loss, expect, eval_tolerance(c, T, B * T) * expect);
    std::vector<float> logits(size_t(B) * T * 29);
    m.forward_logits(in.data(), B, T, logits.data());
    auto f = SafetensorsFile::open((dir / "l.st").string());
    EXPECT_EQ(f.info("logits").shape, (Shape{B, T, 29}));
    EXPECT_EQ(f.info("logits").dtype, DType::F32);
    Tensor got = f.to_f32("logits");
    for (size_t i = 0; i < logits.size(); ++i) ASSERT_EQ(got.f32()[i], logits[i]) << i;
    fs::remove_all(dir);
}

TEST(CliEval, LossAndLogitsFollowTheContract) {
    expect_eval_follows_the_contract(tiny_llama(2));
}

// Every family's HF dir (Qwen2 and Qwen3 with a window of 4 from layer 1, Mistral and Phi-3 with
// one of 3, Gemma 2 and 3 with one of 3 on their local layers: all shorter than the rows)
// evaluates like its model (Gemma 2's soft-caps, Phi-3's partial LongRoPE included).
TEST(CliEval, EveryFamilyFollowsTheContract) {
    for (const Family& f : families()) {
        ModelConfig c = tiny_llama(2);
        c.arch = f.arch;
        c.use_family_defaults();
        if (f.layout == ete::Layout::GPT2) {
            c.num_kv_heads = c.num_heads;
            c.tie_word_embeddings = true;
        }
        if (f.window == WindowRule::FromMaxWindowLayers)
            c.sliding_window = 4, c.window_from_layer = 1;
        if (f.window == WindowRule::AllLayers || f.window == WindowRule::Pattern)
            c.sliding_window = 3;
        if (f.arch == Arch::Phi3) testing::phi3_rope(c, 0.5, 4);  // the rows pass 4 positions
        expect_eval_follows_the_contract(c);
    }
}

std::string run_capture(const std::string& args) {
    return run_shell(ete_cmd(args) + " 2>&1").out;
}

TEST(CliInspect, ModelDirShardAndSafetensors) {
    fs::path dir = fs::temp_directory_path() / ("ete_inspect_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    ModelConfig c = tiny_llama(1);
    HostParams store(param_specs(c));
    save_hf_model((dir / "m").string(), c, store, "");
    std::string out = run_capture("inspect " + (dir / "m").string());
    EXPECT_NE(out.find("model: llama | layers 1 | hidden 16 | heads 2 (kv 1, head_dim 8)"),
              std::string::npos)
        << out;
    // 29*16 embed + 2*16 norms + (16+8+8)*16 qkv + 16*16 o + 2*24*16 gate|up + 16*24 down
    // + 16 final norm + 29*16 lm_head = 464+32+512+256+768+384+16+464 = 2896 elements.
    EXPECT_NE(out.find("total: 2896 elements"), std::string::npos) << out;
    EXPECT_NE(out.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << out;
    write_token_shard((dir / "t.bin").string(), std::vector<int32_t>{1, 2, 3}, 29);
    EXPECT_NE(run_capture("inspect " + (dir / "t.bin").string())
                  .find("token shard | 3 tokens | 2 bytes per token | vocab 29"),
              std::string::npos);
    std::string bad = run_capture("inspect " + (dir / "nothing").string());
    EXPECT_NE(bad.find("no such file or directory"), std::string::npos) << bad;
    fs::remove_all(dir);
}

// --text encodes the file with the model dir's tokenizer.json and then follows the same row
// layout as --tokens.
TEST(CliEval, TextUsesTheModelTokenizer) {
    fs::path dir = fs::temp_directory_path() / ("ete_eval_text_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::string text;
    for (int i = 0; i < 40; ++i) text += "In the beginning God created the heaven and the earth.\n";
    Tokenizer tok = Tokenizer::train(text, 300, {"<|endoftext|>"});
    tok.save((dir / "tokenizer.json").string());
    write_file_atomic((dir / "in.txt").string(), text);
    ModelConfig c = tiny_llama(1, tok.vocab_size());
    c.num_kv_heads = 2;
    auto be = make_cpu_backend();
    Transformer m(c, *be);
    m.params().init(5);
    save_hf_model((dir / "m").string(), c, m.params().to_host(), (dir / "tokenizer.json").string());
    std::string out = run_capture("eval --model " + (dir / "m").string() + " --text " +
                                  (dir / "in.txt").string() + " --batch 2 --seq 7 --json");
    double loss = nlohmann::json::parse(out)["loss"].get<double>();
    std::vector<int32_t> ids = tok.encode(text), in, tgt;
    for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 7; ++t) {
            in.push_back(ids[size_t(b * 8 + t)]);
            tgt.push_back(ids[size_t(b * 8 + t + 1)]);
        }
    m.setup(2, 7);
    double expect = m.forward_loss(in.data(), tgt.data(), 2, 7) / 14;
    EXPECT_NEAR(loss, expect, eval_tolerance(c, 7, 14) * expect);
    std::string both = run_capture("eval --model " + (dir / "m").string() + " --seq 7");
    EXPECT_NE(both.find("exactly one of --tokens, --text or --jsonl"), std::string::npos) << both;
    fs::remove_all(dir);
}

// The in-process reference of `ete eval --jsonl`: the model's mean loss over the labelled tokens
// of d's examples, one example a row of T, and the number of those tokens.
std::pair<double, int64_t> score_examples(Transformer& m, const SftDataset& d, int T) {
    std::vector<int32_t> in(static_cast<size_t>(T)), tgt(static_cast<size_t>(T));
    m.setup(1, T);
    double sum = 0;
    int64_t tokens = 0;
    for (uint64_t e = 0; e < d.num_examples(); ++e) {
        d.fill_example(e, in.data(), tgt.data());
        sum += m.forward_loss(in.data(), tgt.data(), 1, T);
        for (int32_t t : tgt) tokens += t != kIgnoreIndex;
    }
    return {sum / double(std::max<int64_t>(tokens, 1)), tokens};
}

// --jsonl: the mean loss over response tokens, example by example in file order, as SftDataset
// lays them out; --pack must give the same loss (attention stays inside each example).
TEST(CliEval, JsonlScoresResponsesOnlyAndPackingAgrees) {
    fs::path dir = fs::temp_directory_path() / ("ete_eval_jsonl_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    Tokenizer tok = Tokenizer::train("abc", 257, {"<|endoftext|>"});  // byte tokenizer + eos
    tok.save((dir / "tokenizer.json").string());
    std::string jsonl;
    for (int i = 0; i < 7; ++i)
        jsonl += fmt::format(R"({{"prompt": "q{}", "completion": "a{}b"}})", i, i * 3) + "\n";
    jsonl +=
        R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "yz"}]})"
        "\n";
    write_file_atomic((dir / "d.jsonl").string(), jsonl);
    ModelConfig c = tiny_llama(2, tok.vocab_size());
    c.max_position_embeddings = 32;
    auto be = make_cpu_backend();
    Transformer m(c, *be);
    m.params().init(3);
    save_hf_model((dir / "m").string(), c, m.params().to_host(), (dir / "tokenizer.json").string());
    const std::string base = "eval --model " + (dir / "m").string() + " --jsonl " +
                             (dir / "d.jsonl").string() + " --batch 3 --json";
    // stdout only: the packing summary goes to the log on stderr.
    nlohmann::json flat = nlohmann::json::parse(run_shell(ete_cmd(base)).out);
    nlohmann::json packed = nlohmann::json::parse(run_shell(ete_cmd(base + " --pack")).out);

    const auto [want, tokens] =
        score_examples(m, SftDataset((dir / "d.jsonl").string(), tok, 32, {}, 0, 0.0), 32);
    // Targets: "a<k>b" + eos per plain record, "yz" + eos for the chat (its newline is untrained).
    EXPECT_EQ(flat["tokens"].get<int64_t>(), tokens);
    EXPECT_EQ(flat["examples"].get<int64_t>(), 8);
    const double tol = eval_tolerance(c, 32, 3 * 32) * want;
    EXPECT_NEAR(flat["loss"].get<double>(), want, tol);
    EXPECT_EQ(packed["tokens"].get<int64_t>(), tokens);
    EXPECT_NEAR(packed["loss"].get<double>(), flat["loss"].get<double>(), tol);
    std::string bad = run_capture("eval --model " + (dir / "m").string() + " --tokens x --pack");
    EXPECT_NE(bad.find("--pack applies to --jsonl only"), std::string::npos) << bad;
    fs::remove_all(dir);
}

// --chat-template model: chat records rendered with the chat_template of the model dir's
// tokenizer_config.json (saved there beside its tokenizer.json), scored on the assistant turns as
// SftDataset labels them with that template; "ete" (the default) keeps ETE's format, which
// labels other tokens and so scores differently.
TEST(CliEval, JsonlChatRecordsUseTheChosenTemplate) {
    fs::path dir = fs::temp_directory_path() / ("ete_eval_chat_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    Tokenizer tok = Tokenizer::train("abxy repeat user assistant system", 280,
                                     {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    tok.save((dir / "tokenizer.json").string());
    const nlohmann::json config = {
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
    write_file_atomic((dir / "tokenizer_config.json").string(), config.dump());
    std::string jsonl;
    for (int i = 0; i < 5; ++i)
        jsonl += fmt::format(R"({{"messages": [{{"role": "system", "content": "x{}"}}, )"
                             R"({{"role": "user", "content": "repeat ab"}}, )"
                             R"({{"role": "assistant", "content": "{}"}}, )"
                             R"({{"role": "user", "content": "y"}}, )"
                             R"({{"role": "assistant", "content": "ba"}}]}})",
                             i, std::string(size_t(1 + i), 'a')) +
                 "\n";
    write_file_atomic((dir / "d.jsonl").string(), jsonl);
    ModelConfig c = tiny_llama(2, tok.vocab_size());
    c.max_position_embeddings = 128;  // every record whole
    auto be = make_cpu_backend();
    Transformer m(c, *be);
    m.params().init(5);
    const std::string model = (dir / "m").string(), tj = model + "/tokenizer.json";
    save_hf_model(model, c, m.params().to_host(), (dir / "tokenizer.json").string());
    ASSERT_TRUE(fs::exists(model + "/tokenizer_config.json"));
    const std::string base =
        "eval --model " + model + " --jsonl " + (dir / "d.jsonl").string() + " --batch 2 --json";
    const ShellResult r_model = run_shell(ete_cmd(base + " --chat-template model"));
    ASSERT_EQ(r_model.code, 0) << r_model.out;
    const ShellResult r_ete = run_shell(ete_cmd(base));
    ASSERT_EQ(r_ete.code, 0) << r_ete.out;

    // In process: the loss sum and the labelled tokens of SftDataset's examples, with the model
    // dir's tokenizer as `ete eval` loads it (its EOS from the tokenizer_config.json: <|im_end|>).
    const Tokenizer loaded = Tokenizer::load(tj);
    auto score = [&](const SftOptions& opt) {
        return score_examples(m, SftDataset((dir / "d.jsonl").string(), loaded, 128, opt, 0, 0.0),
                              128);
    };
    SftOptions with;
    with.chat_template = load_sft_chat_template("model", tj, loaded);
    const auto [want_model, tokens_model] = score(with);
    const auto [want_ete, tokens_ete] = score({});
    const nlohmann::json got_model = nlohmann::json::parse(r_model.out);
    const nlohmann::json got_ete = nlohmann::json::parse(r_ete.out);
    // Each record: two assistant turns, "a..a<|im_end|>" and "ba<|im_end|>", at least 2 tokens
    // each.
    EXPECT_GE(tokens_model, 5 * 4);
    EXPECT_EQ(got_model["tokens"].get<int64_t>(), tokens_model);
    EXPECT_EQ(got_ete["tokens"].get<int64_t>(), tokens_ete);
    const double tol = eval_tolerance(c, 128, 2 * 128);
    EXPECT_NEAR(got_model["loss"].get<double>(), want_model, tol * want_model);
    EXPECT_NEAR(got_ete["loss"].get<double>(), want_ete, tol * want_ete);
    // The two formats label different text: their losses are far apart next to the tolerance.
    EXPECT_GT(std::fabs(want_model - want_ete), 100 * tol * want_model);

    const std::string bad = run_capture("eval --model " + model + " --jsonl " +
                                        (dir / "d.jsonl").string() + " --chat-template nope.jinja");
    EXPECT_NE(bad.find("--chat-template 'nope.jinja': file not found"), std::string::npos) << bad;
    const std::string text =
        run_capture("eval --model " + model + " --tokens x --chat-template model");
    EXPECT_NE(text.find("--chat-template applies to --jsonl only"), std::string::npos) << text;
    fs::remove_all(dir);
}

// `ete generate` with a SentencePiece tokenizer.json (tests/data/llama2_tokenizer.json: Prepend and
// Replace normalizers, byte fallback). The model's greedy choice is always token t: every
// embedding is the same vector and every layer adds zero (its projections are zero), so each
// position ends in the same state, and only t's LM-head row points along it. The streamed text
// must be what decoding prompt + output gives after the prompt: "▁the" after "Hello" prints
// " the" (the space at the prompt boundary was dropped once), and byte-fallback tokens that
// never complete a character print U+FFFD at the end (they once stopped the output silently).
TEST(CliGenerate, SentencePieceStreamsWhatTheWholeDecodeGives) {
    fs::path dir = fs::temp_directory_path() / ("ete_generate_sp_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string tok_path = std::string(ETE_SOURCE_DIR) + "/tests/data/llama2_tokenizer.json";
    const Tokenizer tok = Tokenizer::load(tok_path);
    ModelConfig c = tiny_llama(1, tok.vocab_size());
    c.tie_word_embeddings = false;
    auto generate = [&](const std::string& token, int n) {
        const std::optional<int32_t> id = tok.token_to_id(token);
        EXPECT_TRUE(id.has_value()) << token;
        const int32_t t = id.value_or(0);
        HostParams p(param_specs(c));
        std::fill_n(p.param("model.embed_tokens.weight"), c.vocab_size * c.hidden_size, 1.0f);
        std::fill_n(p.param("model.norm.weight"), c.hidden_size, 1.0f);
        std::fill_n(p.param("lm_head.weight") + int64_t(t) * c.hidden_size, c.hidden_size, 1.0f);
        save_hf_model((dir / "m").string(), c, p, tok_path);
        const ShellResult r =
            run_shell(ete_cmd("generate --model " + (dir / "m").string() +
                              " --prompt Hello --temperature 0 --max-new-tokens " +
                              std::to_string(n) + " 2>/dev/null"));
        EXPECT_EQ(r.code, 0) << r.out;
        std::vector<int32_t> all = tok.encode("Hello");
        const std::string prompt_text = tok.decode(all);
        all.insert(all.end(), size_t(n), t);
        return std::make_pair(r.out, "Hello" + tok.decode(all).substr(prompt_text.size()) + "\n");
    };
    const auto [spaced, spaced_want] = generate("\u2581the", 3);
    EXPECT_EQ(spaced, "Hello the the the\n");
    EXPECT_EQ(spaced, spaced_want);
    const auto [bytes, bytes_want] = generate("<0xE2>", 3);
    EXPECT_EQ(bytes, bytes_want);
    EXPECT_NE(bytes.find("\uFFFD"), std::string::npos) << bytes;
    fs::remove_all(dir);
}

}  // namespace eval_test
}  // namespace ete
