// ete/model/transformer.cpp — construction, activation memory and the decoder layers' forward
// and backward (tensor-parallel when tp_size > 1). The pieces those are built from live in
// transformer_sublayers.cpp, the embedding and head in transformer_head.cpp, the stage and
// whole-model calls in transformer_stage.cpp, train.recompute's parser in recompute_plan.cpp.
#include "ete/model/transformer.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "ete/core/rng.h"
#include "ete/model/shard.h"
#include "ete/nn/rope.h"
#include "ete/nn/tp_regions.h"
#include "ete/parallel/device_comm.h"

namespace ete {

namespace {

constexpr ShardRule kPaddedRows{0, 1, true};  // the MLP width and vocabulary split (param_spec)

}  // namespace

Transformer::Transformer(const ModelConfig& config, Backend& backend, const ModelParallel& mp,
                         DType compute, const LoraSpec& lora, const QatSpec& qat, bool gradients)
    : cfg_(config),
      be_(backend),
      mp_((config.validate(), mp.resolved(config))),
      lora_(lora),
      act_(compute),
      params_(param_specs(config, mp_, lora, qat), backend, mp_.tp_rank, mp_.tp_size, compute,
              gradients) {
    ETE_CHECK(mp_.tp_size == 1 || mp_.tp,
              "tensor parallelism over parallel.tp = {} ranks needs the tp communicator",
              mp_.tp_size);
    const int P = mp_.tp_size;
    tp_host_ = P > 1 ? mp_.tp : nullptr;
    if (tp_host_) tp_ = device_communicator(*tp_host_, be_);
    H_ = cfg_.num_heads / P;
    KV_ = std::max(cfg_.num_kv_heads / P, 1);
    if (P > cfg_.num_kv_heads) {
        // Ranks [k·R, (k+1)·R) hold kv head k (R = P / KV); split is collective over tp.
        const int R = P / cfg_.num_kv_heads, head = mp_.tp_rank / R;
        const std::vector<int>& wr = tp_host_->world_ranks();
        std::vector<int> members(wr.begin() + head * R, wr.begin() + (head + 1) * R);
        kv_group_ = device_communicator(
            tp_host_->split(head, mp_.tp_rank, fmt::format("tp_kv[{}]", fmt::join(members, ","))),
            be_);
        ETE_ASSERT(kv_group_ && kv_group_->size() == R && kv_group_->rank() == mp_.tp_rank % R);
    }
    F_ = int(shard_extent(kPaddedRows, cfg_.intermediate_size, P));
    V_ = int(shard_extent(kPaddedRows, cfg_.vocab_size, P));
    vocab_begin_ = mp_.tp_rank * V_;
    vocab_valid_ = std::clamp(cfg_.vocab_size - vocab_begin_, 0, V_);
    build_layers();
    build_grad_groups();
}

Transformer::~Transformer() = default;

// The layers of this stage as views into the store (its buffers never move).
void Transformer::build_layers() {
    const bool split = !cfg_.family().fused_tensors();  // a tensor per q, k, v, gate, up
    const int64_t C = cfg_.hidden_size, D = cfg_.D(), HD = int64_t(H_) * D;
    const int64_t KVD = int64_t(KV_) * D, FC = cfg_.family().gated_mlp() ? 2 * int64_t(F_) : F_;
    const bool layernorm = cfg_.family().norm == NormKind::LayerNorm;
    ParamStore& ps = params_;
    auto vec = [&](int i) { return i < 0 ? CVec{} : ps.value(i).flat(); };
    auto dvec = [&](int i) { return i < 0 ? Vec{} : ps.grad(i).flat(); };
    const float scale = lora_.enabled ? lora_scale(lora_.alpha, lora_.r, lora_.rslora) : 1.0f;
    // A Linear whose weight starts at parameter w and spans `out` rows (a trainable fused group
    // spans the adjacent members in the flat buffers), with the bias starting at parameter b (or
    // none), and the adapter of w's role when it has one.
    auto linear = [&](int w, int b, int64_t out, int64_t in, TpMode mode) {
        LinearParams p;
        if (ps.is_nf4(w)) {
            p.nf4 = &ps.nf4(w);
        } else {
            p.w = ps.weight_span(w, out, in);
            p.d_w = ps.grad_span(w, out, in);
        }
        if (b >= 0) {
            p.b = ps.trainable(b) ? CMat(ps.master_span(b, 1, out)).flat() : vec(b);
            p.d_b = ps.trainable(b) ? ps.grad_span(b, 1, out).flat() : Vec{};
        }
        Linear lin(p, mode, tp_.get());
        const ParamSpec& ws = ps.specs()[size_t(w)];
        const int ia = ps.find_lora(ws.role, ws.layer, false);
        if (ia >= 0) {
            const int ib = ps.find_lora(ws.role, ws.layer, true);
            lin.set_adapter(
                {ps.weight(ia), ps.weight(ib), ps.grad(ia), ps.grad(ib), scale, lora_.r});
        }
        return lin;
    };
    // q|k|v or gate|up: one Linear over a trainable base; a frozen base (each member its own
    // buffer) runs member by member. members: (weight role, bias role, rows).
    struct Member {
        ParamRole w, b;
        int64_t rows;
    };
    auto fused = [&](int l, std::vector<Member> m) {
        auto at = [&](ParamRole r) { return ps.find(r, l); };
        const int w0 = at(m[0].w);
        if (ps.trainable(w0)) {
            int64_t rows = 0;
            for (const Member& x : m) rows += x.rows;
            return FusedLinear({linear(w0, at(m[0].b), rows, C, TpMode::Column)});
        }
        std::vector<Linear> parts;
        for (const Member& x : m)
            parts.push_back(linear(at(x.w), at(x.b), x.rows, C, TpMode::Column));
        return FusedLinear(std::move(parts));
    };
    const float offset = cfg_.family().norm_offset();
    const int64_t widest_norm = std::max(C, D);
    if (offset != 0.0f) norm_w_ = DeviceBuffer::zeroed(be_, size_t(widest_norm) * sizeof(float));
    const Vec w_scratch = offset != 0.0f ? Vec{norm_w_.data(), DType::F32, widest_norm} : Vec{};
    auto norm = [&](int w, int b) {
        return Norm({vec(w), dvec(w), vec(b), dvec(b)}, layernorm, float(cfg_.norm_eps), offset,
                    w_scratch);
    };
    using R = ParamRole;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l) {
        auto at = [&](R r) { return ps.find(r, l); };
        DecoderLayer L;
        L.ln1 = norm(at(R::AttnNorm), at(R::AttnNormBias));
        L.ln2 = norm(at(R::MlpNorm), at(R::MlpNormBias));
        L.qkv = split
                    ? fused(l, {{R::Q, R::QBias, HD}, {R::K, R::KBias, KVD}, {R::V, R::VBias, KVD}})
                    : fused(l, {{R::Qkv, R::QkvBias, HD + 2 * KVD}});
        L.o = linear(at(R::AttnOut), at(R::AttnOutBias), C, HD, TpMode::Row);
        L.fc = split ? fused(l, {{R::Gate, R::GateBias, F_}, {R::Up, R::UpBias, F_}})
                     : fused(l, {{R::Fc, R::FcBias, FC}});
        L.proj = linear(at(R::Down), at(R::DownBias), C, F_, TpMode::Row);
        if (cfg_.family().qk_norm)
            L.qk = HeadNorm({vec(at(R::QNorm)), dvec(at(R::QNorm)), {}, {}},
                            {vec(at(R::KNorm)), dvec(at(R::KNorm)), {}, {}}, float(cfg_.norm_eps),
                            H_, KV_, int(D), offset, w_scratch);
        if (cfg_.family().sandwich_norms) {
            L.post_attn = norm(at(R::PostAttnNorm), -1);
            L.post_ffn = norm(at(R::PostFfnNorm), -1);
        }
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
    final_norm_ = norm(ps.find(R::FinalNorm), ps.find(R::FinalNormBias));
    // The LM head: its own matrix for untied Llama, else the embedding table (on a last stage
    // other than stage 0, its tied copy). Under tp it is vocab-parallel: this rank's real output
    // columns, no bias, no communication inside (the loss combines the blocks).
    const int h = head_param();
    Mat d_head = ps.grad(h);
    LinearParams hp;
    hp.w = ps.weight(h).row_slice(0, vocab_valid_);
    if (!d_head.empty()) hp.d_w = d_head.row_slice(0, vocab_valid_);
    head_ = Linear(hp);
}

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

// Groups follow the table's execution order: [embeddings] [layer 0] ... [final norm, head], so
// reporting them last-to-first walks offsets downwards.
void Transformer::build_grad_groups() {
    const std::vector<ParamSpec>& specs = params_.specs();
    const int n = params_.size();
    // The trainable parameters among [a, b) (a frozen base has none but its adapters), which
    // lie contiguously in the flat buffers.
    auto group = [&](int a, int b) {
        GradGroup g;
        int64_t end = -1;
        for (int i = a; i < b; ++i) {
            if (!params_.trainable(i)) continue;
            if (end < 0) g.offset = params_.offset(i);
            ETE_ASSERT(end < 0 || end == params_.offset(i));
            end = params_.offset(i) + params_.numel(i);
        }
        g.count = end < 0 ? 0 : end - g.offset;
        for (int i = a; i < b; ++i) {
            const ParamSpec& s = specs[size_t(i)];
            if (!s.trainable || !shard_has_padding(s, mp_.tp_size)) continue;
            Vec grad = params_.grad(i).flat();
            for (const ShardRun& r : shard_runs(s, mp_.tp_rank, mp_.tp_size))
                if (r.global < 0) g.padding.push_back(grad.slice(r.local, r.len));
        }
        return g;
    };
    auto layer_start = [&](int l) { return params_.find(ParamRole::AttnNorm, l); };
    const int after_layers = mp_.last_stage() ? params_.find(ParamRole::FinalNorm) : n;
    if (mp_.first_stage()) embed_group_ = group(0, layer_start(mp_.layer_begin));
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        layer_groups_.push_back(
            group(layer_start(l), l + 1 < mp_.layer_end ? layer_start(l + 1) : after_layers));
    if (mp_.last_stage()) head_group_ = group(after_layers, n);
}

// Padding rows get exactly zero gradients (they do by construction: zero weights, masked
// logits; masking keeps it so whatever rounding does), then the hook hears of the range.
void Transformer::finish_group(const GradGroup& g) {
    for (const Vec& pad : g.padding) be_.fill(as_mat(pad), 0.0f);
    if (grad_ready_ && g.count > 0) grad_ready_(g.offset, g.count);
}

void Transformer::setup(int B, int T, Recompute recompute) {
    setup(B, T, std::vector<bool>(size_t(cfg_.num_layers), recompute == Recompute::Full));
}

void Transformer::setup(int B, int T, const std::vector<bool>& plan, int slots) {
    ETE_ASSERT(plan.size() == size_t(cfg_.num_layers));
    ETE_CHECK(B > 0 && T > 0, "model setup: batch {} and sequence {} must be > 0", B, T);
    ETE_CHECK(slots >= 1, "model setup: {} pipeline slots, expected >= 1", slots);
    ETE_CHECK(T <= cfg_.max_position_embeddings,
              "sequence length {} exceeds model.max_position_embeddings = {}", T,
              cfg_.max_position_embeddings);
    forward_only_ = params_.grads_released();
    const std::vector<bool> all(plan.size(), true);
    const size_t bytes = plan_activation_bytes(B, T, forward_only_ ? all : plan, slots);
    block_ = DeviceBuffer::zeroed(be_, bytes);
    arena_.reset(block_.data(), block_.bytes());
    allocate(arena_);
    const int R = cfg_.rotary_dim();
    std::vector<float> cos(size_t(T) * R / 2), sin(cos.size());
    rope_tables(cos.data(), sin.data(), T, R, cfg_.rope_theta, cfg_.rope_scaling);
    be_.upload(rope_cos_.data, cos.data(), cos.size() * sizeof(float));
    be_.upload(rope_sin_.data, sin.data(), sin.size() * sizeof(float));
    if (rope_local_cos_.empty()) return;
    rope_tables(cos.data(), sin.data(), T, R, cfg_.rope_local_theta, RopeScaling{});
    be_.upload(rope_local_cos_.data, cos.data(), cos.size() * sizeof(float));
    be_.upload(rope_local_sin_.data, sin.data(), sin.size() * sizeof(float));
}

size_t Transformer::plan_activation_bytes(int B, int T, const std::vector<bool>& plan, int slots) {
    B_ = B;
    T_ = T;
    recompute_ = plan;
    // Logits are produced in row chunks of at most ~64 MB so a large vocabulary never needs a
    // full (N, V) buffer.
    const int64_t N = int64_t(B) * T;
    head_rows_ = int(std::clamp<int64_t>((int64_t(16) << 20) / V_, 1, N));
    slots_.assign(size_t(slots), Slot{});
    Arena counter;
    allocate(counter);
    return counter.used();
}

void Transformer::allocate(Arena& a) {
    const int64_t N = int64_t(B_) * T_, C = cfg_.hidden_size, F = F_, D = cfg_.D();
    const int64_t HD = int64_t(H_) * D, S = int64_t(H_ + 2 * KV_) * D;
    const int64_t FC = cfg_.family().gated_mlp() ? 2 * F : F;
    const bool sandwich = cfg_.family().sandwich_norms;
    const bool ln = cfg_.family().norm == NormKind::LayerNorm, first = mp_.first_stage(),
               last = mp_.last_stage();
    const DType A = act_, F32 = DType::F32;
    const int64_t R = lora_.allocated_rank();
    const bool bwd = !forward_only_, qk_norm = cfg_.family().qk_norm;
    auto stat = [&](bool need) { return need ? a.alloc_vec(F32, N) : Vec{}; };
    auto layer_acts = [&]() {
        LayerActs s;
        s.ln1 = a.alloc_mat(A, N, C);
        s.ln1_mean = stat(ln);
        s.ln1_rstd = stat(true);
        s.qkv = a.alloc_mat(A, N, S);
        if (qk_norm) {
            s.qk_norm.q_in = a.alloc_mat(F32, N * H_, D);
            s.qk_norm.k_in = a.alloc_mat(F32, N * KV_, D);
            s.qk_norm.q_rstd = a.alloc_vec(F32, N * H_);
            s.qk_norm.k_rstd = a.alloc_vec(F32, N * KV_);
        }
        s.att = a.alloc_mat(A, N, HD);
        s.lse = a.alloc_vec(F32, int64_t(B_) * H_ * T_);
        s.resid_mid = a.alloc_mat(F32, N, C);
        s.ln2 = a.alloc_mat(A, N, C);
        s.ln2_mean = stat(ln);
        s.ln2_rstd = stat(true);
        s.fc = a.alloc_mat(A, N, FC);
        s.act = a.alloc_mat(A, N, F);
        if (sandwich) {
            s.attn_o = a.alloc_mat(F32, N, C);
            s.ffn_o = a.alloc_mat(F32, N, C);
            s.attn_rstd = a.alloc_vec(F32, N);
            s.ffn_rstd = a.alloc_vec(F32, N);
        }
        for (int k = 0; k < kLoraSites; ++k)
            if (lora_sites_[size_t(k)]) s.lora_u[size_t(k)] = a.alloc_mat(A, N, R);
        // QAT masks of the sites some layer of this stage uses (the counting pass hands out
        // empty views, so the decision is never read back from them).
        const int64_t site_cols[kQatRecomputedSites] = {C, HD, C, F};
        for (int k = 0; k < kQatRecomputedSites; ++k) {
            bool on = false;
            for (int l = mp_.layer_begin; l < mp_.layer_end; ++l) on = on || qat_site(k, l);
            if (!on) continue;
            s.qat_mask[size_t(k)] = a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, site_cols[k]));
            if (k == kQatAtt) s.att_q = a.alloc_mat(A, N, HD);
        }
        return s;
    };
    act_index_.clear();
    int kept = 0;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        act_index_.push_back(recompute_[size_t(l)] ? -1 : kept++);
    const bool any_recompute = kept < int(act_index_.size());
    for (Slot& s : slots_) {
        s.resid.assign(act_index_.size() + 1, Mat{});
        for (Mat& r : s.resid) r = a.alloc_mat(F32, N, C);
        s.acts.clear();
        for (int k = 0; k < kept; ++k) s.acts.push_back(layer_acts());
        if (last) {
            s.lnf = a.alloc_mat(A, N, C);
            s.lnf_mean = stat(true);
            s.lnf_rstd = stat(true);
            if (qat_site(kQatFinalNorm, cfg_.num_layers))
                s.lnf_mask = a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, C));
            // One slot runs its head backward right after its forward: the scratch d_ln_ holds it.
            s.d_lnf = slots_.size() > 1 && bwd ? a.alloc_mat(F32, N, C) : Mat{};
        }
        s.d_out = last || !bwd ? Mat{} : a.alloc_mat(F32, N, C);
        s.d_in = first || !bwd ? Mat{} : a.alloc_mat(F32, N, C);
        s.qat_kept.assign(act_index_.size(), {});
        for (int i = 0; i < int(act_index_.size()); ++i)
            for (int k = kQatRecomputedSites; k < kQatSites; ++k)
                if (qat_site(k, mp_.layer_begin + i))
                    s.qat_kept[size_t(i)][size_t(k)] =
                        a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, C));
        s.ids = first ? a.alloc_vec(DType::I32, N) : Vec{};
        s.doc = a.alloc_vec(DType::I32, N);
    }
    scratch_acts_ = any_recompute ? layer_acts() : LayerActs{};
    logits_ = last ? a.alloc_mat(F32, head_rows_, V_) : Mat{};
    d_logits_ = !bwd ? Mat{} : last && A != F32 ? a.alloc_mat(A, head_rows_, V_) : logits_;
    d_cap_ = bwd && last && cfg_.final_softcap > 0 ? a.alloc_mat(F32, head_rows_, V_) : Mat{};
    losses_ = last ? a.alloc_vec(F32, N) : Vec{};
    targets_ = last ? a.alloc_vec(DType::I32, N) : Vec{};
    const int64_t R2 = cfg_.rotary_dim() / 2;
    rope_cos_ = a.alloc_mat(F32, T_, R2);
    rope_sin_ = a.alloc_mat(F32, T_, R2);
    bool local_rope = false;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        local_rope = local_rope || cfg_.local_rope(l);
    rope_local_cos_ = local_rope ? a.alloc_mat(F32, T_, R2) : Mat{};
    rope_local_sin_ = local_rope ? a.alloc_mat(F32, T_, R2) : Mat{};
    post_tmp_ = sandwich && any_recompute ? a.alloc_mat(F32, N, C) : Mat{};
    // Backward buffers (none for a forward-only model).
    auto back = [&](DType t, int64_t cols, bool need = true) {
        return bwd && need ? a.alloc_mat(t, N, cols) : Mat{};
    };
    d_resid_ = back(F32, C, first);
    d_ln_ = back(F32, C);
    d_qkv_ = back(A, S);
    d_att_ = back(A, HD);
    d_fc_ = back(A, FC);
    d_act_ = back(A, F);
    d_y16_ = back(A, C, A != F32);
    d_post_ = back(F32, C, sandwich);
    qk_dn_ = back(F32, HD, qk_norm);
    qk_di_ = back(F32, HD, qk_norm);
    // The q/k norm weights are replicated over tp, each rank's gradient a partial over its heads.
    const int qn = qk_norm && mp_.layer_end > mp_.layer_begin
                       ? params_.find(ParamRole::QNorm, mp_.layer_begin)
                       : -1;
    qk_dw_ = bwd && tp_ && qn >= 0 && params_.trainable(qn) ? a.alloc_vec(F32, 2 * D) : Vec{};
    for (int k = 0; k < kLoraSites; ++k) {
        const bool has = lora_sites_[size_t(k)];
        lora_du_[size_t(k)] = has ? a.alloc_mat(F32, N, R) : Mat{};
        lora_duc_[size_t(k)] = has && A != F32 ? a.alloc_mat(A, N, R) : Mat{};
    }
    const bool drop = lora_.dropout > 0.0f &&
                      std::any_of(lora_sites_.begin(), lora_sites_.end(), [](bool b) { return b; });
    const int64_t widest = std::max({C, HD, F});
    lora_xd_ = drop ? a.alloc_mat(A, N, widest) : Mat{};
    lora_dxd_ = drop && bwd ? a.alloc_mat(F32, N, widest) : Mat{};
    tp_buf_ = tp_ ? a.alloc_mat(F32, N, C) : Mat{};
    bool qat_out = false;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        qat_out = qat_out || qat_site(kQatAttnOut, l) || qat_site(kQatFfnOut, l);
    qat_out_ = qat_out ? a.alloc_mat(F32, N, C) : Mat{};
    // k|v weight and bias rows, or the k and v adapters' B (2 · D · R).
    const int64_t kv_n = std::max(2 * D * C + 2 * D, 2 * D * R);
    kv_old_ = kv_group_ ? a.alloc_vec(F32, kv_n) : Vec{};
    kv_sum_ = kv_group_ ? a.alloc_vec(F32, kv_n) : Vec{};
    ce_tgt_ = tp_ && last ? a.alloc_vec(DType::I32, head_rows_) : Vec{};
    ce_lse_ = tp_ && last ? a.alloc_vec(F32, head_rows_) : Vec{};
    ce_zt_ = tp_ && last ? a.alloc_vec(F32, head_rows_) : Vec{};
    for (Slot& s : slots_)
        if (last && s.d_lnf.empty()) s.d_lnf = d_ln_;
}

namespace {

// The integer weight of lin when its input has a static scale, so that the op before it can
// write its integers (rmsnorm_quantize, swiglu_quantize); null otherwise.
const Int8Weight* static_int8_input(const Linear& lin) {
    const Int8Weight* w = lin.int8_weight();
    return w && !w->input().per_token() && !lin.has_adapter() ? w : nullptr;
}

}  // namespace

// What the linears after a norm read: the norm of x in `out` (with its QAT site), or for integer
// linears with a static input scale their integers straight from the norm (one pass,
// rmsnorm_quantize) in the int8 scratch.
CMat Transformer::norm_input(const Norm& norm, const FusedLinear& next, Mat out, Vec mean, Vec rstd,
                             CMat x, int site, int l, Vec mask) {
    const int N = int(x.rows);
    const Int8Weight* w8 = static_int8_input(next.part(0));
    if (w8 && !norm.layernorm() && !site_adapted(site, l)) {
        const Mat q = int8_scratch_->xq(N, x.cols);
        norm.forward_quantized(be_, q, x, w8->input_scale(), w8->input_zero(), w8->input().grid);
        return q;
    }
    norm.forward(be_, rows(out, N), rows(mean, N), rows(rstd, N), x);
    qat_forward(site, l, rows(out, N), mask);
    return rows(out, N);
}

// x (N, C) -> out (N, C). out empty (a recompute in backward): everything the backward reads
// is saved, but the layer output itself is neither computed nor written.
void Transformer::layer_forward(int i, const LayerActs& s, CMat x, Mat out, AttnDims d,
                                const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    const Family& f = cfg_.family();
    Mat ln1 = rows(s.ln1, N), qkv = rows(s.qkv, N), att = rows(s.att, N);
    Mat mid = rows(s.resid_mid, N), ln2 = rows(s.ln2, N), fc = rows(s.fc, N);
    Mat act = rows(s.act, N);
    const int l = mp_.layer_begin + i;
    LoraActs la[kLoraSites];
    d.window = cfg_.window_of(l);
    d.softcap = cfg_.attn_softcap;
    L.qkv.forward(
        be_, qkv,
        norm_input(L.ln1, L.qkv, ln1, s.ln1_mean, s.ln1_rstd, x, kQatLn1, l, s.qat_mask[kQatLn1]),
        lora_acts(i, s, kSiteQkv, L.qkv.size(), N, la));
    if (L.qk.enabled()) L.qk.forward(be_, qkv, s.qk_norm, att);  // att: scratch until attention
    if (f.rope) {
        const auto [cos, sin] = rope_of(l, d.T);
        be_.rope_forward(qkv, cos, sin, d);
    }
    be_.attention_forward(att, s.lse.slice(0, int64_t(d.B) * d.H * d.T), qkv, d, cfg_.attn_scale());
    if (qat_site(kQatAtt, l)) {  // o_proj reads fq(att); attention's backward reads att
        Mat att_q = rows(s.att_q, N);
        be_.copy(att_q, att);
        qat_forward(kQatAtt, l, att_q, s.qat_mask[kQatAtt]);
    }
    const LoraActs* oa = lora_acts(i, s, kSiteO, 1, N, la + kSiteO);
    if (f.sandwich_norms) {
        post_norm_forward(L.o, L.post_attn, mid, x, o_input(s, N), oa, rows(s.attn_o, N),
                          rows(s.attn_rstd, N), kQatAttnOut, l, kept[kQatAttnOut]);
    } else {
        row_parallel_forward(L.o, mid, x, o_input(s, N), oa, kQatAttnOut, l, kept[kQatAttnOut]);
    }
    qat_forward(kQatResidMid, l, mid, kept[kQatResidMid]);
    L.fc.forward(
        be_, fc,
        norm_input(L.ln2, L.fc, ln2, s.ln2_mean, s.ln2_rstd, mid, kQatLn2, l, s.qat_mask[kQatLn2]),
        lora_acts(i, s, kSiteFc, L.fc.size(), N, la + kSiteFc));
    // The integer model's down projection with a static input scale reads its integers straight
    // from SwiGLU (one pass: swiglu_quantize), not from the fp32 activation.
    const Int8Weight* down8 =
        f.mlp == MlpKind::SwiGLU && !out.empty() ? static_int8_input(L.proj) : nullptr;
    CMat proj_in = act;
    if (down8) {
        const Mat q = int8_scratch_->xq(N, act.cols);
        be_.swiglu_quantize(q, fc, down8->input_scale(), down8->input_zero(), down8->input().grid);
        proj_in = q;
    } else {
        mlp_act_forward(act, fc);
    }
    qat_forward(kQatAct, l, act, s.qat_mask[kQatAct]);
    const LoraActs* pa = lora_acts(i, s, kSiteProj, 1, N, la + kSiteProj);
    if (f.sandwich_norms) {  // a recompute needs the output's post-norm statistics too
        post_norm_forward(L.proj, L.post_ffn, out, mid, proj_in, pa, rows(s.ffn_o, N),
                          rows(s.ffn_rstd, N), kQatFfnOut, l, kept[kQatFfnOut]);
        if (!out.empty()) qat_forward(kQatResidOut, l, out, kept[kQatResidOut]);
    } else if (!out.empty()) {
        row_parallel_forward(L.proj, out, mid, proj_in, pa, kQatFfnOut, l, kept[kQatFfnOut]);
        qat_forward(kQatResidOut, l, out, kept[kQatResidOut]);
    } else {  // a recompute: the kept masks of ffn_out and residual are still those of the forward
        L.proj.forward_saved(be_, act, pa);  // its adapter's u, which backward reads
    }
}

// d_resid enters as dL/d(layer output) and leaves as dL/d(resid_mid).
void Transformer::mlp_backward(int i, const LayerActs& s, Mat d_resid, AttnDims d,
                               const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    Mat d_act = rows(d_act_, N), d_fc = rows(d_fc_, N), d_ln = rows(d_ln_, N);
    CMat fc = rows(s.fc, N), act = rows(s.act, N);
    const int l = mp_.layer_begin + i;
    // The down projection's output gradient (through Gemma's post norm), as A.
    const Mat d_o =
        cfg_.family().sandwich_norms
            ? post_norm_backward(L.post_ffn, d_resid, rows(s.ffn_o, N), rows(s.ffn_rstd, N))
            : d_resid;
    CMat dy = row_parallel_grad(d_o, kQatFfnOut, l, kept[kQatFfnOut]);
    LoraActs la[kLoraSites];
    L.proj.backward(be_, d_act, dy, act, lora_acts(i, s, kSiteProj, 1, N, la + kSiteProj));
    qat_backward(kQatAct, l, d_act, s.qat_mask[kQatAct]);
    mlp_act_backward(d_fc, d_act, fc);
    const LoraActs* fa = lora_acts(i, s, kSiteFc, L.fc.size(), N, la + kSiteFc);
    L.fc.backward_weight(be_, d_fc, rows(s.ln2, N), fa);
    L.fc.backward_input(be_, d_ln, d_fc, fa);  // summed over tp: ln2 fed every rank
    qat_backward(kQatLn2, l, d_ln, s.qat_mask[kQatLn2]);
    L.ln2.backward(be_, d_resid, d_ln, rows(s.resid_mid, N), rows(s.ln2_mean, N),
                   rows(s.ln2_rstd, N));
}

// d_resid enters as dL/d(resid_mid) and leaves as dL/d(layer input x).
void Transformer::attention_backward(int i, const LayerActs& s, CMat x, Mat d_resid, AttnDims d,
                                     const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    const int l = mp_.layer_begin + i;
    Mat d_att = rows(d_att_, N), d_qkv = rows(d_qkv_, N), d_ln = rows(d_ln_, N);
    d.window = cfg_.window_of(l);
    d.softcap = cfg_.attn_softcap;
    const Mat d_o =
        cfg_.family().sandwich_norms
            ? post_norm_backward(L.post_attn, d_resid, rows(s.attn_o, N), rows(s.attn_rstd, N))
            : d_resid;
    CMat dy = row_parallel_grad(d_o, kQatAttnOut, l, kept[kQatAttnOut]);
    LoraActs la[kLoraSites];
    L.o.backward(be_, d_att, dy, o_input(s, N), lora_acts(i, s, kSiteO, 1, N, la + kSiteO));
    qat_backward(kQatAtt, l, d_att, s.qat_mask[kQatAtt]);
    be_.attention_backward(d_qkv, d_att, rows(s.att, N), s.lse.slice(0, int64_t(d.B) * d.H * d.T),
                           rows(s.qkv, N), d, cfg_.attn_scale());
    if (cfg_.family().rope) {
        const auto [cos, sin] = rope_of(l, d.T);
        be_.rope_backward(d_qkv, cos, sin, d);
    }
    if (L.qk.enabled()) head_norm_backward(i, s, d_qkv);
    const LoraActs* qa = lora_acts(i, s, kSiteQkv, L.qkv.size(), N, la);
    kv_grads_set_aside(i);
    L.qkv.backward_weight(be_, d_qkv, rows(s.ln1, N), qa);
    Request kv_sum = kv_grads_start_sum(i);      // overlaps the d(ln1) all-reduce and the norm
    L.qkv.backward_input(be_, d_ln, d_qkv, qa);  // summed over tp: ln1 fed every rank's heads
    qat_backward(kQatLn1, l, d_ln, s.qat_mask[kQatLn1]);
    L.ln1.backward(be_, d_resid, d_ln, x, rows(s.ln1_mean, N), rows(s.ln1_rstd, N));
    kv_grads_finish(i, kv_sum);
}

void Transformer::layer_backward(int i, Slot& s, Mat d_resid, AttnDims d) {
    const LayerActs& a = acts(s, i);
    CMat x = rows(s.resid[size_t(i)], d.B * d.T);
    const std::array<Vec, kQatSites>& kept = s.qat_kept[size_t(i)];
    if (recompute_[size_t(mp_.layer_begin + i)]) {
        qat_train_ = true;  // a training forward again: observes (no change) and keeps masks
        layer_forward(i, a, x, Mat{}, d, kept);
    }
    const int l = mp_.layer_begin + i;
    qat_backward(kQatResidOut, l, d_resid, kept[kQatResidOut]);  // d(output) -> d(pre-quant)
    mlp_backward(i, a, d_resid, d, kept);
    qat_backward(kQatResidMid, l, d_resid, kept[kQatResidMid]);
    attention_backward(i, a, x, d_resid, d, kept);
}

void Transformer::final_norm_forward(Slot& s, int N) {
    final_norm_.forward(be_, rows(s.lnf, N), rows(s.lnf_mean, N), rows(s.lnf_rstd, N),
                        rows(s.resid.back(), N));
    qat_forward(kQatFinalNorm, cfg_.num_layers, rows(s.lnf, N), s.lnf_mask);
}

// d_resid (N, C) = dL/d(stage output) from d_lnf.
void Transformer::final_norm_backward(Slot& s, Mat d_resid, int N) {
    be_.fill(d_resid, 0.0f);
    qat_backward(kQatFinalNorm, cfg_.num_layers, rows(s.d_lnf, N), s.lnf_mask);
    final_norm_.backward(be_, d_resid, rows(s.d_lnf, N), rows(s.resid.back(), N),
                         rows(s.lnf_mean, N), rows(s.lnf_rstd, N));
}

}  // namespace ete
