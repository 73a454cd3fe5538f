// ete/model/transformer_lora.cpp — the decoder's LoRA adapters: which linears of a layer have
// one (for rank changes), their saved activations per micro-batch, and lora.dropout's masks,
// numbered so that a token's mask depends on its place in the global batch, never on the layout.
#include <array>

#include <fmt/format.h>

#include "ete/core/rng.h"
#include "ete/model/transformer.h"

namespace ete {

std::vector<std::pair<Linear*, int>> Transformer::adapted_linears(int i) {
    DecoderLayer& L = layers_[size_t(i)];
    const int l = mp_.layer_begin + i;
    const bool split_names = !cfg_.family().fused_tensors();
    using R = ParamRole;
    std::vector<std::pair<Linear*, R>> all;
    const bool split = L.qkv.size() > 1;  // a frozen Llama base: one Linear per member
    if (split) {
        for (int k = 0; k < L.qkv.size(); ++k)
            all.push_back({&L.qkv.part(k), std::array{R::Q, R::K, R::V}[size_t(k)]});
    } else {
        all.push_back({&L.qkv.part(0), split_names ? R::Q : R::Qkv});
    }
    all.push_back({&L.o, R::AttnOut});
    if (L.fc.size() > 1) {
        all.push_back({&L.fc.part(0), R::Gate});
        all.push_back({&L.fc.part(1), R::Up});
    } else {
        all.push_back({&L.fc.part(0), split_names ? R::Gate : R::Fc});
    }
    all.push_back({&L.proj, R::Down});
    std::vector<std::pair<Linear*, int>> out;
    for (auto [lin, role] : all)
        if (lin->has_adapter()) out.push_back({lin, params_.find_lora(role, l, false)});
    return out;
}

const LoraActs* Transformer::lora_acts(int i, const LayerActs& s, int site, int n, int N,
                                       LoraActs* out) const {
    bool any = false;
    for (int k = 0; k < n; ++k) {
        const Mat& u = s.lora_u[size_t(site + k)];
        any = any || !u.empty();
        const size_t j = size_t(site + k);
        out[k] = LoraActs{};
        if (u.empty()) continue;
        out[k].u = rows(u, N);
        out[k].d_u = rows(lora_du_[j], N);
        out[k].d_uc = rows(lora_duc_[j], N);
        if (drop_.on) {
            out[k].drop = lora_dropout_mask(i, site + k);
            out[k].x_drop = lora_xd_;
            out[k].dx_drop = lora_dxd_;
        }
    }
    return any ? out : nullptr;
}

// The mask of one site of local layer i for the running micro-batch. Columns are numbered
// globally: a column-parallel site reads the whole (replicated) hidden state; a row-parallel one
// (o_proj, down_proj) this rank's heads or MLP columns, offset by the ranks before it. A padded
// MLP shard's padding columns (zeros, whatever their mask) continue past F, so down_proj's rows
// are 2F counters apart: a layout-invariant width that covers any padding (< tp <= F).
DropoutMask Transformer::lora_dropout_mask(int i, int site) const {
    DropoutMask m;
    m.p = lora_.dropout;
    m.seed = lora_.dropout_seed;
    m.stream = stable_hash(
        fmt::format("lora_dropout/step{}/layer{}/site{}", drop_.step, mp_.layer_begin + i, site));
    m.row0 = drop_.row0;
    const int64_t D = cfg_.D();
    if (site == kSiteO) {
        m.row_stride = uint64_t(cfg_.num_heads) * D;
        m.col0 = uint64_t(mp_.tp_rank) * H_ * D;
    } else if (site == kSiteProj) {
        m.row_stride = 2 * uint64_t(cfg_.intermediate_size);
        m.col0 = uint64_t(mp_.tp_rank) * F_;
    } else {
        m.row_stride = uint64_t(cfg_.hidden_size);
    }
    return m;
}

}  // namespace ete
