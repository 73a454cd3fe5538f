// ete/train/trainer.cpp — the training loop on one process or on a dp x tp x pp mesh.
//
// Every rank runs the same loop. Data: step s covers global samples [s·G, (s+1)·G) with
// G = grad_accum × (rows per global micro-batch); replica d runs its rows of every micro-batch
// (dist.h). The loss is normalised by the target tokens of the whole global step. Only world
// rank 0 writes files (metrics, config, checkpoints, the final model); every rank reads them.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <limits>
#include <thread>

#include "ete/core/log.h"
#include "ete/io/hf_model.h"
#include "ete/parallel/device_comm.h"
#include "ete/parallel/launch_env.h"
#include "ete/parallel/pp_schedule.h"
#include "ete/train/memory_estimate.h"
#include "ete/train/run_setup.h"
#include "ete/train/trainer_impl.h"

namespace ete {

namespace {

int64_t count_targets(const int32_t* t, size_t n) {
    return std::count_if(t, t + n, [](int32_t x) { return x != kIgnoreIndex; });
}

// The run's backend; a CUDA one on this rank's GPU (make_rank_backend).
std::unique_ptr<Backend> make_run_backend(const std::string& name) {
    const LaunchInfo launch = detect_launch();
    return make_rank_backend(name, launch.rank, launch.local_rank);
}

}  // namespace

Trainer::Trainer(RunConfig cfg, std::string out_dir)
    : cfg_(std::move(cfg)),
      out_(std::move(out_dir)),
      backend_(make_run_backend(cfg_.backend)),
      tok_(load_tokenizer(cfg_)),
      mc_(resolve_model(cfg_, tok_)),
      dist_(make_dist(cfg_, mc_.family().always_tied || mc_.tie_word_embeddings)),
      tp_timed_(dist_.shape().tp > 1 ? std::make_unique<TimedCommunicator>(*dist_.groups.tp)
                                     : nullptr),
      dp_dev_(zero() > 0 ? device_communicator(*dist_.groups.dp, *backend_) : nullptr),
      rows_(replica_rows(cfg_.micro_batch, dist_.shape().dp, dist_.groups.dp_rank,
                         cfg_.parallel_uneven_batch)),
      loader_(open_data(cfg_, mc_, tok_, shard_, dist_.main())),
      model_(mc_, *backend_, model_parallel(), compute_dtype(cfg_), lora_spec(cfg_),
             qat_spec(cfg_)),
      layout_(model_.params(), param_specs(mc_, {}, lora_spec(cfg_), qat_spec(cfg_))),
      opt_(make_optimizer()),
      sched_(lr_schedule_from_name(cfg_.lr_schedule)) {
    if (cfg_.qat_enabled) model_.enable_qat(qat_spec(cfg_));  // before activations are planned
    const size_t n = size_t(cfg_.grad_accum) * rows_.rows * cfg_.seq_len;
    // 1F1B holds up to min(p - stage, m) micro-batches, plus one whose input is arriving.
    const int pp = dist_.shape().pp, stage = dist_.groups.pp_rank;
    slots_ = pp == 1 ? 1 : std::min(pp - stage, cfg_.grad_accum) + 1;
    const std::vector<bool> plan = recompute_plan(cfg_.recompute, mc_.num_layers);
    // Before anything batch-sized is allocated: a run that cannot fit says so now, not with
    // std::bad_alloc or the OOM killer after growing for minutes. The barrier makes every rank
    // read the free memory at the same point: each one's weights are resident (so outside the
    // figure) and none has allocated its batch yet (so no rank's need is counted twice).
    if (cfg_.memory_check && dist_.world->size() > 1) dist_.world->barrier();
    check_memory(
        estimate_memory(model_, cfg_, dist_.shape().dp, runtime_rss_, omp_get_max_threads(),
                        model_.plan_activation_bytes(rows_.rows, cfg_.seq_len, plan, slots_)),
        cfg_, n * sizeof(int32_t) * (loader_->packed() ? 3 : 2), detect_launch().local_size);
    in_.resize(n);
    tgt_.resize(n);
    if (loader_->packed()) doc_start_.resize(n);
    model_.setup(rows_.rows, cfg_.seq_len, plan, slots_);
    // ZeRO-3 and ZeRO-2 with gradient windows: the model reduces its own gradients.
    if (dist_.shape().dp > 1 && zero() < 3 && !zero2_windows()) {
        GradSyncOptions o;
        o.bucket_bytes = size_t(cfg_.parallel_bucket_mb * double(1 << 20));
        o.bf16 = cfg_.parallel_grad_bf16;
        o.overlap = cfg_.parallel_overlap;
        sync_ = std::make_unique<GradSync>(*dist_.groups.dp, backend_.get(),
                                           static_cast<float*>(model_.params().grads().data),
                                           size_t(model_.params().numel()), o);
        if (zero() >= 2) sync_->set_owners(zero2_owners());
    }
    if (dist_.groups.pp) pp_dev_ = device_communicator(*dist_.groups.pp, *backend_);
    if (cfg_.lora_enabled && !cfg_.model_init_from.empty())
        base_hash_ = model_dir_hash(cfg_.model_init_from);
    if (dist_.tied) tied_dev_ = device_communicator(*dist_.tied, *backend_);
    if (cfg_.precision == "fp16") scaler_ = LossScaler::for_fp16(cfg_.loss_scale_window);
    if (cfg_.lora_enabled && cfg_.lora_dynamic_rank) {
        ranks_.emplace(RankRule{cfg_.lora_r_min, cfg_.lora_r_max, cfg_.lora_rank_patience,
                                cfg_.lora_rank_shrink_threshold, cfg_.lora_rank_grow_threshold},
                       cfg_.lora_r);
    }
}

// Rows [real, rows) of slot a of the buffers become padding: a valid token, no targets.
void Trainer::pad_rows(int a) {
    const int T = cfg_.seq_len;
    const int64_t o = int64_t(a) * rows_.rows * T;
    const int64_t pad = o + int64_t(rows_.real) * T, end = o + int64_t(rows_.rows) * T;
    std::fill(in_.begin() + pad, in_.begin() + end, 0);
    std::fill(tgt_.begin() + pad, tgt_.begin() + end, kIgnoreIndex);
    if (!doc_start_.empty()) std::fill(doc_start_.begin() + pad, doc_start_.begin() + end, 0);
}

// This replica's rows of global micro-batch a of `step` into slot a of the buffers.
void Trainer::fill_micro(int64_t step, int a) {
    const size_t o = size_t(a) * rows_.rows * cfg_.seq_len;
    const uint64_t first = first_sample(step, a);
    if (rows_.real > 0) loader_->fill_batch(first, rows_.real, &in_[o], &tgt_[o], doc_start(o));
    pad_rows(a);
}

// The global sample index of this replica's first row of micro-batch a of `step`.
uint64_t Trainer::first_sample(int64_t step, int a) const {
    return data_position(step) + uint64_t(a) * rows_.global_rows + rows_.first;
}

// Before the last micro-batch's backward: start the data-parallel sync and hand it each
// gradient range as backward finalises it, so bucket all-reduces overlap the rest of backward.
void Trainer::arm_grad_sync(bool last_micro) {
    if (!sync_ || !last_micro) return;
    sync_->begin();
    model_.set_grad_ready_hook(
        [this](int64_t offset, int64_t count) { sync_->ready(size_t(offset), size_t(count)); });
}

GradOwners Trainer::zero2_owners() const {
    GradOwners o;
    const ParamStore& ps = model_.params();
    const int dp = dist_.shape().dp;
    for (int r = 0; r < dp; ++r) o.owners.push_back(size_t(zero_shard(ps.numel(), dp, r).begin));
    o.owners.push_back(size_t(ps.numel()));
    const int i = ps.find(ParamRole::TokenEmbed);
    if (!dist_.tied || i < 0 || !ps.trainable(i)) return o;
    o.whole_offset = size_t(ps.offset(i));
    o.whole_count = size_t(ps.numel(i));
    return o;
}

// All gradients of the step final and summed: over replicas, then (pp > 1 with a tied
// embedding) between the first and last stage's copies.
void Trainer::reduce_grads() {
    if (sync_) {
        sync_->finish();
        model_.set_grad_ready_hook({});
    }
    if (tied_dev_) {
        // The first stage's embedding and the last stage's head copy share the name.
        Mat g = model_.params().grad(model_.params().find(ParamRole::TokenEmbed));
        if (!g.empty())  // a frozen (LoRA) base: nothing to sum, on both stages alike
            tied_dev_->all_reduce(g.data, size_t(g.numel()), DType::F32, ReduceOp::Sum);
    }
}

void Trainer::qat_finish_step() {
    QatRuntime* q = model_.qat();
    if (!q) return;
    q->finish_grads();
    std::vector<float> ranges = q->step_ranges();
    if (dist_.world->size() > 1)
        dist_.world->all_reduce(ranges.data(), ranges.size(), DType::F32, ReduceOp::Min);
    q->end_step(ranges);
}

void Trainer::inject_nonfinite(int64_t step) {
    const int rank = dist_.world->rank();
    if (!faults_.fires("nan_grad", step + 1, rank)) return;
    // The first element this rank's gradient check reads (ZeRO-2: its shard).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    ParamStore& ps = model_.params();
    backend_->upload(ps.grads().slice(zero_range().begin - ps.grad_begin(), 1).data, &nan,
                     sizeof(float));
    log_warn("ETE_FAULT: a NaN gradient on world rank {} at step {}", rank, step + 1);
}

// Each rank's bits (anomaly.h) gathered over the world: every rank of every layout takes the same
// decision. Under fp16 a non-finite gradient is an overflow for the loss scaler (the scale halves;
// not an anomaly); otherwise the gradients are unscaled and clipped by one factor (S is a power
// of two: exact), applied inside AdamW.
AnomalyVerdict Trainer::finish_grads(int64_t step, bool local_loss_bad, double loss, double* norm,
                                     float* grad_scale) {
    inject_nonfinite(step);
    bool finite = true;
    const ShardRange r = zero_range();
    const double n = zero() >= 2 ? sharded_grad_norm(model_.params(), *backend_, dist_.mp.get(),
                                                     *dist_.groups.dp, r.begin, r.end, &finite)
                                 : grad_norm(model_.params(), *backend_, dist_.mp.get(), &finite);
    uint32_t bits = local_loss_bad ? uint32_t(kNonFiniteLoss) : 0u;
    // Every element this rank holds, counted in the norm or not (a replicated copy on tp rank 1).
    if (!finite) bits |= uint32_t(scaler_.enabled() ? kOverflow : kNonFiniteGrad);
    if (finite && !std::isfinite(n)) bits |= kNonFiniteNorm;  // the norm itself overflowed
    double z = 0;
    if (dist_.main() && anomaly_.spike_zscore > 0 && std::isfinite(loss)) {
        if (auto zs = loss_window_.zscore(loss); zs && *zs > anomaly_.spike_zscore) {
            bits |= kLossSpike;
            z = *zs;
        }
    }
    std::vector<uint32_t> all(size_t(dist_.world->size()), bits);
    if (all.size() > 1) dist_.world->all_gather(&bits, all.data(), 1, DType::I32);
    const AnomalyVerdict v = combine_anomalies(all, z);
    const double S = scaler_.scale();
    // A step skipped for an anomaly alone is neither clean nor an overflow to the scaler.
    if (scaler_.enabled() && ((v.bits & kOverflow) || !v.skip()))
        scaler_.update(v.bits & kOverflow);
    *norm = n / S;
    if (v.anomalous()) {
        if (dist_.main())  // the verdict is every rank's: one line for the job
            log_warn("step {}: skipped: {} ({} in a row)", step + 1, v.describe(),
                     consecutive_skips_ + 1);
    } else if (v.skip()) {
        log_info("step {}: non-finite gradient, step skipped; loss scale {} -> {}", step + 1, S,
                 scaler_.scale());
    }
    if (v.skip()) return v;
    *grad_scale = float(double(clip_coefficient(*norm, cfg_.grad_clip)) / S);
    loss_window_.push(loss);
    return v;
}

nlohmann::json Trainer::checkpoint_extra() const {
    nlohmann::json j = nlohmann::json::object();
    if (scaler_.enabled()) j["loss_scaler"] = scaler_.state();
    if (ranks_) j["lora_rank"] = ranks_->state();
    if (anomaly_.spike_zscore > 0) j["loss_window"] = loss_window_.state();
    if (const QatRuntime* q = model_.qat()) j["qat"] = q->state();
    return j;
}

double Trainer::run_micro_batches(int64_t step, float d_scale) {
    const int R = rows_.rows, T = cfg_.seq_len, A = cfg_.grad_accum;
    double loss_sum = 0;
    for (int a = 0; a < A; ++a) {
        arm_grad_sync(a + 1 == A);
        const size_t o = size_t(a) * R * T;
        model_.set_micro_batch(0, step, int64_t(first_sample(step, a)));
        loss_sum += model_.forward_backward(&in_[o], &tgt_[o], R, T, d_scale, doc_start(o));
    }
    return loss_sum;
}

// One step of 1F1B over grad_accum micro-batches (pp_schedule.h); micro-batch a lives in model
// slot a mod slots_.
double Trainer::run_pipeline_step(int64_t step, float d_scale) {
    const int R = rows_.rows, T = cfg_.seq_len, A = cfg_.grad_accum;
    const int p = dist_.shape().pp, stage = dist_.groups.pp_rank;
    double loss_sum = 0;
    auto slot = [this](int m) { return m % slots_; };
    PipeCallbacks cb;
    cb.act_count = size_t(R) * T * size_t(mc_.hidden_size);
    cb.forward = [&](int m) {
        const size_t o = size_t(m) * R * T;
        model_.set_micro_batch(slot(m), step, int64_t(first_sample(step, m)));
        loss_sum += model_.stage_forward(slot(m), &in_[o], &tgt_[o], doc_start(o), d_scale);
    };
    cb.backward = [&](int m) {
        arm_grad_sync(m + 1 == A);
        model_.stage_backward(slot(m));
    };
    // Stage buffers are backend memory: the executor only hands them to the device-capable pp
    // group.
    auto f32 = [](Mat m) { return static_cast<float*>(m.data); };
    cb.act_in = [&](int m) { return f32(model_.stage_input(slot(m))); };
    cb.act_out = [&](int m) { return f32(model_.stage_output(slot(m))); };
    cb.grad_in = [&](int m) { return f32(model_.stage_output_grad(slot(m))); };
    cb.grad_out = [&](int m) { return f32(model_.stage_input_grad(slot(m))); };
    last_pipe_ = run_pipeline(schedule_1f1b(stage, p, A), *pp_dev_, stage, p, cb);
    return loss_sum;
}

StepMetrics Trainer::step(int64_t step) {
    const int T = cfg_.seq_len, A = cfg_.grad_accum;
    auto t0 = Clock::now();
    const int world_rank = dist_.world->rank();
    arm_step_faults(step);
    for (int a = 0; a < A; ++a) fill_micro(step, a);
    // Normalise by the target tokens of the whole global step, not a mean of means; fp16 scales
    // the loss gradient by the loss scale (a power of two: exact).
    const int64_t tokens = sum_over(*dist_.groups.dp, count_targets(tgt_.data(), tgt_.size()));
    const double loss_scale = scaler_.scale();
    float d_scale = 1.0f / float(std::max<int64_t>(tokens, 1));
    if (scaler_.enabled()) d_scale *= float(loss_scale);
    model_.params().zero_grads();
    if (tp_timed_) tp_timed_->reset();
    const auto t_compute = Clock::now();
    double loss_sum =
        dist_.shape().pp > 1 ? run_pipeline_step(step, d_scale) : run_micro_batches(step, d_scale);
    if (const int64_t ms = faults_.slow_ms(step + 1, world_rank))
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    const double compute_s = seconds_since(t_compute);
    reduce_grads();
    qat_finish_step();
    const double rho = ranks_ ? adapter_rho() : 0.0;
    loss_sum = loss_faults(step, loss_sum);
    const bool local_loss_bad = !std::isfinite(loss_sum);
    loss_sum = global_loss(loss_sum);
    const double mean_loss = loss_sum / double(std::max<int64_t>(tokens, 1));
    double norm = 0;
    float grad_scale = 1.0f;
    const AnomalyVerdict verdict =
        finish_grads(step, local_loss_bad, mean_loss, &norm, &grad_scale);
    const bool take = !verdict.skip();
    if (verdict.anomalous()) ++consecutive_skips_;
    if (take) consecutive_skips_ = 0;
    double lr = lr_at(sched_, step, cfg_.steps, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
    if (take) opt_->step(lr, grad_scale);
    // Stages 1-2: every replica updated its shard of whole masters; stage 3 gathers per layer.
    if (take && (zero() == 1 || zero() == 2)) gather_masters();
    // QAT: the fake-quantized weights of the new ones (what evaluation in between reads too).
    if (QatRuntime* q = model_.qat()) q->begin_step(step + 1);
    double dt = seconds_since(t0);
    const int64_t step_tokens = int64_t(A) * rows_.global_rows * T;
    StepMetrics m;
    m.step = step + 1;
    m.loss = mean_loss;
    m.lr = lr;
    m.grad_norm = norm;
    m.tokens_per_s = double(step_tokens) / dt;
    m.step_ms = dt * 1e3;
    m.compute_ms = compute_s * 1e3;
    m.tokens = tokens;
    if (scaler_.enabled()) m.loss_scale = loss_scale;
    if (scaler_.enabled() || !take) m.skipped = !take;
    if (!take) m.skip_causes = verdict.causes_json();
    if (tp_timed_) m.tp_comm_ms = tp_timed_->seconds() * 1e3;
    if (ranks_) {
        if (auto c = ranks_->observe(step + 1, m.loss, rho)) {
            apply_rank_change(*c, step + 1);
            m.rank_change = fmt::format("{} {} -> {}", c->reason, c->from, c->to);
        }
        m.lora_rank = ranks_->rank();
    }
    add_comm_metrics(m);
    return m;
}

void Trainer::arm_step_faults(int64_t step) {
    const int world_rank = dist_.world->rank();
    faults_.at_step_start(step + 1, world_rank);
    if (zero() == 3 && faults_.fires("kill_gather", step + 1, world_rank)) {
        model_.set_gather_hook([world_rank, step] {
            log_warn("ETE_FAULT: world rank {} kills itself in a ZeRO-3 gather of step {}",
                     world_rank, step + 1);
            ::raise(SIGKILL);
        });
    }
}

double Trainer::loss_faults(int64_t step, double loss_sum) const {
    const int world_rank = dist_.world->rank();
    if (faults_.fires("nan_loss", step + 1, world_rank)) {
        loss_sum = std::numeric_limits<double>::quiet_NaN();
        log_warn("ETE_FAULT: a NaN loss on world rank {} at step {}", world_rank, step + 1);
    }
    if (faults_.fires("spike", step + 1, world_rank)) {
        loss_sum *= 1000;
        log_warn("ETE_FAULT: a loss spike on world rank {} at step {}", world_rank, step + 1);
    }
    return loss_sum;
}

void Trainer::add_comm_metrics(StepMetrics& m) {
    if (dist_.shape().pp > 1) {
        // The mean over the stages of the share of the step not computing (waiting for
        // activations or gradients: the schedule's bubble plus transfer time).
        const int p = dist_.shape().pp;
        double b = last_pipe_.measured_bubble();
        dist_.groups.pp->all_reduce(&b, 1, DType::F64, ReduceOp::Sum);
        m.pp_bubble = b / p;
        m.pp_bubble_theory = bubble_fraction_theory(p, cfg_.grad_accum);
    }
    if (sync_) {
        m.comm_wait_ms = sync_->wait_seconds() * 1e3;
        const auto& ev = sync_->events();
        double backward_end = 0;
        for (const BucketEvent& e : ev) backward_end = std::max(backward_end, e.ready_s);
        m.buckets = int64_t(ev.size());
        m.buckets_early = std::count_if(
            ev.begin(), ev.end(), [&](const BucketEvent& e) { return e.start_s < backward_end; });
    }
}

// The global sum of a loss computed on the last pipeline stage (identical on its tp ranks): one
// contribution per replica, summed over the world so every rank gets it.
double Trainer::global_loss(double local) {
    double v = dist_.last_stage() && dist_.groups.tp_rank == 0 ? local : 0.0;
    return dist_.world->size() > 1 ? sum_over(*dist_.world, v) : v;
}

// Mean loss over train.eval_batches validation micro-batches, split across replicas like
// training micro-batches (padding rows past an uneven end), forward only through the stages.
double Trainer::evaluate() {
    const int R = rows_.rows, T = cfg_.seq_len, p = dist_.shape().pp;
    const int stage = dist_.groups.pp_rank;
    const size_t act = size_t(R) * T * size_t(mc_.hidden_size);
    double sum = 0;
    int64_t count = 0;
    for (int i = 0; i < cfg_.eval_batches; ++i) {
        const uint64_t first = uint64_t(i) * rows_.global_rows + rows_.first;
        if (rows_.real > 0)
            loader_->fill_val_batch(first, rows_.real, in_.data(), tgt_.data(), doc_start(0));
        pad_rows(0);
        count += count_targets(tgt_.data(), size_t(R) * T);
        if (p == 1) {
            sum += model_.forward_loss(in_.data(), tgt_.data(), R, T, doc_start(0));
            continue;
        }
        Communicator& pp = *pp_dev_;
        if (stage > 0) pp.recv(model_.stage_input(0).data, act, DType::F32, stage - 1, 0);
        sum += model_.stage_forward(0, in_.data(), tgt_.data(), doc_start(0), 0.0f);
        if (stage + 1 < p) pp.send(model_.stage_output(0).data, act, DType::F32, stage + 1, 0);
    }
    sum = global_loss(sum);
    count = sum_over(*dist_.groups.dp, count);
    return count ? sum / double(count) : 0.0;
}

}  // namespace ete
