// ete/train/trainer_state.cpp — weights and optimizer state in and out of files on any layout.
//
// Files always hold the logical whole model (layout.h): a run on one process, on dp replicas or
// on a tp x pp mesh writes the same checkpoint and the same HF directory, and any layout resumes
// from any checkpoint. World rank 0 writes; every rank reads.
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/ranges.h>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/io/hf_model.h"
#include "ete/io/peft.h"
#include "ete/model/shard.h"
#include "ete/train/inference_model.h"
#include "ete/train/run_setup.h"
#include "ete/train/trainer_impl.h"

namespace ete {

namespace fs = std::filesystem;

void Trainer::gather_masters() {
    ParamStore& ps = model_.params();
    zero_all_gather(*dp_dev_, ps.masters().data, ps.numel(), DType::F32);
    ps.refresh_compute();
}

void Trainer::init_weights(bool resuming) {
    // Loading allocates and frees a tensor-sized host buffer per tensor between the long-lived
    // parameter buffers. glibc raises its mmap threshold after the first large free, so later
    // ones come from the heap and stay resident after they are freed (measured: +250 MB at the
    // peak of a 1.1B QLoRA load); a fixed threshold keeps every large buffer mmapped, returned
    // to the system when freed. Afterwards the threshold goes to where glibc's own adjustment
    // ends (32 MiB): the training step's transient buffers (GEMM scratchpads) are then reused
    // from the heap instead of being mapped and faulted in anew at every call.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    load_weights();
    // A resume takes the adapters from the checkpoint (lora.init_from may be gone by then).
    if (!resuming && !cfg_.lora_init_from.empty()) load_adapter_init(cfg_.lora_init_from);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    malloc_trim(0);
}

// lora.init_from: the adapters of a PEFT dir replace the fresh ones (every rank reads the whole
// adapters and keeps its slice). The dir must describe the run's adapters exactly — a different
// rank, scale or module set would silently train another model.
void Trainer::load_adapter_init(const std::string& dir) {
    const PeftAdapterInfo info = load_peft_config(dir, mc_);
    const LoraSpec run = lora_spec(cfg_);
    const std::string what = fmt::format("lora.init_from = '{}'", dir);
    ETE_CHECK(info.spec.r == run.r && info.rank_pattern.empty(),
              "{}: its adapters have rank {}{}, but lora.r = {} (expected the same rank)", what,
              info.spec.r, info.rank_pattern.empty() ? "" : " with a rank_pattern", run.r);
    ETE_CHECK(info.alpha_pattern.empty(),
              "{}: its alpha_pattern gives some adapters another scale; lora.init_from needs one "
              "lora_alpha for every adapter",
              what);
    ETE_CHECK(info.spec.alpha == run.alpha && info.spec.rslora == run.rslora,
              "{}: lora_alpha {} use_rslora {}, but this run has lora.alpha = {} lora.use_rslora "
              "= {} (expected the same scale)",
              what, info.spec.alpha, info.spec.rslora, run.alpha, run.rslora);
    ETE_CHECK(lora_target_roles(info.spec, mc_) == lora_target_roles(run, mc_),
              "{}: target_modules {} differ from lora.targets '{}'", what,
              fmt::join(info.spec.targets, ","), cfg_.lora_targets);
    HostParams whole(layout_.global_specs());
    load_peft_weights(dir, mc_, whole, [&](int i, const float* v) {
        std::copy(v, v + whole.numel(i), whole.param(i));
    });
    std::vector<float> lp(size_t(model_.params().numel()));
    layout_.gather_local(whole.data(), lp.data());
    model_.params().upload_masters(lp.data());
    log_info("lora: adapters from {} (rank {})", dir, info.spec.r);
}

void Trainer::load_weights() {
    ParamStore& local = model_.params();
    if (cfg_.model_init_from.empty()) {
        local.init(cfg_.seed);  // layout-invariant: shards are slices of the whole
        return;
    }
    // LoRA: the adapters from the seed, the frozen base from the dir (NF4 quantized tensor by
    // tensor as it is uploaded, so the host never holds more than one f32 tensor). Learned QAT
    // scale factors (qat.learnable_scale) are not in the dir either: they start at their init, 1.
    if (cfg_.lora_enabled || qat_spec(cfg_).learnable_scale) local.init_trainable(cfg_.seed);
    if (!sharded()) return load_hf_weights(cfg_.model_init_from, local);
    // Tensor by tensor: each logical tensor is cut to this rank's slice and uploaded, so no rank
    // holds more than one whole tensor on the host.
    const ParamTable global(param_specs(mc_, {}, lora_spec(cfg_), qat_spec(cfg_)));
    auto take = [&](int g, const float* values) {
        const std::string& name = global.specs()[size_t(g)].name;
        if (!local.has(name)) return;                    // another stage's
        local.upload_global(local.index(name), values);  // NF4: quantized whole, then sharded
    };
    // A pre-quantized weight keeps its blocks where this rank holds it in NF4 (re-quantizing its
    // dequantized values would not give the same double-quantized statistics).
    auto take_nf4 = [&](int g, const Nf4Tensor& t) {
        const std::string& name = global.specs()[size_t(g)].name;
        if (!local.has(name)) return;
        const int i = local.index(name);
        if (local.is_nf4(i)) return local.upload_global_nf4(i, t, Nf4Origin::Stored);
        std::vector<float> v(size_t(t.numel()));
        nf4_dequantize(t, v.data());
        take(g, v.data());
    };
    load_hf_tensors(cfg_.model_init_from, global, take, take_nf4);
}

// Reads checkpoint `dir` tensor by tensor into this rank's part of the weights and of the
// optimizer state, straight into backend memory (state_stream.h).
void Trainer::load_state(const std::string& dir, CheckpointState& st, bool verified) {
    StateStream stream(layout_, model_.params(), *opt_, *dist_.world, stream_roles());
    st = load_checkpoint(dir, ParamTable(layout_.global_specs()), stream.sink(), !verified);
}

void Trainer::restore_state(const CheckpointState& st) {
    opt_->set_steps_taken(st.optimizer_steps);
    if (scaler_.enabled() && st.extra.contains("loss_scaler"))
        scaler_.restore(st.extra["loss_scaler"]);
    if (ranks_ && st.extra.contains("lora_rank")) {
        ranks_->restore(st.extra["lora_rank"]);
        set_adapter_ranks(ranks_->rank());
    }
    if (st.extra.contains("loss_window")) loss_window_.restore(st.extra["loss_window"]);
    if (QatRuntime* q = model_.qat(); q && st.extra.contains("qat"))
        q->restore(st.extra["qat"], "checkpoint");
}

// World rank 0 hashes the candidates (one read of each file, not one per rank) and every rank
// gets its choice.
std::optional<std::string> Trainer::newest_good_checkpoint() {
    std::string pick = dist_.main() ? newest_verified_checkpoint(out_).value_or("") : "";
    if (dist_.world->size() > 1) {
        int64_t n = int64_t(pick.size());
        dist_.world->broadcast(&n, 1, DType::I64, 0);
        pick.resize(size_t(n));
        if (n > 0) dist_.world->broadcast(pick.data(), size_t(n), DType::U8, 0);
    }
    if (pick.empty()) return std::nullopt;
    return pick;
}

// Initialises or resumes; returns the number of steps already done.
int64_t Trainer::start(const ResumeOptions& resume) {
    // Before anything looks for checkpoints: a copy set aside by a killed save goes back.
    if (dist_.main()) {
        recover_checkpoint_dirs(out_);
        if (recover_dir_leftovers(out_ + "/final") > 0)
            log_info("removed what a killed final save left in {}", out_);
    }
    std::optional<std::string> from;
    bool verified = false;
    if (resume.from == "auto") {
        from = newest_good_checkpoint();
        ETE_CHECK(from || !latest_checkpoint(out_),
                  "--resume auto: no checkpoint in {}/checkpoints verifies (see the warnings "
                  "above); resume from one explicitly with --resume DIR, or start another --out",
                  out_);
        verified = from.has_value();
        if (!from) log_info("resume auto: no checkpoint in {}/checkpoints, starting fresh", out_);
    } else if (!resume.from.empty()) {
        from = resume.from;
    }
    if (!from) {
        // A fresh run must not mix its checkpoints with an earlier run's (pruning could then
        // delete the new ones and --resume auto would pick the old): never silently.
        auto old = resume.from.empty() ? latest_checkpoint(out_) : std::nullopt;
        ETE_CHECK(!old,
                  "--out '{}' already holds checkpoints of a run (newest {}): continue it "
                  "with --resume auto, or choose another --out",
                  out_, *old);
        init_weights(false);
        if (dist_.main()) fs::remove(out_ + "/metrics.jsonl");
        return 0;
    }
    CheckpointState st;
    // A LoRA checkpoint holds the adapters only: the frozen base comes from where it came from
    // at the start (model.init_from, or the seed), and the adapters are then overwritten.
    if (cfg_.lora_enabled) init_weights(true);
    load_state(*from, st, verified);
    // A checkpoint of an ETE from before the XXH3 fingerprint recorded its base's older one:
    // compare in that form, and go on recording it (this run's checkpoints agree).
    if (const std::string saved = st.run.is_object() ? st.run.value("lora.base_hash", "") : "";
        !base_hash_.empty() && is_legacy_model_dir_hash(saved))
        base_hash_ = model_dir_hash_like(cfg_.model_init_from, saved);
    check_resume_compatible(st.run, run_settings(cfg_, mc_, base_hash_), *from, resume.force);
    // A step count or data position that is not a whole number of this run's steps is a corrupt
    // state.json (one without a checksum, from an older ETE); a whole number of other-sized steps
    // is a changed global batch.
    ETE_CHECK(st.step >= 0 && st.optimizer_steps >= 0 && st.optimizer_steps <= st.step &&
                  st.data_position % data_position(1) == 0,
              "checkpoint '{}': state.json is inconsistent (step {}, optimizer steps {}, data "
              "position {} samples, not a whole number of steps of {}): corrupt; resume from "
              "another checkpoint",
              *from, st.step, st.optimizer_steps, st.data_position, data_position(1));
    ETE_CHECK(st.data_position == data_position(st.step),
              "checkpoint '{}': {} samples were used in {} steps, but this run takes {} per step "
              "(parallel.uneven_batch = drop changes the global batch with parallel.dp); resume "
              "with the same global batch",
              *from, st.data_position, st.step, data_position(1));
    restore_state(st);
    if (dist_.main()) truncate_metrics(out_ + "/metrics.jsonl", st.step);
    log_info("resumed from {} at step {}", *from, st.step);
    return st.step;
}

void Trainer::stream_out(const std::function<void(const CheckpointSource&)>& write) {
    StateStream stream(layout_, model_.params(), *opt_, *dist_.world, stream_roles());
    if (!dist_.main()) return stream.serve();
    try {
        write(stream.source());
    } catch (...) {
        stream.finish();  // the other ranks stop serving before this rank ends the job
        throw;
    }
    stream.finish();
}

bool Trainer::checkpoint(int64_t steps_done, bool must_succeed) {
    auto t0 = Clock::now();
    const CheckpointState st{steps_done, opt_->steps_taken(), data_position(steps_done),
                             run_settings(cfg_, mc_, base_hash_), checkpoint_extra()};
    std::string dir;
    bool ok = true;
    // Only world rank 0 writes, after the collectives: a failure there leaves the others at the
    // barrier below, which it then joins (or, when the save must succeed, it ends the job).
    auto write = [&](const std::function<std::string()>& save) {
        try {
            dir = save();
        } catch (const std::exception& e) {  // ete::Error, or a file system error
            if (must_succeed) throw;
            ok = false;
            log_warn(
                "checkpoint after step {} failed: {}; training goes on and the next "
                "checkpoint tries again",
                steps_done, e.what());
        }
    };
    stream_out([&](const CheckpointSource& src) {
        const ParamTable table(layout_.global_specs());
        write([&] { return save_checkpoint(out_, st, table, src, dump_toml(cfg_)); });
    });
    if (dist_.main() && ok) {
        prune_checkpoints(out_, cfg_.keep_checkpoints);
        last_save_s_ = seconds_since(t0);
        log_info("checkpoint: {} ({:.1f}s)", dir, last_save_s_);
    }
    dist_.world->barrier();  // nobody moves on (or exits) before the checkpoint is committed
    return ok;
}

// final/ on world rank 0: a PEFT adapter dir over the base (LoRA) or an HF model dir. Weights
// that are not finite are refused, as in checkpoints.
namespace {

// The tokenizer.json final/ carries: the run's (data.tokenizer), else that of the model dir the
// run started from, so a fine-tune of an HF dir on pre-tokenized shards still generates.
std::string final_tokenizer(const RunConfig& c, bool run_has_one) {
    if (run_has_one) return c.data_tokenizer;
    if (c.model_init_from.empty()) return "";
    const std::string t = (fs::path(c.model_init_from) / "tokenizer.json").string();
    return fs::exists(t) ? t : "";
}

}  // namespace

void Trainer::write_final(const TensorFetch& fetch) const {
    const ParamTable table(layout_.global_specs());
    // Every tensor is checked as it is fetched; a weight that is not finite ends the save before
    // the dir is committed.
    const TensorFetch checked = [&](int i, float* out) {
        fetch(i, out);
        if (table.trainable(i))
            check_finite(table.specs()[size_t(i)].name, out, size_t(table.numel(i)));
    };
    if (!cfg_.lora_enabled) {
        // A QAT run's model keeps its spec and observers beside it (`ete export int8` reads them).
        ExtraFiles extra;
        if (model_.qat()) {
            ScaleFactors factors;  // the learned ones (qat.learnable_scale), whole
            for (int i = 0; i < table.size(); ++i) {
                const ParamSpec& s = table.specs()[size_t(i)];
                if (s.role != ParamRole::QatScale) continue;
                const std::string weight =
                    s.name.substr(0, s.name.size() - qat_scale_name("").size());
                std::vector<float>& f = factors[weight];
                f.resize(size_t(table.numel(i)));
                checked(i, f.data());
            }
            extra.emplace_back(kQatStateFile, qat_state_json(model_.qat()->spec(),
                                                             model_.qat()->state(), factors));
        }
        return save_hf_model(out_ + "/final", mc_, table, checked,
                             final_tokenizer(cfg_, tok_.has_value()), kDefaultMaxShardBytes,
                             save_dtype(cfg_), extra);
    }
    // A LoRA run's logical tensors are its adapters (the frozen base is not saved): a host copy.
    HostParams adapters(table);
    for (int i = 0; i < adapters.size(); ++i) checked(i, adapters.param(i));
    // At the final rank, with lora_alpha chosen so PEFT's alpha / r is the scale trained with
    // (fixed at alpha / r of the first rank while the rank changes).
    LoraSpec spec = lora_spec(cfg_);
    if (ranks_ && ranks_->rank() != spec.r) {
        const float scale = lora_scale(spec.alpha, spec.r, spec.rslora);
        spec.r = ranks_->rank();
        spec.alpha = scale * (spec.rslora ? std::sqrt(float(spec.r)) : float(spec.r));
    }
    // QAT over LoRA: the spec and observers beside the adapter (learned scales need a trainable
    // base, so there are none).
    ExtraFiles extra;
    if (model_.qat())
        extra.emplace_back(kQatStateFile,
                           qat_state_json(model_.qat()->spec(), model_.qat()->state()));
    save_peft_adapter(
        out_ + "/final", mc_, spec, adapters,
        cfg_.model_init_from.empty() ? "" : fs::absolute(cfg_.model_init_from).string(), base_hash_,
        [&](const std::string&) { return spec.r; }, DType::F32, extra);
}

void Trainer::save_final() {
    // Training is over: the moments and gradients are not needed again (a model near the memory
    // limit needs their memory for what the save holds).
    opt_->release_state();
    model_.params().release_grads();
    // As checkpoints are: no rank holds the whole model on the host (280 GB for a 70B model in
    // fp32; at ZeRO-3 every rank held a whole copy before).
    const auto t0 = Clock::now();
    try {
        stream_out([&](const CheckpointSource& src) { write_final(src.param); });
    } catch (const Error& e) {
        if (!dist_.main()) throw;
        const std::optional<std::string> newest = latest_checkpoint(out_);
        throw_error(fmt::format("{}; final/ was not saved, the newest checkpoint is {}", e.what(),
                                newest.value_or("(none)")));
    }
    dist_.world->barrier();
    if (dist_.main()) log_info("final: {}/final ({:.1f}s)", out_, seconds_since(t0));
}

}  // namespace ete
