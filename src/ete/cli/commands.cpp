// ete/cli/commands.cpp — the subcommands' bodies.
#include "ete/cli/commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/corpus.h"
#include "ete/data/decode_stream.h"
#include "ete/data/loader.h"
#include "ete/data/sft.h"
#include "ete/data/sft_chat.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/io/safetensors.h"
#include "ete/model/transformer.h"
#include "ete/parallel/launch_env.h"
#include "ete/train/auto_layout.h"
#include "ete/train/config.h"
#include "ete/train/generate.h"
#include "ete/train/inference_model.h"
#include "ete/train/job_check.h"
#include "ete/train/trainer.h"

namespace ete {

namespace fs = std::filesystem;

namespace {

// A requeued Slurm job (SLURM_RESTART_COUNT > 0) without --resume continues from the newest
// checkpoint of its --out: the job script that started it the first time runs again as it is.
std::string requeue_resume() {
    const char* n = std::getenv("SLURM_RESTART_COUNT");
    if (!n || std::strtol(n, nullptr, 10) <= 0) return "";
    if (detect_launch().rank == 0)
        log_info("Slurm requeue (SLURM_RESTART_COUNT={}): --resume auto", n);
    return "auto";
}

}  // namespace

RunConfig train_config(const TrainArgs& a) {
    try {
        RunConfig cfg = default_run_config();
        if (!a.config_path.empty()) apply_toml(cfg, read_file(a.config_path), a.config_path);
        for (const auto& o : a.overrides) apply_override(cfg, o);
        validate(cfg);
        return cfg;
    } catch (const ConfigError&) {
        throw;
    } catch (const Error& e) {
        throw ConfigError(e.what());
    }
}

int cmd_train(const TrainArgs& a) {
    RunConfig cfg = train_config(a);
    if (a.dump_config) {
        std::fputs(dump_toml(cfg).c_str(), stdout);
        return 0;
    }
    const LaunchInfo launch = detect_launch();
    log_set_rank(launch.rank);  // the checks' notices (a model dir's unread keys): rank 0 alone
    // Before a rank talks to another. Not the data (check_train_job): a node whose data.train is
    // missing or another file must end the job through MPI_Abort, not leave its peers waiting.
    check_job(before_auto_layout(cfg), launch.world_size);
    if (cfg.parallel_auto) {
        cfg = auto_layout(cfg, launch);
        check_job(cfg, launch.world_size);  // the layout chosen: the plan checked it already
    }
    ResumeOptions resume{a.resume, a.resume_force};
    if (resume.from.empty()) resume.from = requeue_resume();
    const TrainSummary s = run_training(cfg, a.out_dir, resume);
    if (s.diverged) return kExitDiverged;
    return s.interrupted ? kExitStopped : 0;
}

namespace {

// A model dir loaded for inference on the CPU backend.
struct LoadedModel {
    std::unique_ptr<Backend> backend = make_cpu_backend();
    std::unique_ptr<Transformer> model;
};

LoadedModel load_model(const std::string& dir, const std::string& adapter, bool fake_quant,
                       bool allow_base_mismatch) {
    LoadedModel m;
    m.model = fake_quant ? load_fake_quant_model(*m.backend, dir, adapter, allow_base_mismatch)
                         : load_inference_model(*m.backend, dir, adapter, allow_base_mismatch);
    if (m.model->int8())
        log_info("{}: integer model, {} linears in int8 ({})", dir, m.model->int8_linears(),
                 m.backend->describe());
    return m;
}

}  // namespace

namespace {

std::string eval_tokenizer_path(const EvalArgs& a, const char* option) {
    std::string tok_path = a.tokenizer.empty() ? a.model_dir + "/tokenizer.json" : a.tokenizer;
    ETE_CHECK(fs::exists(tok_path), "{} needs a tokenizer: '{}' not found (pass --tokenizer)",
              option, tok_path);
    return tok_path;
}

Tokenizer eval_tokenizer(const EvalArgs& a, const char* option) {
    return Tokenizer::load(eval_tokenizer_path(a, option));
}

// seconds: the forward's wall time when measured (< 0: not).
// A non-finite loss is printed, then an error (exit 1): a NaN model never passes a check.
void print_eval(const EvalArgs& a, double loss_sum, int64_t tokens, const char* extra_key,
                int64_t extra, double seconds = -1) {
    const double loss = loss_sum / double(std::max<int64_t>(tokens, 1));
    if (a.json) {
        nlohmann::json j{{"loss", loss}, {"tokens", tokens}};
        if (extra_key) j[extra_key] = extra;
        if (seconds >= 0) j["forward_s"] = seconds;
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("loss: %.6f | tokens: %lld | perplexity: %.3f", loss, (long long)tokens,
                    std::exp(loss));
        if (extra_key) std::printf(" | %s: %lld", extra_key, (long long)extra);
        std::printf("\n");
    }
    std::fflush(stdout);
    ETE_CHECK(std::isfinite(loss),
              "eval: the loss is {}: the model{} computes non-finite logits on this data", loss,
              a.adapter.empty() ? "" : " with its adapter");
}

// The first `need` token ids of --tokens (a shard) or --text (encoded with the model's tokenizer).
std::vector<int32_t> eval_tokens(const EvalArgs& a, uint64_t need) {
    std::vector<int32_t> ids;
    std::string what;
    if (!a.text.empty()) {
        ids = eval_tokenizer(a, "--text").encode(read_file(a.text, UINT64_MAX));
        what = "--text '" + a.text + "'";
    } else {
        TokenShard shard(a.tokens);
        ids.resize(std::min<uint64_t>(shard.size(), need));
        shard.read(0, ids.size(), ids.data());
        what = "--tokens '" + a.tokens + "'";
    }
    ETE_CHECK(ids.size() >= need, "{}: holds {} tokens, --batch {} --seq {} needs {}", what,
              ids.size(), a.batch, a.seq, need);
    return ids;
}

}  // namespace

// Loss over the response tokens of every record, in file order (the prompt is masked as in
// training). Packing changes the rows, not the loss: attention stays inside each example.
int eval_jsonl(const EvalArgs& a) {
    ETE_CHECK(a.dump_logits.empty(), "eval: --dump-logits works with --tokens or --text only");
    LoadedModel m = load_model(a.model_dir, a.adapter, a.fake_quant, a.allow_base_mismatch);
    const int B = a.batch, T = a.seq > 0 ? a.seq : m.model->config().max_position_embeddings;
    SftOptions opt;
    opt.pack = a.pack;
    opt.max_bad_fraction = 1.0;  // evaluation reports malformed lines instead of refusing
    const std::string tok_path = eval_tokenizer_path(a, "--jsonl");
    const Tokenizer tok = Tokenizer::load(tok_path);
    if (a.chat_template != "ete")
        opt.chat_template =
            load_sft_chat_template(a.chat_template, tok_path, tok, "--chat-template");
    SftDataset data(a.jsonl, tok, T, opt, 0, 0.0);
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size()), ds(in.size());
    m.model->setup(B, T);
    const uint64_t n = data.num_train_samples();
    double sum = 0;
    int64_t tokens = 0;
    for (uint64_t s = 0; s < n; s += uint64_t(B)) {
        const int rows = int(std::min<uint64_t>(uint64_t(B), n - s));
        for (int r = 0; r < rows; ++r) {
            const size_t o = size_t(r) * T;
            data.fill_sample(s + uint64_t(r), &in[o], &tgt[o], &ds[o]);
        }
        sum += m.model->forward_loss(in.data(), tgt.data(), rows, T,
                                     data.packed() ? ds.data() : nullptr);
        tokens += std::count_if(tgt.begin(), tgt.begin() + int64_t(rows) * T,
                                [](int32_t t) { return t != kIgnoreIndex; });
    }
    print_eval(a, sum, tokens, "examples", int64_t(data.num_examples()));
    return 0;
}

int cmd_eval(const EvalArgs& a) {
    ETE_CHECK(int(!a.tokens.empty()) + int(!a.text.empty()) + int(!a.jsonl.empty()) == 1,
              "eval: pass exactly one of --tokens, --text or --jsonl");
    ETE_CHECK(!a.pack || !a.jsonl.empty(), "eval: --pack applies to --jsonl only");
    ETE_CHECK(a.chat_template == "ete" || !a.jsonl.empty(),
              "eval: --chat-template applies to --jsonl only");
    if (!a.jsonl.empty()) return eval_jsonl(a);
    ETE_CHECK(a.seq > 0, "eval: --seq is required with --tokens or --text");
    LoadedModel m = load_model(a.model_dir, a.adapter, a.fake_quant, a.allow_base_mismatch);
    const int B = a.batch, T = a.seq, V = m.model->config().vocab_size;
    std::vector<int32_t> ids = eval_tokens(a, uint64_t(B) * uint64_t(T + 1));
    // Row b is tokens [b(T+1), (b+1)(T+1)): inputs are its first T, targets its last T.
    std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            in[size_t(b) * T + t] = ids[size_t(b) * (T + 1) + t];
            tgt[size_t(b) * T + t] = ids[size_t(b) * (T + 1) + t + 1];
        }
    m.model->setup(B, T);
    // --repeat: the same forward again, for timing (the median; the first call also creates
    // kernels and packs weights).
    double sum = 0;
    std::vector<double> times;
    for (int r = 0; r < a.repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        sum = m.model->forward_loss(in.data(), tgt.data(), B, T);
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    const double seconds = times[times.size() / 2];
    if (!a.dump_logits.empty()) {
        Tensor logits = Tensor::empty({B, T, V});
        m.model->forward_logits(in.data(), B, T, logits.f32());
        write_safetensors(a.dump_logits, {{"logits", logits}});
    }
    print_eval(a, sum, int64_t(B) * T, nullptr, 0, seconds);
    return 0;
}

int cmd_generate(const GenerateArgs& a) {
    // NaN or out-of-range settings sample garbage rather than fail.
    ETE_CHECK(std::isfinite(a.temperature) && a.temperature >= 0,
              "--temperature {}: expected a finite number >= 0 (0 = greedy)", a.temperature);
    ETE_CHECK(a.top_p > 0 && a.top_p <= 1, "--top-p {}: expected in (0, 1]", a.top_p);
    ETE_CHECK(a.top_k >= 0, "--top-k {}: expected >= 0 (0 = all tokens)", a.top_k);
    ETE_CHECK(a.max_new_tokens >= 0, "--max-new-tokens {}: expected >= 0", a.max_new_tokens);
    LoadedModel m = load_model(a.model_dir, a.adapter, false, a.allow_base_mismatch);
    std::string tok_path = a.tokenizer.empty() ? a.model_dir + "/tokenizer.json" : a.tokenizer;
    ETE_CHECK(fs::exists(tok_path), "tokenizer '{}' not found (pass --tokenizer)", tok_path);
    Tokenizer tok = Tokenizer::load(tok_path);
    ETE_CHECK(tok.vocab_size() <= m.model->config().vocab_size,
              "tokenizer '{}' has {} tokens, more than the model's vocabulary {}", tok_path,
              tok.vocab_size(), m.model->config().vocab_size);
    std::vector<int32_t> prompt = tok.encode(a.prompt);
    if (prompt.empty()) {
        const int32_t start = tok.bos_id() >= 0 ? tok.bos_id() : tok.eos_id();
        ETE_CHECK(start >= 0, "an empty --prompt needs a bos/eos token in the tokenizer");
        prompt.push_back(start);
    }
    m.model->setup(1, std::min(m.model->config().max_position_embeddings, 1024));
    SampleOptions opt{a.max_new_tokens, a.temperature, a.top_k, a.top_p, a.seed, tok.stop_ids()};
    std::fputs(a.prompt.c_str(), stdout);
    // Each token prints the text it completes, decoded after the prompt's last tokens (so a
    // SentencePiece "▁world" keeps its space); an incomplete character waits for its bytes.
    DecodeStream stream(tok, prompt, true);
    auto print = [](const std::string& s) {
        std::fputs(s.c_str(), stdout);
        std::fflush(stdout);
    };
    generate(*m.model, prompt, opt, [&](int32_t id) {
        if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end()) return;
        print(stream.step(id));
    });
    print(stream.finish());
    std::fputc('\n', stdout);
    return 0;
}

}  // namespace ete
