// ete/train/trainer_impl.h — the Trainer class behind run_training (internal to train/):
// trainer.cpp holds the loop, trainer_state.cpp moving weights and optimizer state in and out of
// files on any layout.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ete/core/mem_stats.h"
#include "ete/data/batch_source.h"
#include "ete/data/token_shard.h"
#include "ete/data/tokenizer.h"
#include "ete/io/checkpoint.h"
#include "ete/io/hf_model.h"
#include "ete/model/transformer.h"
#include "ete/optim/adamw.h"
#include "ete/optim/loss_scaler.h"
#include "ete/parallel/grad_sync.h"
#include "ete/parallel/pp_executor.h"
#include "ete/parallel/timed_comm.h"
#include "ete/parallel/zero.h"
#include "ete/train/anomaly.h"
#include "ete/train/dist.h"
#include "ete/train/fault.h"
#include "ete/train/job_limits.h"
#include "ete/train/layout.h"
#include "ete/train/monitor.h"
#include "ete/train/progress.h"
#include "ete/train/rank_controller.h"
#include "ete/train/run_setup.h"
#include "ete/train/state_stream.h"
#include "ete/train/tensorboard.h"
#include "ete/train/trainer.h"
#include "ete/train/watchdog.h"

namespace ete {

// One training job: everything the loop needs, built once.
class Trainer {
  public:
    Trainer(RunConfig cfg, std::string out_dir);

    TrainSummary run(const ResumeOptions& resume);

  private:
    // This rank's part of the model: its tensor-parallel shard of its pipeline stage's layers.
    ModelParallel model_parallel() const {
        const MeshShape& m = dist_.shape();
        ModelParallel mp;
        mp.tp = tp_timed_.get();  // null unless tp > 1
        mp.tp_rank = dist_.groups.tp_rank;
        mp.tp_size = m.tp;
        mp.stage = dist_.groups.pp_rank;
        mp.num_stages = m.pp;
        const std::vector<int> b = pipeline_layer_bounds(mc_, m.pp, cfg_.parallel_pp_layers);
        mp.layer_begin = b[size_t(mp.stage)];
        mp.layer_end = b[size_t(mp.stage) + 1];
        mp.zero3 = zero() == 3 ? dp_dev_.get() : nullptr;
        mp.zero3_reshard = cfg_.parallel_zero_reshard_after_forward;
        mp.zero2 = zero2_windows() ? dp_dev_.get() : nullptr;
        mp.zero_reduce_bf16 = cfg_.parallel_grad_bf16;
        return mp;
    }
    // ZeRO-2 with the gradient buffer sharded (config.h zero2_shards_grads).
    bool zero2_windows() const {
        return zero2_shards_grads(cfg_, mc_, dist_.shape().dp, dist_.shape().pp);
    }
    // Whether this rank holds only part of the model (so files need the layout map).
    bool sharded() const { return dist_.shape().tp > 1 || dist_.shape().pp > 1; }
    // The ZeRO stage in effect: parallel.zero_stage with dp > 1, else 0.
    int zero() const { return dist_.shape().dp > 1 ? zero_stage(cfg_) : 0; }
    // This replica's ZeRO shard of the flat local buffers (parallel/zero.h); all of them at
    // stage 0.
    ShardRange zero_range() const {
        const int64_t n = model_.params().numel();
        if (zero() == 0) return {0, n};
        return zero_shard(n, dist_.shape().dp, dist_.groups.dp_rank);
    }
    // train.optimizer over the whole model, or (ZeRO) over this replica's shard of it.
    std::unique_ptr<Optimizer> make_optimizer() {
        OptimizerConfig c{optimizer_kind_from_name(cfg_.optimizer),
                          {cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.adam_eps, cfg_.weight_decay}};
        const ShardRange r = zero_range();
        return ete::make_optimizer(c, model_.params(), *backend_, r.begin, r.end);
    }
    // Whether every rank holds the whole model and optimizer state at their logical shapes (no
    // tp, pp or ZeRO): checkpoints then move tensor by tensor with no collective.
    bool state_is_whole() const { return !sharded() && zero() == 0; }
    // Who puts which elements into a checkpoint's tensors (state_stream.h).
    StreamRoles stream_roles() const {
        const bool first = dist_.groups.dp_rank == 0;
        return {state_is_whole(), zero() == 3 || first, zero() > 0 || first};
    }
    // ZeRO after the optimizer step: every replica's updated shard of the masters gathered into
    // every replica's backend memory (in place, device to device), the compute copy refreshed.
    void gather_masters();
    // trainer_state.cpp: weights and optimizer state in and out of files, on any layout.
    int64_t start(const ResumeOptions& resume);
    void init_weights(bool resuming);
    void load_weights();  // init_weights without the heap trim
    // verified: checkpoint_problem(dir) was just checked (not hashed again).
    void load_state(const std::string& dir, CheckpointState& st, bool verified = false);
    void load_adapter_init(const std::string& dir);
    // The newest checkpoint of the run dir that verifies (collective).
    std::optional<std::string> newest_good_checkpoint();
    // Tensor by tensor from every rank's backend memory to what world rank 0 writes (`write`
    // gets the fetches; state_stream.h), the other ranks serving until it is done or has thrown.
    void stream_out(const std::function<void(const CheckpointSource&)>& write);
    void save_final();
    // World rank 0: final/ from the logical tensors `fetch` gives (collective on the others'
    // side: save_final).
    void write_final(const TensorFetch& fetch) const;
    void fill_micro(int64_t step, int a);
    void pad_rows(int a);
    double global_loss(double local);
    StepMetrics step(int64_t step);
    uint64_t first_sample(int64_t step, int a) const;
    double run_micro_batches(int64_t step, float d_scale);  // returns this rank's loss sum
    double run_pipeline_step(int64_t step, float d_scale);
    void arm_grad_sync(bool last_micro);
    // ZeRO-2: every replica's shard as the gradient reduction's owners (a tied embedding, summed
    // with the other stage's copy afterwards, all-reduced whole).
    GradOwners zero2_owners() const;
    void reduce_grads();
    // QAT after the step's backward: weight gradients masked, the step's activation ranges
    // reduced over every rank and folded into the observers.
    void qat_finish_step();
    // The step's verdict, agreed by every rank (anomaly.h): skip it, or take it with the factor
    // that clips (and under fp16 unscales) the gradients, which AdamW applies as it reads them.
    // local_loss_bad: this rank's loss share was non-finite; loss: the global mean loss.
    // *norm = the unscaled gradient norm.
    AnomalyVerdict finish_grads(int64_t step, bool local_loss_bad, double loss, double* norm,
                                float* grad_scale);
    void inject_nonfinite(int64_t step);
    // After anomaly.max_consecutive_skips: rolls back to the newest checkpoint (true) or saves
    // one and marks the run stopped (false).
    bool on_repeated_anomalies(TrainSummary& sum);
    // Restores what a checkpoint's `extra` and counters hold beyond the tensors.
    void restore_state(const CheckpointState& st);
    nlohmann::json checkpoint_extra() const;
    double evaluate();
    // Saves a checkpoint (collective). A failed save is an error when must_succeed (a stop);
    // otherwise (an interval save) it is warned about and training goes on. Returns whether it
    // was committed (meaningful on world rank 0).
    bool checkpoint(int64_t steps_done, bool must_succeed);
    void check_replicas(int64_t steps_done);
    // The requests of every rank agreed (one all-reduce): stop (a signal on any rank), and
    // checkpoint now (SIGUSR1 on any rank, or rank 0's wall-clock interval).
    struct Requests {
        bool stop = false, checkpoint = false;
    };
    Requests agree_requests(StopSignals& signals, Clock::time_point last_checkpoint);
    // trainer_run.cpp: run()'s parts. A step with its evaluation, metrics and summary; a
    // checkpoint counted in the gauges (last_checkpoint_ when committed); a stop request's
    // checkpoint and resumable end; the final save and the closing line.
    void start_watchdog();
    StepMetrics train_step(int64_t s, TrainSummary& sum, std::optional<Progress>& progress);
    void record_checkpoint(int64_t steps, bool must_succeed);
    void stop_on_request(StopSignals& signals, TrainSummary& sum);
    void finish_run(TrainSummary& sum, std::vector<double>& tps);
    Clock::time_point last_checkpoint_{};
    // step()'s parts: ETE_FAULT's faults at the step's start and on its loss; the pipeline's
    // and the gradient sync's measurements.
    void arm_step_faults(int64_t step);
    double loss_faults(int64_t step, double loss_sum) const;
    void add_comm_metrics(StepMetrics& m);

    // The scheduler's limits (trainer_job.cpp, job_limits.h). Collective: records this start in
    // DIR/.ete/attempts.json and refuses it after train.max_attempts_without_progress failed
    // attempts in a row from the same step.
    void begin_attempt(int64_t start_step);
    void end_attempt(const char* how, int64_t step);  // rank 0: "done" or "stopped"
    // Rank 0: whether the job's end time is train.checkpoint_before_end_s away (once per end
    // time; the end time is read again every few minutes: an operator may extend it).
    bool end_checkpoint_due();
    // Rank 0: warns once when a step and a checkpoint take longer than a stop signal leaves.
    void check_stop_grace(double step_s);
    // A stop requested before the first step (collective): nothing new to save.
    bool stop_before_first_step(StopSignals& signals, TrainSummary& sum);
    std::optional<int64_t> job_end_;
    Clock::time_point job_end_read_{};
    std::optional<StopGrace> grace_;
    bool job_end_known_ = false, end_checkpoint_done_ = false, grace_read_ = false,
         grace_warned_ = false;
    double last_step_s_ = 0, last_save_s_ = 0;
    // parallel.auto: the step times of this run's first steps, for the measured-vs-predicted line.
    std::vector<double> auto_steps_s_;
    void log_auto_measured(int64_t nth, double step_s, bool last);
    void log_start() const;
    // At start: this rank's memory estimate, and the largest rank's (collective).
    void log_memory_estimate() const;
    // After the first steps: the measured peak RSS beside the estimate of log_start (collective).
    void log_memory_measured();
    // Samples since the start of training after `step` steps (layout-independent).
    uint64_t data_position(int64_t step) const {
        return uint64_t(step) * uint64_t(cfg_.grad_accum) * uint64_t(rows_.global_rows);
    }
    int32_t* doc_start(size_t offset) {
        return doc_start_.empty() ? nullptr : doc_start_.data() + offset;
    }
    int64_t sum_over(Communicator& c, int64_t v) {
        c.all_reduce(&v, 1, DType::I64, ReduceOp::Sum);
        return v;
    }
    double sum_over(Communicator& c, double v) {
        c.all_reduce(&v, 1, DType::F64, ReduceOp::Sum);
        return v;
    }

    RunConfig cfg_;
    std::string out_;
    std::unique_ptr<Backend> backend_;
    std::optional<Tokenizer> tok_;
    ModelConfig mc_;
    Dist dist_;
    std::unique_ptr<TimedCommunicator> tp_timed_;  // tp > 1: the model's tp group, timed
    // ZeRO: the dp group over backend memory (stages 1-2: the gather of the masters; stage 3: the
    // model's gathers and reductions), or null.
    std::unique_ptr<Communicator> dp_dev_;
    ReplicaRows rows_;
    std::optional<TokenShard> shard_;  // data.format = tokens; outlives the sampler
    std::unique_ptr<BatchSource> loader_;
    uint64_t runtime_rss_ = process_rss_bytes();  // before the model: libraries, tokenizer, data
    Transformer model_;
    LayoutMap layout_;
    int slots_ = 1;  // micro-batches in flight on this pipeline stage (+1 arriving)
    std::unique_ptr<Optimizer> opt_;
    LrSchedule sched_;
    std::unique_ptr<GradSync> sync_;  // dp > 1
    // The pp and tied-embedding groups over backend memory (stage buffers, gradients).
    std::unique_ptr<Communicator> pp_dev_, tied_dev_;
    LossScaler scaler_;                         // enabled for train.precision = fp16
    FaultPlan faults_ = FaultPlan::from_env();  // ETE_FAULT (tests and drills)
    AnomalyConfig anomaly_ = anomaly_config(cfg_);
    LossWindow loss_window_{anomaly_.window};
    int consecutive_skips_ = 0, rollbacks_ = 0;
    std::vector<int32_t> in_, tgt_;        // (grad_accum, rows, T)
    std::vector<int32_t> doc_start_;       // packed sources only (else empty)
    PipeStats last_pipe_;                  // the last pipelined step's timing (pp > 1)
    std::string base_hash_;                // LoRA from a model dir: model_dir_hash of the base
    std::optional<RankController> ranks_;  // lora.dynamic_rank

    // Monitoring (trainer_monitor.cpp): Prometheus on rank 0, TensorBoard, the straggler gather.
    void start_monitor();                    // collective: the measured peak is summed
    void gather_rank_times(StepMetrics& m);  // collective, every monitor.straggler_every steps
    void publish(const StepMetrics& m, const Progress* progress);  // rank 0
    template <typename F>
    void update_gauges(F&& f) {
        std::lock_guard<std::mutex> lock(gauges_mu_);
        f(gauges_);
    }
    std::mutex gauges_mu_;
    RunGauges gauges_;  // rank 0's, read by the metrics server's thread under gauges_mu_
    std::unique_ptr<TensorBoardWriter> tb_;
    double flops_per_token_ = 0, peak_flops_ = 0;  // peak: every rank's together
    Clock::time_point run_start_ = Clock::now();
    std::unique_ptr<MetricsServer> metrics_server_;  // after gauges_: stops before they go
    std::unique_ptr<Watchdog> watchdog_;             // world > 1

    // Dynamic rank (trainer_rank.cpp), all collective: the step's ‖∇B‖/‖B‖ over the mesh; a
    // change applied to every adapter (truncated SVD or zero columns, moments reset); the rank
    // set on every adapted layer of this rank.
    double adapter_rho();
    void apply_rank_change(const RankChange& c, int64_t step);
    void set_adapter_ranks(int r);
};

}  // namespace ete
