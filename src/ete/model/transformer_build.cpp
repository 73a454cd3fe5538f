// ete/model/transformer_build.cpp — the builder: each layer of this stage assembled from the
// family's spec (model/family.h) as views into the ParamStore (its buffers never move), and the
// gradient groups the backward reports.
#include <algorithm>
#include <tuple>

#include "ete/model/shard.h"
#include "ete/model/transformer.h"

namespace ete {

// A Linear whose weight starts at parameter w and spans `out` rows (a trainable fused group
// spans the adjacent members in the flat buffers), with the bias starting at parameter b (or
// none), and the adapter of w's role when it has one.
Linear Transformer::make_linear(int w, int b, int64_t out, int64_t in, TpMode mode) {
    ParamStore& ps = params_;
    LinearParams p;
    if (ps.is_nf4(w)) {
        p.nf4 = &ps.nf4(w);
    } else {
        p.w = ps.weight_span(w, out, in);
        p.d_w = ps.grad_span(w, out, in);
    }
    if (b >= 0) {
        p.b = ps.trainable(b) ? CMat(ps.master_span(b, 1, out)).flat() : ps.value(b).flat();
        p.d_b = ps.trainable(b) ? ps.grad_span(b, 1, out).flat() : Vec{};
    }
    Linear lin(p, mode, tp_.get());
    const ParamSpec& ws = ps.specs()[size_t(w)];
    const int ia = ps.find_lora(ws.role, ws.layer, false);
    if (ia >= 0) {
        const int ib = ps.find_lora(ws.role, ws.layer, true);
        const float scale = lora_scale(lora_.alpha, lora_.r, lora_.rslora);
        lin.set_adapter({ps.weight(ia), ps.weight(ib), ps.grad(ia), ps.grad(ib), scale, lora_.r});
    }
    return lin;
}

// q|k|v or gate|up of global layer l: one Linear over a trainable base; a frozen base (each
// member its own buffer) runs member by member.
FusedLinear Transformer::make_fused(int l, const std::vector<FusedMember>& members) {
    const int64_t C = cfg_.hidden_size;
    auto at = [&](ParamRole r) { return params_.find(r, l); };
    const int w0 = at(members[0].w);
    if (params_.trainable(w0)) {
        int64_t rows = 0;
        for (const FusedMember& x : members) rows += x.rows;
        return FusedLinear({make_linear(w0, at(members[0].b), rows, C, TpMode::Column)});
    }
    std::vector<Linear> parts;
    for (const FusedMember& x : members)
        parts.push_back(make_linear(at(x.w), at(x.b), x.rows, C, TpMode::Column));
    return FusedLinear(std::move(parts));
}

Vec Transformer::norm_scratch() const {
    if (!norm_w_.data()) return {};
    return Vec{norm_w_.data(), DType::F32, int64_t(norm_w_.bytes() / sizeof(float))};
}

// The norm of weight w and bias b (-1: none) in the family's kind.
Norm Transformer::make_norm(int w, int b) {
    auto vec = [&](int i) { return i < 0 ? CVec{} : params_.value(i).flat(); };
    auto dvec = [&](int i) { return i < 0 ? Vec{} : params_.grad(i).flat(); };
    return Norm({vec(w), dvec(w), vec(b), dvec(b)}, cfg_.family().norm == NormKind::LayerNorm,
                float(cfg_.norm_eps), cfg_.family().norm_offset(), norm_scratch());
}

// Global layer l as the family's row says: its norms (and Gemma's post norms), q|k|v with the
// per-head q/k norms, o_proj, the MLP's input projection(s) and down_proj.
DecoderLayer Transformer::build_layer(int l) {
    using R = ParamRole;
    const bool split = !cfg_.family().fused_tensors();  // a tensor per q, k, v, gate, up
    const int64_t C = cfg_.hidden_size, D = cfg_.D(), HD = int64_t(H_) * D;
    const int64_t KVD = int64_t(KV_) * D, FC = cfg_.family().gated_mlp() ? 2 * int64_t(F_) : F_;
    auto at = [&](R r) { return params_.find(r, l); };
    DecoderLayer L;
    L.ln1 = make_norm(at(R::AttnNorm), at(R::AttnNormBias));
    L.ln2 = make_norm(at(R::MlpNorm), at(R::MlpNormBias));
    L.qkv =
        split ? make_fused(l, {{R::Q, R::QBias, HD}, {R::K, R::KBias, KVD}, {R::V, R::VBias, KVD}})
              : make_fused(l, {{R::Qkv, R::QkvBias, HD + 2 * KVD}});
    L.o = make_linear(at(R::AttnOut), at(R::AttnOutBias), C, HD, TpMode::Row);
    L.fc = split ? make_fused(l, {{R::Gate, R::GateBias, F_}, {R::Up, R::UpBias, F_}})
                 : make_fused(l, {{R::Fc, R::FcBias, FC}});
    L.proj = make_linear(at(R::Down), at(R::DownBias), C, F_, TpMode::Row);
    if (cfg_.family().qk_norm) {
        const CVec q = params_.value(at(R::QNorm)).flat(), k = params_.value(at(R::KNorm)).flat();
        L.qk = HeadNorm({q, params_.grad(at(R::QNorm)).flat(), {}, {}},
                        {k, params_.grad(at(R::KNorm)).flat(), {}, {}}, float(cfg_.norm_eps), H_,
                        KV_, int(D), cfg_.family().norm_offset(), norm_scratch());
    }
    if (cfg_.family().sandwich_norms) {
        L.post_attn = make_norm(at(R::PostAttnNorm), -1);
        L.post_ffn = make_norm(at(R::PostFfnNorm), -1);
    }
    return L;
}

void Transformer::build_layers() {
    // Gemma's (1 + w) weights are built in one shared scratch before each norm call.
    if (cfg_.family().norm_offset() != 0.0f) {
        const int64_t widest = std::max<int64_t>(cfg_.hidden_size, cfg_.D());
        norm_w_ = DeviceBuffer::zeroed(be_, size_t(widest) * sizeof(float));
    }
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l) {
        DecoderLayer L = build_layer(l);
        for (int k = 0; k < L.qkv.size(); ++k)
            lora_sites_[size_t(kSiteQkv + k)] = L.qkv.part(k).has_adapter();
        lora_sites_[kSiteO] = L.o.has_adapter();
        for (int k = 0; k < L.fc.size(); ++k)
            lora_sites_[size_t(kSiteFc + k)] = L.fc.part(k).has_adapter();
        lora_sites_[kSiteProj] = L.proj.has_adapter();
        layers_.push_back(std::move(L));
    }
    kv_trainable_ = kv_group_ && !layers_.empty() && !layers_[0].qkv.part(0).params().d_w.empty();
    if (!mp_.last_stage()) return;
    final_norm_ =
        make_norm(params_.find(ParamRole::FinalNorm), params_.find(ParamRole::FinalNormBias));
    // The LM head: its own matrix for untied Llama, else the embedding table (on a last stage
    // other than stage 0, its tied copy). Under tp it is vocab-parallel: this rank's real output
    // columns, no bias, no communication inside (the loss combines the blocks).
    const int h = head_param();
    Mat d_head = params_.grad(h);
    LinearParams hp;
    hp.w = params_.weight(h).row_slice(0, vocab_valid_);
    if (!d_head.empty()) hp.d_w = d_head.row_slice(0, vocab_valid_);
    head_ = Linear(hp);
}

// Groups follow the table's execution order: [embeddings] [layer 0] ... [final norm, head], so
// reporting them last-to-first walks offsets downwards.
// The parameter-index ranges of this stage's groups, in execution order: the embeddings (first
// stage), each layer, the final norm and head (last stage).
std::vector<std::pair<int, int>> Transformer::group_params() const {
    const int n = params_.size();
    auto layer_start = [&](int l) { return params_.find(ParamRole::AttnNorm, l); };
    const int after_layers = mp_.last_stage() ? params_.find(ParamRole::FinalNorm) : n;
    std::vector<std::pair<int, int>> r;
    if (mp_.first_stage()) r.emplace_back(0, layer_start(mp_.layer_begin));
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        r.emplace_back(layer_start(l), l + 1 < mp_.layer_end ? layer_start(l + 1) : after_layers);
    if (mp_.last_stage()) r.emplace_back(after_layers, n);
    return r;
}

// The flat range of the trainable parameters among [a, b) (a frozen base has none but its
// adapters), which lie contiguously in the flat buffers; an empty range at the next offset when
// there are none.
std::pair<int64_t, int64_t> Transformer::flat_range(int a, int b) const {
    int64_t offset = -1, end = -1;
    for (int i = a; i < b; ++i) {
        if (!params_.trainable(i)) continue;
        if (end < 0) offset = params_.offset(i);
        ETE_ASSERT(end < 0 || end == params_.offset(i));
        end = params_.offset(i) + params_.numel(i);
    }
    if (end >= 0) return {offset, end - offset};
    for (int i = b; i < params_.size(); ++i)
        if (params_.trainable(i)) return {params_.offset(i), 0};
    return {params_.numel(), 0};
}

void Transformer::build_grad_groups() {
    const std::vector<ParamSpec>& specs = params_.specs();
    auto group = [&](int a, int b, int id) {
        GradGroup g;
        std::tie(g.offset, g.count) = flat_range(a, b);
        g.id = id;
        for (int i = a; i < b; ++i) {
            const ParamSpec& s = specs[size_t(i)];
            if (!s.trainable || !shard_has_padding(s, mp_.tp_size)) continue;
            Vec grad = params_.grad(i).flat();
            for (const ShardRun& r : shard_runs(s, mp_.tp_rank, mp_.tp_size))
                if (r.global < 0) g.padding.push_back(grad.slice(r.local, r.len));
        }
        return g;
    };
    const std::vector<std::pair<int, int>> r = group_params();
    int id = 0;
    if (mp_.first_stage()) embed_group_ = group(r[0].first, r[0].second, id++);
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l, ++id)
        layer_groups_.push_back(group(r[size_t(id)].first, r[size_t(id)].second, id));
    if (mp_.last_stage()) head_group_ = group(r.back().first, r.back().second, id);
}

// Padding rows get exactly zero gradients (they do by construction: zero weights, masked
// logits; masking keeps it so whatever rounding does), then the hook hears of the range (ZeRO-2
// and 3: the group's window gradient is reduced into the replicas' shards instead).
void Transformer::finish_group(const GradGroup& g) {
    for (const Vec& pad : g.padding) be_.fill(as_mat(pad), 0.0f);
    if (zero_reduce_) return zero3_reduce(g.id);
    if (grad_ready_ && g.count > 0) grad_ready_(g.offset, g.count);
}

}  // namespace ete
