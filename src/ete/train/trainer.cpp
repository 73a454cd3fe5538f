// ete/train/trainer.cpp
#include "ete/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/data/loader.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "ete/train/progress.h"

namespace ete {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The model config for this run: from model.init_from, or [model] with the vocabulary and
// special ids taken from the tokenizer.
ModelConfig resolve_model(RunConfig& cfg, const std::optional<Tokenizer>& tok) {
    ModelConfig mc = cfg.model_init_from.empty() ? cfg.model : load_hf_config(cfg.model_init_from);
    if (mc.vocab_size == 0) {
        ETE_CHECK(tok, "model.vocab_size = 0 takes the size from data.tokenizer, which is unset");
        mc.vocab_size = tok->vocab_size();
    }
    if (tok && cfg.model_init_from.empty()) {
        mc.eos_token_id = tok->eos_id();
        mc.bos_token_id = tok->bos_id();
    }
    mc.validate();
    ETE_CHECK(cfg.seq_len <= mc.max_position_embeddings,
              "train.seq_len = {} exceeds model.max_position_embeddings = {}", cfg.seq_len,
              mc.max_position_embeddings);
    cfg.model = mc;
    cfg.model_arch = arch_name(mc.arch);
    return mc;
}

// Mean loss over `batches` validation micro-batches.
double evaluate(Transformer& model, const BatchSampler& loader, int batches, int B, int T,
                std::vector<int32_t>& in, std::vector<int32_t>& tgt) {
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < batches; ++i) {
        loader.fill_val_batch(uint64_t(i) * B, B, in.data(), tgt.data());
        sum += model.forward_loss(in.data(), tgt.data(), B, T);
        count += std::count_if(tgt.begin(), tgt.begin() + int64_t(B) * T,
                               [](int32_t t) { return t != kIgnoreIndex; });
    }
    return count ? sum / double(count) : 0.0;
}

std::optional<Tokenizer> load_tokenizer(const RunConfig& cfg) {
    if (cfg.data_tokenizer.empty()) return std::nullopt;
    ETE_CHECK(fs::exists(cfg.data_tokenizer),
              "data.tokenizer '{}': file not found (train one with `ete tokenizer train`, or set "
              "data.tokenizer=\"\")",
              cfg.data_tokenizer);
    return Tokenizer::load(cfg.data_tokenizer);
}

}  // namespace

TrainSummary run_training(RunConfig cfg, const std::string& out_dir) {
    validate(cfg);
    auto backend = make_backend(cfg.backend);
    auto tok = load_tokenizer(cfg);
    ModelConfig mc = resolve_model(cfg, tok);
    ETE_CHECK(fs::exists(cfg.data_train),
              "data.train '{}': file not found (prepare it with `ete tokenize`, see README)",
              cfg.data_train);
    TokenShard shard(cfg.data_train);
    ETE_CHECK(shard.vocab_size() <= uint32_t(mc.vocab_size),
              "data.train '{}': tokens come from a vocabulary of {}, larger than the model's {}",
              cfg.data_train, shard.vocab_size(), mc.vocab_size);
    BatchSampler loader(shard, cfg.seq_len, cfg.data_val_fraction, cfg.seed);

    Transformer model(mc, *backend);
    if (cfg.model_init_from.empty()) {
        model.params().init(cfg.seed);
    } else {
        load_hf_weights(cfg.model_init_from, model.params());
    }
    const int B = cfg.micro_batch, T = cfg.seq_len, A = cfg.grad_accum;
    model.setup(B, T, recompute_plan(cfg.recompute, mc.num_layers));
    AdamW opt(model.params(), *backend,
              {cfg.lr, cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay});
    LrSchedule sched = lr_schedule_from_name(cfg.lr_schedule);

    fs::create_directories(out_dir);
    write_file_atomic(out_dir + "/config.toml", dump_toml(cfg));
    fs::remove(out_dir + "/metrics.jsonl");
    log_info(
        "ete train: {} {}L C={} H={}/{} V={} | {:.2f}M params | {} tokens/step | "
        "activations {:.0f} MiB | backend {}",
        arch_name(mc.arch), mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads,
        mc.vocab_size, double(model.params().numel()) / 1e6, int64_t(B) * T * A,
        double(model.activation_bytes()) / (1 << 20), backend->name());
    log_info("data: {} tokens in {} ({} training / {} validation windows of {})", shard.size(),
             cfg.data_train, loader.num_train_windows(), loader.num_val_windows(), T + 1);

    Progress progress(out_dir + "/metrics.jsonl", cfg.steps, cfg.log_every);
    std::vector<int32_t> in(size_t(A) * B * T), tgt(size_t(A) * B * T);
    std::vector<double> tps;
    TrainSummary sum;
    auto run_start = Clock::now();
    for (int64_t step = 0; step < cfg.steps; ++step) {
        auto t0 = Clock::now();
        for (int a = 0; a < A; ++a) {
            loader.fill_batch((uint64_t(step) * A + a) * B, B, &in[size_t(a) * B * T],
                              &tgt[size_t(a) * B * T]);
        }
        // Normalise by the target tokens of the whole step, not a mean of micro-batch means.
        int64_t tokens =
            std::count_if(tgt.begin(), tgt.end(), [](int32_t t) { return t != kIgnoreIndex; });
        model.params().zero_grads();
        double loss_sum = 0;
        for (int a = 0; a < A; ++a) {
            loss_sum += model.forward_backward(&in[size_t(a) * B * T], &tgt[size_t(a) * B * T], B,
                                               T, 1.0f / float(std::max<int64_t>(tokens, 1)));
        }
        double norm = clip_grad_norm(model.params(), *backend, cfg.grad_clip);
        double lr = lr_at(sched, step, cfg.steps, cfg.warmup_steps, cfg.lr, cfg.min_lr);
        opt.step(lr);
        double dt = seconds_since(t0);
        StepMetrics m{step + 1,
                      loss_sum / double(std::max<int64_t>(tokens, 1)),
                      lr,
                      norm,
                      double(int64_t(A) * B * T) / dt,
                      dt * 1e3,
                      tokens,
                      std::nullopt};
        bool last = step + 1 == cfg.steps;
        if (loader.num_val_windows() > 0 && cfg.eval_every > 0 &&
            ((step + 1) % cfg.eval_every == 0 || last)) {
            m.val_loss = evaluate(model, loader, cfg.eval_batches, B, T, in, tgt);
            sum.final_val_loss = *m.val_loss;
        }
        progress.record(m, seconds_since(run_start));
        tps.push_back(m.tokens_per_s);
        sum.final_loss = m.loss;
        sum.steps = step + 1;
    }
    progress.finish();
    std::nth_element(tps.begin(), tps.begin() + tps.size() / 2, tps.end());
    sum.tokens_per_s = tps[tps.size() / 2];
    save_hf_model(out_dir + "/final", mc, model.params(), tok ? cfg.data_tokenizer : "");
    log_info(
        "done: {} steps in {} | final loss {:.4f} | median {:.0f} tok/s | model saved to "
        "{}/final",
        sum.steps, format_duration(seconds_since(run_start)), sum.final_loss, sum.tokens_per_s,
        out_dir);
    return sum;
}

}  // namespace ete
