// ete/train/memory_estimate.cpp
#include "ete/train/memory_estimate.h"

#include <algorithm>

#include "ete/core/error.h"
#include "ete/core/mem_stats.h"
#include "ete/optim/optimizer.h"
#include "ete/parallel/fake_comm.h"
#include "ete/parallel/zero.h"
#include "ete/train/dist.h"

namespace ete {

namespace {

// What the CPU backend's NF4 GEMM dequantizes at a time (backend/cpu/nf4.cpp).
constexpr uint64_t kNf4TileElems = uint64_t(4) << 20;

}  // namespace

std::string format_bytes(uint64_t b) {
    if (b >= (uint64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1 << 30));
    return fmt::format("{:.1f} MiB", double(b) / double(1 << 20));
}

uint64_t MemoryEstimate::peak() const {
    const uint64_t resident = runtime + weights + gradients + optimizer + activations;
    return std::max(resident + frozen + comm + workspace, resident + frozen_dense + loading);
}

std::string MemoryEstimate::line(bool lora) const {
    return fmt::format(
        "runtime {} | frozen base {} | {} {} | gradients {} | optimizer {} | activations {} | "
        "comm {} | workspace {} | loading {} (transient) | peak {}",
        format_bytes(runtime), format_bytes(frozen), lora ? "adapters" : "weights",
        format_bytes(weights), format_bytes(gradients), format_bytes(optimizer),
        format_bytes(activations), format_bytes(comm), format_bytes(workspace),
        format_bytes(loading), format_bytes(peak()));
}

MemoryEstimate estimate_memory(const Transformer& model, const RunConfig& cfg, int dp,
                               uint64_t runtime_bytes, int threads,
                               std::optional<uint64_t> activations) {
    const ParamStore& ps = model.params();
    const uint64_t n = uint64_t(ps.numel());
    const DType act = model.compute_dtype();
    MemoryEstimate e;
    e.runtime = runtime_bytes;
    e.frozen = ps.frozen_bytes();
    for (int i = 0; i < ps.size(); ++i)
        if (!ps.trainable(i) && !ps.is_nf4(i))
            e.frozen_dense += uint64_t(ps.numel(i)) * dtype_size(ps.value(i).dtype);
    // Not yet loaded NF4 weights: their size from the shape (packed codes + 1 absmax byte per
    // block, the nested statistics, the map).
    for (int i = 0; i < ps.size(); ++i) {
        if (!ps.is_nf4(i) || !ps.nf4(i).empty()) continue;
        const ParamSpec& s = ps.specs()[size_t(i)];
        const uint64_t el = uint64_t(ps.numel(i)), blocks = (el + s.nf4_block - 1) / s.nf4_block;
        e.frozen +=
            (el + 1) / 2 + (s.nf4_double_quant ? blocks + blocks / 256 * 4 + 1028 : blocks * 4);
    }
    e.weights = n * 4 + (act != DType::F32 ? n * dtype_size(act) : 0) + model.qat_weight_bytes();
    e.gradients = n * 4;
    if (zero_stage(cfg) == 3 && dp > 1) {
        // The largest (last) replica's shard of masters and gradients, and the windows the groups
        // are gathered into: masters, their compute-dtype copy, gradients.
        const uint64_t shard = uint64_t(zero_shard(int64_t(n), dp, dp - 1).size());
        const std::vector<ParamStore::ShardGroup> groups =
            model.zero3_groups(cfg.parallel_zero_reshard_after_forward);
        const uint64_t win = uint64_t(zero3_window_elements(groups));
        // A frozen base: the largest replica's own parameters and the windows' frozen parts; while
        // it loads, only its own (the windows are first touched by a gather).
        const auto [own, windows] = ps.zero3_frozen_bytes(groups, dp);
        e.frozen = own + windows;
        e.frozen_dense = std::min<uint64_t>(e.frozen_dense, own);
        e.weights = shard * 4 + win * (4 + (act != DType::F32 ? dtype_size(act) : 0)) +
                    model.qat_weight_bytes();  // QAT's fq(W) copies stay whole
        e.gradients = shard * 4 + win * 4;
    }
    const bool grad_windows =
        zero2_shards_grads(cfg, model.config(), dp, model.model_parallel().num_stages);
    if (grad_windows) {  // ZeRO-2: the shard of the gradients and the groups' gradient windows
        const uint64_t shard = uint64_t(zero_shard(int64_t(n), dp, dp - 1).size());
        e.gradients = shard * 4 + uint64_t(zero3_window_elements(model.zero3_groups(true))) * 4;
    }
    // train.optimizer's state for this rank's shard (ZeRO: the size of the last replica's, which
    // is never smaller than the others', at the start of the buffer).
    const ShardRange r = zero_stage(cfg) > 0 && dp > 1 ? zero_shard(int64_t(n), dp, dp - 1)
                                                       : ShardRange{0, int64_t(n)};
    e.optimizer = uint64_t(
        optimizer_state_bytes(optimizer_kind_from_name(cfg.optimizer), ps.specs(), 0, r.size()));
    e.activations = activations.value_or(model.activation_bytes());
    if (dp > 1 && zero_stage(cfg) < 3 && !grad_windows) {  // windows reduce without buckets
        const uint64_t bucket = uint64_t(cfg.parallel_bucket_mb * double(1 << 20));
        e.comm = (cfg.parallel_grad_bf16 ? bucket / 2 : 0) +
                 (model.params().backend().host_addressable() ? 0 : bucket);
    } else if (dp > 1 && cfg.parallel_grad_bf16) {  // the largest group's bf16 staging
        const bool sharded = zero_stage(cfg) == 3;
        e.comm = uint64_t(zero_largest_group(
                     model.zero3_groups(!sharded || cfg.parallel_zero_reshard_after_forward))) *
                 2;
    }
    uint64_t largest = 0, tile = 0;
    for (int i = 0; i < ps.size(); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        const uint64_t global = uint64_t(shape_numel(s.global_shape));
        largest = std::max(largest, global);
        if (ps.is_nf4(i)) {
            const uint64_t cols = uint64_t(s.shape[1]), rows = uint64_t(s.shape[0]);
            const uint64_t tr =
                std::clamp<uint64_t>(kNf4TileElems / std::max<uint64_t>(cols, 1), 1, rows);
            tile = std::max(tile, tr * cols * dtype_size(act));
        }
    }
    e.workspace = tile + model.params().backend().gemm_workspace_bytes(act, largest, threads);
    // A model dir: the tensor as read (f32), its transposed copy (GPT-2 Conv1D), and the 16-bit
    // conversion or NF4 form the store makes of it; a fresh init: one f32 host tensor and that.
    const bool nf4 = cfg.lora_enabled && cfg.lora_base_format == "nf4";
    const bool gpt2 = model.config().family().layout == Layout::GPT2;
    const uint64_t as_stored = nf4 ? largest / 2 + largest / 16 : largest * dtype_size(act);
    e.loading = largest * (cfg.model_init_from.empty() || !gpt2 ? 4 : 8) + as_stored;
    return e;
}

namespace {

// The model of one tp rank; tp: its group (null without tp).
void build_planned(const ModelConfig& mc, const RunConfig& cfg, const MeshShape& mesh, int stage,
                   Communicator* tp, const std::function<void(Transformer&)>& each) {
    const std::unique_ptr<Backend> be = make_planning_backend();
    ModelParallel mp;
    mp.tp = tp;
    mp.tp_rank = tp ? tp->rank() : 0;
    mp.tp_size = mesh.tp;
    mp.stage = stage;
    mp.num_stages = mesh.pp;
    const std::vector<int> b = pipeline_layer_bounds(mc, mesh.pp, cfg.parallel_pp_layers);
    mp.layer_begin = b[size_t(stage)];
    mp.layer_end = b[size_t(stage) + 1];
    Transformer model(mc, *be, mp, compute_dtype(cfg), lora_spec(cfg), qat_spec(cfg));
    if (cfg.qat_enabled) model.enable_qat(qat_spec(cfg));
    each(model);
}

}  // namespace

void with_planned_model(const ModelConfig& mc, const RunConfig& cfg, const MeshShape& mesh,
                        int stage, int tp_rank, const std::function<void(Transformer&)>& each) {
    ETE_CHECK(stage >= 0 && stage < mesh.pp && tp_rank >= 0 && tp_rank < mesh.tp,
              "memory plan: stage {} and tp rank {} of parallel.pp = {}, parallel.tp = {}", stage,
              tp_rank, mesh.pp, mesh.tp);
    if (mesh.tp == 1) return build_planned(mc, cfg, mesh, stage, nullptr, each);
    run_fake_world(mesh.tp, [&](Communicator& tp) {
        build_planned(mc, cfg, mesh, stage, &tp, [&](Transformer& m) {
            if (tp.rank() == tp_rank) each(m);
        });
    });
}

MemoryEstimate estimate_planned(Transformer& model, const RunConfig& cfg, const MeshShape& mesh,
                                uint64_t runtime_bytes, int threads) {
    // As the trainer sets up: 1F1B's slots, this replica's rows, the recompute plan.
    const ModelParallel& mp = model.model_parallel();
    const int slots = mesh.pp == 1 ? 1 : std::min(mesh.pp - mp.stage, cfg.grad_accum) + 1;
    const int rows = replica_rows(cfg.micro_batch, mesh.dp, 0, cfg.parallel_uneven_batch).rows;
    const std::vector<bool> plan = recompute_plan(cfg.recompute, model.config().num_layers);
    return estimate_memory(model, cfg, mesh.dp, runtime_bytes, threads,
                           model.plan_activation_bytes(rows, cfg.seq_len, plan, slots));
}

MemoryEstimate plan_memory(const ModelConfig& mc, const RunConfig& cfg, const MeshShape& mesh,
                           int stage, int tp_rank, uint64_t runtime_bytes, int threads) {
    MemoryEstimate out;
    with_planned_model(mc, cfg, mesh, stage, tp_rank, [&](Transformer& m) {
        out = estimate_planned(m, cfg, mesh, runtime_bytes, threads);
    });
    return out;
}

void check_memory(const MemoryEstimate& e, const RunConfig& cfg, uint64_t batch_bytes,
                  int local_ranks) {
    if (!cfg.memory_check) return;
    const AvailableMemory avail = available_memory();
    if (avail.bytes == 0) return;  // nothing known: nothing to check against
    // What is resident now is already outside the available figure.
    const uint64_t now = process_rss_bytes(), peak = e.peak() + batch_bytes;
    const uint64_t more = peak > now ? peak - now : 0;
    const uint64_t mine = avail.bytes / uint64_t(std::max(local_ranks, 1));
    if (more <= mine) return;
    const uint64_t model = e.weights + e.gradients + e.optimizer + e.frozen;
    const std::string keys =
        e.activations + batch_bytes >= model
            ? fmt::format(
                  "activations {}: lower train.micro_batch ({}) or train.seq_len ({}), "
                  "set train.recompute = \"full\", or split the model with parallel.pp / "
                  "parallel.tp",
                  format_bytes(e.activations + batch_bytes), cfg.micro_batch, cfg.seq_len)
            : fmt::format(
                  "weights, gradients and optimizer {}: fine-tune with [lora] (nf4), "
                  "shard with parallel.zero_stage, or split the model with parallel.tp / "
                  "parallel.pp",
                  format_bytes(model));
    throw_error(fmt::format(
        "memory: this rank needs about {} more (estimated peak {}), but {} is available ({}{}); "
        "the largest part is {} (train.memory_check = false skips this check)",
        format_bytes(more), format_bytes(peak), format_bytes(mine), avail.source,
        local_ranks > 1 ? fmt::format(", shared by {} ranks on this host", local_ranks) : "",
        keys));
}

}  // namespace ete
