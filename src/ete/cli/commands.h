// ete/cli/commands.h — one function per subcommand; cli.cpp parses, these run.
#pragma once

#include <string>
#include <vector>

namespace ete {

struct TrainArgs {
    std::string config_path;  // empty = embedded default
    std::string out_dir = "runs/train";
    std::vector<std::string> overrides;
    bool dump_config = false;
    std::string resume;                     // "", "auto" or a checkpoint dir
    std::vector<std::string> resume_force;  // keys a resume may see changed
};
int cmd_train(const TrainArgs& a);
// The config of `ete train` (embedded default, the TOML file, the --set overrides) validated;
// throws ConfigError (core/error.h): every rank reads the same files and flags.
struct RunConfig;
RunConfig train_config(const TrainArgs& a);

struct EvalArgs {
    std::string model_dir, tokens, text, jsonl, tokenizer, dump_logits;
    std::string adapter;               // PEFT LoRA adapter dir over model_dir, or empty
    bool allow_base_mismatch = false;  // an adapter over a base other than its recorded one
    int batch = 1, seq = 0;  // seq 0: required for --tokens/--text; the model's context for --jsonl
    bool json = false, pack = false;
    bool fake_quant = false;            // a QAT run's final model as it trained (its qat.json)
    int repeat = 1;                     // forwards of the batch (--tokens/--text), for timing
    std::string chat_template = "ete";  // --jsonl chat records: as data.sft_chat_template
};
int cmd_eval(const EvalArgs& a);

struct GenerateArgs {
    std::string model_dir, prompt = "", tokenizer;
    std::string adapter;  // PEFT LoRA adapter dir over model_dir, or empty
    bool allow_base_mismatch = false;
    int max_new_tokens = 200, top_k = 0;
    double temperature = 0.8, top_p = 0.95;
    uint64_t seed = 0;
};
int cmd_generate(const GenerateArgs& a);

struct TokenizerTrainArgs {
    std::vector<std::string> inputs;
    std::string out;
    int vocab_size = 4096;
};
int cmd_tokenizer_train(const TokenizerTrainArgs& a);

struct TokenizeArgs {
    std::string input, tokenizer, out;
    bool append_eos = false, add_special_tokens = false, strict_utf8 = false;
};
int cmd_tokenize(const TokenizeArgs& a);

// `ete tokenizer encode` / `decode`: text <-> ids, as HF's encode and decode give them.
struct TokenizerCodecArgs {
    std::string tokenizer, text, file;  // encode: --text or FILE ("-" = stdin)
    std::vector<std::string> ids;       // decode: ids as arguments (none: read stdin)
    bool add_special_tokens = false, skip_special_tokens = false, json = false, strict_utf8 = false;
};
int cmd_tokenizer_encode(const TokenizerCodecArgs& a);
int cmd_tokenizer_decode(const TokenizerCodecArgs& a);

// `ete tokenizer chat`: a conversation rendered with the model's chat template, as HF's
// apply_chat_template(tokenize=False) gives it (or its ids with --ids).
struct TokenizerChatArgs {
    std::string tokenizer_config, messages, tools;  // messages: a file or "-" (stdin)
    std::vector<std::string> set_vars;              // "key=value", value JSON or a string
    bool add_generation_prompt = false, ids = false;
};
int cmd_tokenizer_chat(const TokenizerChatArgs& a);

struct QuantizeArgs {
    std::string scheme = "nf4", model_dir, out;
    bool double_quant = true;
    int blocksize = 64;
    // w8a8 / w4a8 (post-training calibration into the integer model)
    std::string calib, weight_granularity = "channel", act_granularity = "tensor", adapter;
    std::string observer = "minmax", skip_layers, linears = "all-linear";
    int calib_batches = 8, batch = 4, seq = 0, group_size = 128;
    bool allow_base_mismatch = false;
};
int cmd_quantize(const QuantizeArgs& a);
int cmd_quantize_int8(const QuantizeArgs& a);
struct ExportInt8Args {
    std::string model_dir, adapter, run, out, probe;
    bool allow_base_mismatch = false;
};
int cmd_export_int8(const ExportInt8Args& a);

struct ExportMergedArgs {
    std::string model_dir, adapter, out, dtype = "f32";
    bool allow_base_mismatch = false;
};
int cmd_export_merged(const ExportMergedArgs& a);

struct InspectArgs {
    std::string path;
    bool summary = false;  // totals only, no per-tensor lines
};
int cmd_inspect(const InspectArgs& a);

}  // namespace ete
