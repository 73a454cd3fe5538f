// ete/train/monitor.h — what a run exposes to operators (docs/operations.md, Metrics): the gauges
// and counters rank 0 serves to Prometheus, the model-FLOPs estimate behind MFU, and the measured
// peak it is taken against when none is configured.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ete/model/config.h"
#include "ete/train/prometheus.h"

namespace ete {

class Backend;
enum class DType : uint8_t;

// The state of a run as the last step left it (world rank 0's copy; per-rank values from the
// straggler gather).
struct RunGauges {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    int64_t steps = 0, target_steps = 0;  // optimizer steps done (skipped included) / configured
    double tokens = 0;                    // target tokens trained on (counter)
    double loss = kNone, val_loss = kNone, lr = kNone, grad_norm = kNone;
    double tokens_per_s = kNone, flops_per_s = kNone, mfu = kNone, peak_flops = kNone;
    double step_s = kNone, dp_wait_s = kNone, tp_comm_s = kNone, pp_bubble = kNone;
    double loss_scale = kNone;               // fp16 only
    std::map<std::string, int64_t> skipped;  // by cause (anomaly.h names)
    double peak_rss_bytes = 0;
    std::chrono::steady_clock::time_point last_checkpoint;  // or the run's start
    int64_t checkpoints = 0, checkpoint_failures = 0, rollbacks = 0, metrics_lines_lost = 0;
    std::vector<double> rank_step_s, rank_compute_s;  // by world rank, every straggler interval
    std::string arch, precision, layout;
    int world = 1;
};

// The families of a RunGauges snapshot (names in docs/operations.md); seconds since the last
// checkpoint measured now.
std::vector<MetricFamily> run_metric_families(const RunGauges& g);
// Each rank's compute time over the fastest rank's (1 = the fastest; 0 where unknown).
std::vector<double> straggler_scores(const std::vector<double>& compute_s);

// Model FLOPs of one trained token, forward and backward (the PaLM accounting: 6 per weight of
// the matrix products, 12 · layers · heads · head_dim · seq_len for attention), not counting
// recomputation. A frozen (LoRA) base has no weight gradient: 4 per frozen weight.
double model_flops_per_token(const ModelConfig& mc, int seq_len, int64_t trainable_params,
                             bool frozen_base);
// A measured GEMM rate of this rank in `dtype` (a few 1024³ products): the peak MFU is taken
// against when monitor.peak_flops is 0. An achieved rate, not the data sheet's.
double measure_peak_flops(Backend& backend, DType dtype);
// The (out, in) shapes of a decoder layer's linears as ETE runs them (q|k|v fused, o, gate|up
// fused or fc, down) and of the LM head, split `tp` ways.
struct ModelGemmShapes {
    std::vector<std::pair<int64_t, int64_t>> layer;
    std::pair<int64_t, int64_t> head;
};
ModelGemmShapes model_gemm_shapes(const ModelConfig& mc, int tp);
// The achieved rate of a model's own matrix products, FLOP/s: one decoder layer's linears as
// nn::Linear runs them (forward, input gradient, fp32 weight gradient; q|k|v and gate|up fused)
// and the LM head in its row chunks, for a replica micro-batch of `rows` sequences of `seq`
// tokens with the weights split `tp` ways, in `dtype`; the layer counted num_layers times and the
// head once, each the median of 5 samples of ~30 ms after a warm-up (ranks that share cores see
// their sharing in every sample, as they will in training). A layer whose pass exceeds 4e10
// FLOPs is measured on fewer tokens (≥ 256): products that large no longer depend on M. Small
// models run their GEMMs well below a 1024³ product's rate (measure_peak_flops), which is what the
// planner's compute term needs on this machine (docs/planner.md).
double measure_model_gemm_flops(Backend& backend, DType dtype, const ModelConfig& mc, int seq,
                                int rows, int tp);
// This rank's memory bandwidth through the backend's elementwise ops (x += y over 64 MiB fp32
// vectors: 3 × 64 MiB moved; the best of 3), GB/s.
double measure_memory_gbps(Backend& backend);
// This rank's causal attention, forward and backward, in seconds per (score · head dim): the
// backend's attention_forward + attention_backward over (B 2, T 256, H 8, KV 4, D 64) in fp32,
// the best of 3, over B·H·T(T+1)/2·D.
double measure_attention_s(Backend& backend);
// The attention share of model_flops_per_token (12 · layers · heads · head_dim · seq_len).
double attention_flops_per_token(const ModelConfig& mc, int seq_len);

}  // namespace ete
