// ete/model/transformer_memory.cpp — activation planning: what setup(B, T, plan, slots)
// allocates in the one backend block an Arena carves (saved activations per slot and kept layer,
// the shared backward scratch, LoRA's and QAT's buffers, the head's chunks, the RoPE tables).
#include <algorithm>

#include "ete/model/transformer.h"
#include "ete/nn/rope.h"

namespace ete {

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
    upload_rope_tables(T);
}

// The RoPE tables for T positions: the model's, and Gemma 3's local ones.
void Transformer::upload_rope_tables(int T) {
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
    // Logits are produced in row chunks, so no vocabulary needs a full (N, V) buffer: ~4M
    // elements (16 MiB in fp32, plus their bf16 gradient in 16-bit runs), but no fewer rows
    // than the hidden size C — each chunk moves the head weight again (read for the logits and
    // for d_x, read and written for its gradient), which then stays at most as large as the
    // chunk's logits — and never more than 16M elements (64 MiB). The bench Llama (V 8192, C
    // 512): 512 rows; GPT-2 (V 50257, C 768): 333; Llama 3 (V 128256, C 8192): 130.
    const int64_t N = int64_t(B) * T, C = cfg_.hidden_size;
    const int64_t want = std::max<int64_t>((int64_t(4) << 20) / V_, C);
    head_rows_ = int(std::clamp<int64_t>(std::min<int64_t>(want, (int64_t(16) << 20) / V_), 1, N));
    slots_.assign(size_t(slots), Slot{});
    Arena counter;
    allocate(counter);
    return counter.used();
}

// One layer's saved activations for the set-up N rows, as this stage's layers need them.
LayerActs Transformer::layer_acts(Arena& a) const {
    const int64_t N = int64_t(B_) * T_, C = cfg_.hidden_size, F = F_, D = cfg_.D();
    const int64_t HD = int64_t(H_) * D, S = int64_t(H_ + 2 * KV_) * D;
    const int64_t FC = cfg_.family().gated_mlp() ? 2 * F : F;
    const bool ln = cfg_.family().norm == NormKind::LayerNorm;
    const DType A = act_, F32 = DType::F32;
    LayerActs s;
    s.ln1 = a.alloc_mat(A, N, C);
    s.ln1_mean = ln ? a.alloc_vec(F32, N) : Vec{};
    s.ln1_rstd = a.alloc_vec(F32, N);
    s.qkv = a.alloc_mat(A, N, S);
    if (cfg_.family().qk_norm) {
        s.qk_norm.q_in = a.alloc_mat(F32, N * H_, D);
        s.qk_norm.k_in = a.alloc_mat(F32, N * KV_, D);
        s.qk_norm.q_rstd = a.alloc_vec(F32, N * H_);
        s.qk_norm.k_rstd = a.alloc_vec(F32, N * KV_);
    }
    s.att = a.alloc_mat(A, N, HD);
    s.lse = a.alloc_vec(F32, int64_t(B_) * H_ * T_);
    s.resid_mid = a.alloc_mat(F32, N, C);
    s.ln2 = a.alloc_mat(A, N, C);
    s.ln2_mean = ln ? a.alloc_vec(F32, N) : Vec{};
    s.ln2_rstd = a.alloc_vec(F32, N);
    s.fc = a.alloc_mat(A, N, FC);
    s.act = a.alloc_mat(A, N, F);
    if (cfg_.family().sandwich_norms) {
        s.attn_o = a.alloc_mat(F32, N, C);
        s.ffn_o = a.alloc_mat(F32, N, C);
        s.attn_rstd = a.alloc_vec(F32, N);
        s.ffn_rstd = a.alloc_vec(F32, N);
    }
    for (int k = 0; k < kLoraSites; ++k)
        if (lora_sites_[size_t(k)]) s.lora_u[size_t(k)] = a.alloc_mat(A, N, lora_.allocated_rank());
    // QAT masks of the sites some layer of this stage uses (the counting pass hands out empty
    // views, so the decision is never read back from them).
    const int64_t site_cols[kQatRecomputedSites] = {C, HD, C, F};
    for (int k = 0; k < kQatRecomputedSites; ++k) {
        bool on = false;
        for (int l = mp_.layer_begin; l < mp_.layer_end; ++l) on = on || qat_site(k, l);
        if (!on) continue;
        s.qat_mask[size_t(k)] = a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, site_cols[k]));
        if (k == kQatAtt) s.att_q = a.alloc_mat(A, N, HD);
    }
    return s;
}

// Each slot's own buffers: the residual stream into every local layer, the kept layers'
// activations, the final norm's, token ids and doc starts. The stage boundaries' gradients are
// shared, since a backward reads and writes them only while it runs: every slot's d_in (the
// backward's d_resid, then what the pp executor sends back) is one buffer — the executor waits
// for its send before the next backward rewrites it (parallel/pp_executor.h) — and d_out, where
// a slot's output gradient arrives, is one of two, so that consecutive micro-batches (slots s and
// s + 1 mod slots) never share one (a receive is posted one compute ahead): three for an odd
// number of slots, whose last and first are consecutive too. With 1F1B's pp − stage + 1 slots of
// a few layers each, these were two of a slot's ~5 (N, C) fp32 buffers (docs/planner.md).
void Transformer::allocate_slots(Arena& a, int kept) {
    const int64_t N = int64_t(B_) * T_, C = cfg_.hidden_size;
    const bool first = mp_.first_stage(), last = mp_.last_stage(), bwd = !forward_only_;
    const DType F32 = DType::F32;
    const size_t n = slots_.size();
    const Mat d_in = first || !bwd ? Mat{} : a.alloc_mat(F32, N, C);
    std::vector<Mat> d_out(n == 1 ? 1 : n % 2 ? 3 : 2);
    for (Mat& m : d_out) m = last || !bwd ? Mat{} : a.alloc_mat(F32, N, C);
    for (size_t i = 0; i < n; ++i) {
        Slot& s = slots_[i];
        s.resid.assign(act_index_.size() + 1, Mat{});
        for (Mat& r : s.resid) r = a.alloc_mat(F32, N, C);
        s.acts.clear();
        for (int k = 0; k < kept; ++k) s.acts.push_back(layer_acts(a));
        if (last) {
            s.lnf = a.alloc_mat(act_, N, C);
            s.lnf_mean = a.alloc_vec(F32, N);
            s.lnf_rstd = a.alloc_vec(F32, N);
            if (qat_site(kQatFinalNorm, cfg_.num_layers))
                s.lnf_mask = a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, C));
            // One slot runs its head backward right after its forward: the scratch d_ln_ holds it.
            s.d_lnf = slots_.size() > 1 && bwd ? a.alloc_mat(F32, N, C) : Mat{};
        }
        s.d_out = d_out[n > 1 && n % 2 && i + 1 == n ? 2 : i % 2];
        s.d_in = d_in;
        s.qat_kept.assign(act_index_.size(), {});
        for (int i = 0; i < int(act_index_.size()); ++i)
            for (int k = kQatRecomputedSites; k < kQatSites; ++k)
                if (qat_site(k, mp_.layer_begin + i))
                    s.qat_kept[size_t(i)][size_t(k)] =
                        a.alloc_vec(DType::U8, QatRuntime::mask_bytes(N, C));
        s.ids = first ? a.alloc_vec(DType::I32, N) : Vec{};
        s.doc = a.alloc_vec(DType::I32, N);
    }
}

// The backward scratch the slots share (none for a forward-only model), LoRA's.
void Transformer::allocate_backward(Arena& a) {
    const int64_t N = int64_t(B_) * T_, C = cfg_.hidden_size, F = F_, D = cfg_.D();
    const int64_t HD = int64_t(H_) * D, S = int64_t(H_ + 2 * KV_) * D;
    const int64_t FC = cfg_.family().gated_mlp() ? 2 * F : F;
    const bool bwd = !forward_only_, qk_norm = cfg_.family().qk_norm;
    const DType A = act_, F32 = DType::F32;
    auto back = [&](DType t, int64_t cols, bool need = true) {
        return bwd && need ? a.alloc_mat(t, N, cols) : Mat{};
    };
    d_resid_ = back(F32, C, mp_.first_stage());
    d_ln_ = back(F32, C);
    d_qkv_ = back(A, S);
    d_att_ = back(A, HD);
    d_fc_ = back(A, FC);
    d_act_ = back(A, F);
    d_y16_ = back(A, C, A != F32);
    d_post_ = back(F32, C, cfg_.family().sandwich_norms);
    qk_dn_ = back(F32, HD, qk_norm);
    qk_di_ = back(F32, HD, qk_norm);
    // The q/k norm weights are replicated over tp, each rank's gradient a partial over its heads.
    const int qn = qk_norm && mp_.layer_end > mp_.layer_begin
                       ? params_.find(ParamRole::QNorm, mp_.layer_begin)
                       : -1;
    qk_dw_ = bwd && tp_ && qn >= 0 && params_.trainable(qn) ? a.alloc_vec(F32, 2 * D) : Vec{};
    const int64_t R = lora_.allocated_rank();
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
    // k|v weight and bias rows, or the k and v adapters' B (2 · D · R).
    const int64_t kv_n = std::max(2 * D * C + 2 * D, 2 * D * R);
    kv_old_ = kv_group_ ? a.alloc_vec(F32, kv_n) : Vec{};
    kv_sum_ = kv_group_ ? a.alloc_vec(F32, kv_n) : Vec{};
}

void Transformer::allocate(Arena& a) {
    const int64_t N = int64_t(B_) * T_, C = cfg_.hidden_size;
    const bool last = mp_.last_stage(), bwd = !forward_only_;
    const DType A = act_, F32 = DType::F32;
    act_index_.clear();
    int kept = 0;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        act_index_.push_back(recompute_[size_t(l)] ? -1 : kept++);
    const bool any_recompute = kept < int(act_index_.size());
    allocate_slots(a, kept);
    scratch_acts_ = any_recompute ? layer_acts(a) : LayerActs{};
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
    post_tmp_ = cfg_.family().sandwich_norms && any_recompute ? a.alloc_mat(F32, N, C) : Mat{};
    allocate_backward(a);
    tp_buf_ = tp_ ? a.alloc_mat(F32, N, C) : Mat{};
    bool qat_out = false;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        qat_out = qat_out || qat_site(kQatAttnOut, l) || qat_site(kQatFfnOut, l);
    qat_out_ = qat_out ? a.alloc_mat(F32, N, C) : Mat{};
    ce_tgt_ = tp_ && last ? a.alloc_vec(DType::I32, head_rows_) : Vec{};
    ce_lse_ = tp_ && last ? a.alloc_vec(F32, head_rows_) : Vec{};
    ce_zt_ = tp_ && last ? a.alloc_vec(F32, head_rows_) : Vec{};
    for (Slot& s : slots_)
        if (last && s.d_lnf.empty()) s.d_lnf = d_ln_;
}

}  // namespace ete
