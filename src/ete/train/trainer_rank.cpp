// ete/train/trainer_rank.cpp — dynamic LoRA rank inside the trainer (train/rank_controller.h
// decides, model/lora_rank.h does the maths).
//
// A change is applied to the logical whole adapters: every rank contributes its owned elements
// (layout.h), world rank 0 shrinks or grows each adapter on the host and broadcasts the result,
// and every rank takes its slice back — so replicas, tensor shards and pipeline stages stay
// exactly consistent. The optimizer state of the adapters is reset: a shrink rotates each
// adapter's basis (the old moments describe other coordinates) and a grow adds fresh ones. With
// AdamW's step count unchanged (bias correction ~1), the first updates afterwards are about
// 0.45 of a warm Adam step ((1-β1)/√(1-β2) at the defaults) and grow back as the moments refill.
#include <cmath>

#include "ete/core/log.h"
#include "ete/core/rng.h"
#include "ete/model/lora_rank.h"
#include "ete/train/trainer_impl.h"

namespace ete {

double Trainer::adapter_rho() {
    ParamStore& ps = model_.params();
    double s[2] = {0, 0};  // Σ |∇B|², Σ |B|² of the elements this rank counts
    if (dist_.groups.dp_rank == 0) {
        for (int i = 0; i < ps.size(); ++i) {
            if (ps.specs()[size_t(i)].role != ParamRole::LoraB || !ps.counts_in_norm(i)) continue;
            s[0] += backend_->sum_squares(ps.grad(i).flat());
            s[1] += backend_->sum_squares(ps.master(i).flat());
        }
    }
    if (dist_.world->size() > 1) dist_.world->all_reduce(s, 2, DType::F64, ReduceOp::Sum);
    const double loss_scale = scaler_.enabled() ? scaler_.scale() : 1.0;
    return std::sqrt(s[0]) / loss_scale / std::max(std::sqrt(s[1]), 1e-30);
}

void Trainer::set_adapter_ranks(int r) {
    for (int l = 0; l < model_.model_parallel().layer_end - model_.model_parallel().layer_begin;
         ++l)
        for (auto [lin, a] : model_.adapted_linears(l)) lin->set_rank(r);
}

void Trainer::apply_rank_change(const RankChange& c, int64_t step) {
    ParamStore& local = model_.params();
    std::vector<float> lp(size_t(local.numel()));
    local.download_masters(lp.data());
    std::vector<float> whole =
        layout_.to_global(lp.data(), dist_.groups.dp_rank == 0, *dist_.world);
    double dropped = 0;
    if (dist_.main()) {
        const std::vector<ParamSpec>& g = layout_.global_specs();
        std::vector<int64_t> offset(g.size() + 1, 0);
        for (size_t i = 0; i < g.size(); ++i) offset[i + 1] = offset[i] + shape_numel(g[i].shape);
        for (size_t i = 0; i < g.size(); ++i) {
            if (g[i].role != ParamRole::LoraA) continue;
            // param_specs puts each adapter's B right after its A.
            const size_t j = i + 1;
            ETE_ASSERT(j < g.size() && g[j].role == ParamRole::LoraB &&
                       g[j].lora_base == g[i].lora_base && g[j].layer == g[i].layer);
            const int R = int(g[i].shape[0]);
            const int64_t in = g[i].shape[1], out = g[j].shape[0];
            float* a = whole.data() + offset[i];
            float* b = whole.data() + offset[j];
            if (c.to < c.from) {
                const std::vector<double> d = lora_shrink(
                    a, b, in, out, R, c.from, c.to,
                    lora_scale(float(cfg_.lora_alpha), cfg_.lora_r, cfg_.lora_use_rslora));
                if (!d.empty()) dropped = std::max(dropped, d.front());
            } else {
                const CounterRng rng(cfg_.seed, g[i].name + "#grow@" + std::to_string(step));
                const float bound = float(1.0 / std::sqrt(double(in)));
                lora_grow(a, b, in, out, R, c.from, c.to, [&](int64_t k) {
                    return (2.0f * rng.uniform(uint64_t(k)) - 1.0f) * bound;
                });
            }
        }
    }
    if (dist_.world->size() > 1) {
        dist_.world->broadcast(whole.data(), whole.size(), DType::F32, 0);
        dist_.world->broadcast(&dropped, 1, DType::F64, 0);
    }
    layout_.gather_local(whole.data(), lp.data());
    local.upload_masters(lp.data());
    const size_t slice = size_t(opt_->shard_end() - opt_->shard_begin());
    const std::vector<float> zeros(slice, 0.0f);
    for (int k = 0; k < opt_->state_count(); ++k) opt_->upload_state(k, zeros.data());
    set_adapter_ranks(c.to);
    log_info(
        "lora rank: {} -> {} after step {} ({}: smoothed loss improved {:.4f} over the "
        "window, |grad B|/|B| {:.3g}){}",
        c.from, c.to, step, c.reason, c.improvement, c.rho,
        c.to < c.from ? fmt::format(", largest discarded singular value {:.3g}", dropped)
                      : std::string(", new B columns zero: output unchanged"));
}

}  // namespace ete
