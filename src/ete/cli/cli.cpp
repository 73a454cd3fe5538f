// ete/cli/cli.cpp — argument parsing (CLI11) and the only place errors become exit codes:
// 0 success, 1 a user error (bad config, file, value), 2 a command-line usage error, 3 stopped on
// repeated anomalies, 75 a failed transport (timeout, lost peer: restartable).
#include "ete/cli/cli.h"
#include "ete/cli/cli_checks.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <new>

#include "ete/backend/backend.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/cli/commands.h"
#include "ete/cli/launch.h"
#include "ete/cli/plan_command.h"
#include "ete/cli/topo_command.h"
#include "ete/core/error.h"
#include "ete/parallel/launch_env.h"
#include "ete/parallel/mpi_comm.h"
#include "ete/train/auto_layout.h"
#include "ete/train/config.h"
#include "ete/train/job_check.h"
#include "ete/train/monitor.h"

namespace ete {
namespace {

// --allow-base-mismatch, on every command that takes --adapter (io/peft.h check_adapter_base).
void add_allow_base_mismatch(CLI::App* c, bool& flag) {
    c->add_flag("--allow-base-mismatch", flag,
                "use --adapter over a base whose content differs from the one it recorded");
}

std::string config_keys_text() {
    std::string s = "\nConfig keys (TOML [section] key = value, or --set section.key=value):\n";
    for (const auto& [k, h] : config_keys_help()) s += fmt::format("  {:<30} {}\n", k, h);
    s += "\nPrometheus metrics (monitor.prometheus_port; docs/operations.md):\n";
    RunGauges g;  // every family, values or not
    g.rank_step_s = g.rank_compute_s = {0};
    for (const MetricFamily& f : run_metric_families(g))
        s += fmt::format("  {:<36} {:<7} {}\n", f.name, f.type, f.help);
    s += "\nExit codes: 0 done, 1 an error, 2 a usage error, 3 stopped on repeated anomalies "
         "(anomaly.on_repeated), 4 stopped by a signal (SIGTERM, SIGINT, SIGHUP, SIGUSR2: "
         "checkpoint saved; --resume auto continues), 75 a communication failure (timeout, lost "
         "rank: a restart can fix it)\n";
    return s;
}

void add_train(CLI::App& app, TrainArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand("train", "Train a model (no CONFIG = the embedded default)");
    c->add_option("config", a.config_path, "TOML config file")->check(CLI::ExistingFile);
    c->add_option("--out", a.out_dir, "run directory (config.toml, metrics.jsonl, final/)")
        ->capture_default_str();
    c->add_option("--set", a.overrides, "override a config key: section.key=value")
        ->allow_extra_args(false);
    c->add_flag("--dump-config", a.dump_config, "print the resolved config as TOML and exit");
    c->add_option("--resume", a.resume,
                  "continue from a checkpoint: auto (newest in --out) or a step_XXXXXXXX dir");
    c->add_option("--resume-force", a.resume_force,
                  "accept a changed setting on resume (e.g. train.steps); repeatable")
        ->allow_extra_args(false);
    c->footer(config_keys_text());
    c->callback([&] { run = [&] { return cmd_train(a); }; });
}

void add_eval(CLI::App& app, EvalArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "eval", "Mean next-token loss on a token shard, a text file or SFT JSONL records");
    c->add_option("--model", a.model_dir, "HF model dir")->required();
    c->add_option("--adapter", a.adapter, "PEFT LoRA adapter dir over --model");
    add_allow_base_mismatch(c, a.allow_base_mismatch);
    c->add_option("--tokens", a.tokens, "token shard (ETETOK01)");
    c->add_option("--text", a.text, "UTF-8 text file, encoded with the model's tokenizer");
    c->add_option("--jsonl", a.jsonl,
                  "SFT JSONL (Alpaca, prompt/completion or chat): loss on the responses only");
    c->add_option("--tokenizer", a.tokenizer,
                  "tokenizer.json for --text/--jsonl (default: the model's)");
    c->add_option("--batch", a.batch, "rows B")->check(positive())->capture_default_str();
    c->add_option("--seq", a.seq,
                  "predicted tokens per row T (--jsonl: default the model's context length)")
        ->check(positive());
    c->add_flag("--pack", a.pack, "--jsonl: pack several examples per row (same loss)");
    c->add_option("--chat-template", a.chat_template,
                  "--jsonl chat records rendered as data.sft_chat_template says: ete (ETE's "
                  "format), model (the chat_template of the tokenizer_config.json beside the "
                  "tokenizer), a tokenizer_config.json or a Jinja file")
        ->capture_default_str();
    c->add_option("--dump-logits", a.dump_logits, "write logits F32 [B, T, V] as safetensors");
    c->add_flag("--json", a.json, "print one JSON line");
    c->add_option("--repeat", a.repeat,
                  "--tokens/--text: run the forward N times; forward_s is the median")
        ->check(positive())
        ->capture_default_str();
    c->add_flag("--fake-quant", a.fake_quant,
                "a QAT run's final model as it trained: fake quantization with its qat.json");
    c->callback([&] { run = [&] { return cmd_eval(a); }; });
}

void add_generate(CLI::App& app, GenerateArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand("generate", "Sample text from a model");
    c->add_option("--model", a.model_dir, "HF model dir")->required();
    c->add_option("--adapter", a.adapter, "PEFT LoRA adapter dir over --model");
    add_allow_base_mismatch(c, a.allow_base_mismatch);
    c->add_option("--prompt", a.prompt, "text to continue");
    c->add_option("--tokenizer", a.tokenizer, "tokenizer.json (default: the model dir's)");
    c->add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate")
        ->check(positive())
        ->capture_default_str();
    c->add_option("--temperature", a.temperature, "0 = greedy")
        ->check(non_negative())
        ->capture_default_str();
    c->add_option("--top-k", a.top_k, "keep the k most likely (0 = off)")
        ->check(non_negative())
        ->capture_default_str();
    c->add_option("--top-p", a.top_p, "nucleus mass (1 = off)")
        ->check(number_in(0, 1, "a number in [0, 1]"))
        ->capture_default_str();
    c->add_option("--seed", a.seed, "sampling seed")->capture_default_str();
    c->callback([&] { run = [&] { return cmd_generate(a); }; });
}

void add_codec(CLI::App& tok, TokenizerCodecArgs& c, std::function<int()>& run) {
    auto* en = tok.add_subcommand("encode", "Text -> token ids (HF's encode)");
    en->add_option("file", c.file, "text file to encode (\"-\": stdin)");
    en->add_option("--text", c.text, "the text to encode");
    en->add_option("--tokenizer", c.tokenizer, "tokenizer.json")
        ->required()
        ->check(CLI::ExistingFile);
    en->add_flag("--add-special-tokens", c.add_special_tokens,
                 "apply the post-processor's template (BOS and the like)");
    en->add_flag("--strict-utf8", c.strict_utf8, "invalid UTF-8 is an error (else U+FFFD)");
    en->add_flag("--json", c.json, "print {\"ids\": [...], \"tokens\": [...]}");
    en->callback([&] { run = [&] { return cmd_tokenizer_encode(c); }; });
    auto* de = tok.add_subcommand("decode", "Token ids -> text (HF's decode)");
    de->add_option("ids", c.ids, "token ids (none: read them from stdin)");
    de->add_option("--tokenizer", c.tokenizer, "tokenizer.json")
        ->required()
        ->check(CLI::ExistingFile);
    de->add_flag("--skip-special-tokens", c.skip_special_tokens, "leave special tokens out");
    de->add_flag("--json", c.json, "print {\"text\": ...}");
    de->callback([&] { run = [&] { return cmd_tokenizer_decode(c); }; });
}

void add_chat(CLI::App& tok, TokenizerChatArgs& a, std::function<int()>& run) {
    auto* c = tok.add_subcommand(
        "chat", "Render a conversation with the model's chat template (HF's apply_chat_template)");
    c->add_option("--tokenizer-config", a.tokenizer_config,
                  "tokenizer_config.json with the chat_template")
        ->required()
        ->check(CLI::ExistingFile);
    c->add_option("--messages", a.messages,
                  "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...]} "
                  "(\"-\": stdin)");
    c->add_option("input", a.messages, "\"-\": read the messages from stdin");
    c->add_flag("--add-generation-prompt", a.add_generation_prompt,
                "end with the header of an assistant turn");
    c->add_option("--tools", a.tools, "JSON file: the tools (an array of JSON schemas)")
        ->check(CLI::ExistingFile);
    c->add_option("--set-var", a.set_vars,
                  "a template variable, KEY=VALUE (VALUE as JSON when it parses, else a string), "
                  "e.g. enable_thinking=false");
    c->add_flag("--ids", a.ids,
                "print the token ids (tokenizer.json beside the config; special tokens matched)");
    c->callback([&] { run = [&] { return cmd_tokenizer_chat(a); }; });
}

void add_data(CLI::App& app, TokenizerTrainArgs& t, TokenizeArgs& k, TokenizerCodecArgs& c,
              TokenizerChatArgs& chat, std::function<int()>& run) {
    auto* tok = app.add_subcommand("tokenizer", "Tokenizer tools");
    tok->require_subcommand(1);
    auto* tr = tok->add_subcommand("train", "Train a byte-level BPE tokenizer on text files");
    tr->add_option("inputs", t.inputs, "UTF-8 text files")->required()->check(CLI::ExistingFile);
    tr->add_option("--vocab-size", t.vocab_size, "vocabulary size incl. 256 bytes + specials")
        ->check(number_in(257, 1 << 20, "an integer in [257, 1048576]"))
        ->capture_default_str();
    tr->add_option("--out", t.out, "tokenizer.json to write")->required();
    tr->callback([&] { run = [&] { return cmd_tokenizer_train(t); }; });
    add_codec(*tok, c, run);
    add_chat(*tok, chat, run);
    auto* tz = app.add_subcommand("tokenize", "Encode a text file into a token shard");
    tz->add_option("input", k.input, "UTF-8 text file")->required()->check(CLI::ExistingFile);
    tz->add_option("--tokenizer", k.tokenizer, "tokenizer.json")
        ->required()
        ->check(CLI::ExistingFile);
    tz->add_option("--out", k.out, "token shard to write (ETETOK01)")->required();
    tz->add_flag("--append-eos", k.append_eos,
                 "end the shard with the model's eos token (tokenizer_config.json, "
                 "generation_config.json)");
    tz->add_flag("--add-special-tokens", k.add_special_tokens,
                 "apply the post-processor's template (BOS and the like) to the document");
    tz->add_flag("--strict-utf8", k.strict_utf8, "invalid UTF-8 is an error (else U+FFFD)");
    tz->callback([&] { run = [&] { return cmd_tokenize(k); }; });
}

void add_quantize(CLI::App& app, QuantizeArgs& q, ExportMergedArgs& e, ExportInt8Args& i8,
                  std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "quantize",
        "Quantize a model dir: nf4 (the decoder linears, bitsandbytes layout) or w8a8 / w4a8 (the "
        "integer model, activation scales calibrated on --calib)");
    c->add_option("--scheme", q.scheme, "nf4, w8a8 or w4a8")->capture_default_str();
    c->add_option("--calib", q.calib, "w8a8/w4a8: token shard to calibrate on")
        ->check(CLI::ExistingFile);
    c->add_option("--calib-batches", q.calib_batches, "w8a8/w4a8: batches to calibrate on")
        ->check(positive())
        ->capture_default_str();
    c->add_option("--batch", q.batch, "w8a8/w4a8: rows per calibration batch")
        ->check(positive())
        ->capture_default_str();
    c->add_option("--seq", q.seq, "w8a8/w4a8: tokens per row (default min(256, context))")
        ->check(positive());
    c->add_option("--weight-granularity", q.weight_granularity,
                  "w8a8/w4a8: channel, tensor or group")
        ->capture_default_str();
    c->add_option("--group-size", q.group_size, "w8a8/w4a8: input columns per weight group")
        ->capture_default_str();
    c->add_option("--act-granularity", q.act_granularity,
                  "w8a8/w4a8: tensor (calibrated scales) or token (dynamic)")
        ->capture_default_str();
    c->add_option("--observer", q.observer, "w8a8/w4a8: minmax or moving_average")
        ->capture_default_str();
    c->add_option("--skip-layers", q.skip_layers, "w8a8/w4a8: layers left in fp32, e.g. 0,-1");
    c->add_option("--linears", q.linears,
                  "w8a8/w4a8: linears in integers (PEFT names, all-linear; lm_head for the LM "
                  "head)")
        ->capture_default_str();
    c->add_option("--adapter", q.adapter,
                  "w8a8/w4a8: a PEFT LoRA adapter over --model, kept in fp32 beside the integers");
    add_allow_base_mismatch(c, q.allow_base_mismatch);
    c->add_option("--double-quant", q.double_quant, "8-bit quantize the block absmax values")
        ->capture_default_str();
    c->add_option("--blocksize", q.blocksize, "elements per NF4 block (power of two, 32..4096)")
        ->capture_default_str();
    c->add_option("--model", q.model_dir, "HF model dir")->required();
    c->add_option("--out", q.out, "quantized model dir to write")->required();
    c->callback([&] { run = [&] { return cmd_quantize(q); }; });
    auto* x = app.add_subcommand("export", "Export models");
    x->require_subcommand(1);
    auto* m = x->add_subcommand(
        "merged", "Merge a LoRA adapter into its base and write a plain HF model dir");
    m->add_option("--model", e.model_dir, "base HF model dir (full precision or NF4)")->required();
    m->add_option("--adapter", e.adapter, "PEFT LoRA adapter dir")->required();
    add_allow_base_mismatch(m, e.allow_base_mismatch);
    m->add_option("--out", e.out, "merged model dir to write")->required();
    m->add_option("--dtype", e.dtype, "f32 or bf16")->capture_default_str();
    m->callback([&] { run = [&] { return cmd_export_merged(e); }; });
    auto* n = x->add_subcommand(
        "int8", "Write a QAT run's final model as the integer model (int8 weights and scales)");
    n->add_option("--model", i8.model_dir,
                  "a QAT run's final model dir (with qat.json), or the base of --adapter");
    n->add_option("--adapter", i8.adapter,
                  "a QAT run's final LoRA adapter dir (with qat.json) over --model");
    add_allow_base_mismatch(n, i8.allow_base_mismatch);
    n->add_option("--run", i8.run, "a QAT run dir (its final/; over LoRA, the base it names)");
    n->add_option("--out", i8.out, "integer model dir to write")->required();
    n->add_option("--probe", i8.probe, "token shard for the check against fake quantization");
    n->callback([&] { run = [&] { return cmd_export_int8(i8); }; });
}

void add_inspect(CLI::App& app, InspectArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "inspect", "Show a safetensors file, HF model dir, checkpoint or token shard");
    c->add_option("path", a.path, "file or directory")->required();
    c->add_flag("--summary", a.summary, "totals only, no per-tensor lines");
    c->callback([&] { run = [&] { return cmd_inspect(a); }; });
}

}  // namespace

int cli_main(int argc, char** argv) {
    // A closed stdout or stderr (`ete train ... | head -1`) makes writes fail, never kills: a
    // training run must outlive the terminal or pipe that watched it.
    std::signal(SIGPIPE, SIG_IGN);
    CLI::App app{
        "ete — the Efficient Training Engine (decoder LMs: Llama, Qwen2/3, Mistral, Gemma 2/3, "
        "Phi-3, GPT-2)",
        "ete"};
    app.require_subcommand(1);
    // Evaluated only when asked for: cuda_summary() loads the GPU driver.
    app.set_version_flag("--version", std::function<std::string()>([] {
                             return fmt::format("ete 0.1.0 | {} | {}", cpu::engines_summary(true),
                                                cuda_summary());
                         }));
    std::function<int()> run;
    TrainArgs train;
    EvalArgs eval;
    GenerateArgs gen;
    TokenizerTrainArgs tok_train;
    TokenizeArgs tokenize;
    TokenizerCodecArgs codec;
    TokenizerChatArgs chat;
    InspectArgs inspect;
    QuantizeArgs quantize;
    ExportMergedArgs merged;
    ExportInt8Args int8;
    add_train(app, train, run);
    add_eval(app, eval, run);
    add_generate(app, gen, run);
    add_data(app, tok_train, tokenize, codec, chat, run);
    add_inspect(app, inspect, run);
    add_quantize(app, quantize, merged, int8, run);
    LaunchArgs launch;
    add_launch_command(app, launch, run);
    TopoArgs topo;
    add_topo_command(app, topo, run);
    PlanArgs plan;
    add_plan_command(app, plan, run);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // One line, like every other error (CLI11 adds "Run with --help" on a second); every
        // rank of a job parses the same line, so rank 0 alone says it.
        if (detect_launch().rank == 0)
            std::fprintf(stderr, "ete: error: %s (see ete --help)\n", e.what());
        return e.get_exit_code() == 0 ? 0 : 2;
    }
    // An error on one rank of a job ends the whole job at exit (its peers may wait for it in a
    // collective): mpi_abort_job_at_exit.
    try {
        return run ? run() : 2;
    } catch (const std::bad_alloc&) {
        // `ulimit -v`, or a cgroup without overcommit: name the cause instead of std::bad_alloc.
        std::fprintf(stderr,
                     "ete: error: out of memory (an allocation failed; see the memory estimate "
                     "in the log, and ulimit -v / the job's memory limit)\n");
        mpi_abort_job_at_exit(1);
        return 1;
    } catch (const ConfigError& e) {
        // Every rank meets it alike before any talks to another (train/job_check.h), and ends
        // without aborting MPI. The first rank of each node reports it: once on one node, and a
        // node whose files differ from rank 0's (a missing model dir) is never left silent.
        if (detect_launch().local_rank == 0) std::fprintf(stderr, "ete: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ete: error: %s\n", e.what());
        // A failed transport (timeout, lost peer) is worth a restart; anything else is not.
        const int code = mpi_failed() ? kExitCommFailure : 1;
        mpi_abort_job_at_exit(code);
        return code;
    }
}

std::optional<RunConfig> launched_train_config(const std::vector<std::string>& args) {
    if (args.empty() || args[0] != "train") return std::nullopt;
    CLI::App app;
    TrainArgs a;
    std::function<int()> run;
    add_train(app, a, run);
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    try {
        app.parse(reversed);
    } catch (const CLI::Success&) {
        return std::nullopt;  // --help: the ranks print it
    } catch (const CLI::ParseError& e) {
        throw ConfigError(fmt::format("{} (see ete train --help)", e.what()));
    }
    if (a.dump_config) return std::nullopt;
    return train_config(a);
}

void check_launched_job(const std::vector<std::string>& args, int ranks) {
    if (const std::optional<RunConfig> cfg = launched_train_config(args))
        check_train_job(before_auto_layout(*cfg), ranks);
}

}  // namespace ete
