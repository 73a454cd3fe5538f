// ete/model/transformer.cpp — construction, activation memory and the decoder layers' forward
// and backward (tensor-parallel when tp_size > 1). The embedding and head live in
// transformer_head.cpp, the stage and whole-model calls in transformer_stage.cpp.
#include "ete/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/ranges.h>

#include "ete/model/shard.h"
#include "ete/nn/linear.h"
#include "ete/nn/rope.h"
#include "ete/parallel/communicator.h"

namespace ete {

namespace {

constexpr ShardRule kPaddedRows{0, 1, true};  // the MLP width and vocabulary split (param_spec)

std::string layer_prefix(const ModelConfig& c, int layer) {
    return c.arch == Arch::Llama ? fmt::format("model.layers.{}.", layer)
                                 : fmt::format("h.{}.", layer);
}

const char* final_norm_name(const ModelConfig& c) {
    return c.arch == Arch::Llama ? "model.norm.weight" : "ln_f.weight";
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, Backend& backend, const ModelParallel& mp)
    : cfg_(config),
      be_(backend),
      mp_((config.validate(), mp.resolved(config))),
      params_(param_specs(config, mp_), mp_.tp_rank, mp_.tp_size) {
    ETE_CHECK(mp_.tp_size == 1 || mp_.tp,
              "tensor parallelism over parallel.tp = {} ranks needs the tp communicator",
              mp_.tp_size);
    const int P = mp_.tp_size;
    tp_ = P > 1 ? mp_.tp : nullptr;
    H_ = cfg_.num_heads / P;
    KV_ = std::max(cfg_.num_kv_heads / P, 1);
    if (P > cfg_.num_kv_heads) {
        // Ranks [k·R, (k+1)·R) hold kv head k (R = P / KV); split is collective over tp.
        const int R = P / cfg_.num_kv_heads, head = mp_.tp_rank / R;
        const std::vector<int>& wr = tp_->world_ranks();
        std::vector<int> members(wr.begin() + head * R, wr.begin() + (head + 1) * R);
        kv_group_ =
            tp_->split(head, mp_.tp_rank, fmt::format("tp_kv[{}]", fmt::join(members, ",")));
        ETE_ASSERT(kv_group_ && kv_group_->size() == R && kv_group_->rank() == mp_.tp_rank % R);
    }
    F_ = int(shard_extent(kPaddedRows, cfg_.intermediate_size, P));
    V_ = int(shard_extent(kPaddedRows, cfg_.vocab_size, P));
    vocab_begin_ = mp_.tp_rank * V_;
    vocab_valid_ = std::clamp(cfg_.vocab_size - vocab_begin_, 0, V_);
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l) {
        w_.push_back(weights(l, false));
        g_.push_back(weights(l, true));
    }
    build_grad_groups();
}

LayerWeights Transformer::weights(int layer, bool grads) {
    auto get = [&](const std::string& n) -> float* {
        if (!params_.has(n)) return nullptr;
        return grads ? params_.grad(n) : params_.param(n);
    };
    const std::string p = layer_prefix(cfg_, layer);
    LayerWeights w;
    if (cfg_.arch == Arch::Llama) {
        w.ln1_w = get(p + "input_layernorm.weight");
        w.qkv_w = get(p + "self_attn.q_proj.weight");  // q|k|v are adjacent: one (S, C) matrix
        w.qkv_b = get(p + "self_attn.q_proj.bias");
        w.o_w = get(p + "self_attn.o_proj.weight");
        w.o_b = get(p + "self_attn.o_proj.bias");
        w.ln2_w = get(p + "post_attention_layernorm.weight");
        w.fc_w = get(p + "mlp.gate_proj.weight");  // gate|up adjacent: one (2F, C) matrix
        w.fc_b = get(p + "mlp.gate_proj.bias");
        w.proj_w = get(p + "mlp.down_proj.weight");
        w.proj_b = get(p + "mlp.down_proj.bias");
    } else {
        w.ln1_w = get(p + "ln_1.weight");
        w.ln1_b = get(p + "ln_1.bias");
        w.qkv_w = get(p + "attn.c_attn.weight");
        w.qkv_b = get(p + "attn.c_attn.bias");
        w.o_w = get(p + "attn.c_proj.weight");
        w.o_b = get(p + "attn.c_proj.bias");
        w.ln2_w = get(p + "ln_2.weight");
        w.ln2_b = get(p + "ln_2.bias");
        w.fc_w = get(p + "mlp.c_fc.weight");
        w.fc_b = get(p + "mlp.c_fc.bias");
        w.proj_w = get(p + "mlp.c_proj.weight");
        w.proj_b = get(p + "mlp.c_proj.bias");
    }
    return w;
}

// Groups follow the table's execution order: [embeddings] [layer 0] ... [final norm, head], so
// reporting them last-to-first walks offsets downwards.
void Transformer::build_grad_groups() {
    const std::vector<ParamSpec>& specs = params_.specs();
    const int n = int(specs.size());
    auto group = [&](int a, int b) {
        GradGroup g;
        g.offset = params_.offset(a);
        g.count = (b < n ? params_.offset(b) : params_.numel()) - g.offset;
        for (int i = a; i < b; ++i)
            if (shard_has_padding(specs[size_t(i)], mp_.tp_size)) g.padded.push_back(i);
        return g;
    };
    auto layer_start = [&](int l) {
        return params_.index(layer_prefix(cfg_, l) +
                             (cfg_.arch == Arch::Llama ? "input_layernorm.weight" : "ln_1.weight"));
    };
    const int after_layers = mp_.last_stage() ? params_.index(final_norm_name(cfg_)) : n;
    if (mp_.first_stage()) embed_group_ = group(0, layer_start(mp_.layer_begin));
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        layer_groups_.push_back(
            group(layer_start(l), l + 1 < mp_.layer_end ? layer_start(l + 1) : after_layers));
    if (mp_.last_stage()) head_group_ = group(after_layers, n);
}

// Padding rows get exactly zero gradients (they do by construction: zero weights, masked
// logits; masking keeps it so whatever rounding does), then the hook hears of the range.
void Transformer::finish_group(const GradGroup& g) {
    for (int i : g.padded) {
        shard_zero_padding(params_.specs()[size_t(i)], mp_.tp_rank, mp_.tp_size, params_.grad(i));
    }
    if (grad_ready_ && g.count > 0) grad_ready_(g.offset, g.count);
}

std::vector<bool> recompute_plan(const std::string& spec, int L) {
    if (spec == "none" || spec == "full") return std::vector<bool>(size_t(L), spec == "full");
    std::vector<bool> plan(size_t(L), false);
    auto bad = [&]() {
        throw_error(
            fmt::format("train.recompute = '{}': expected none, full or layer indices "
                        "and ranges like 0-3,6 within 0..{}",
                        spec, L - 1));
    };
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t end = std::min(spec.find(',', pos), spec.size());
        std::string item = spec.substr(pos, end - pos);
        size_t dash = item.find('-');
        int lo = 0, hi = 0;
        try {
            size_t used = 0;
            lo = std::stoi(item.substr(0, dash), &used);
            if (used != (dash == std::string::npos ? item.size() : dash)) bad();
            hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1), &used);
            if (dash != std::string::npos && used != item.size() - dash - 1) bad();
        } catch (const std::logic_error&) {
            bad();
        }
        if (lo < 0 || hi >= L || lo > hi) bad();
        for (int l = lo; l <= hi; ++l) plan[size_t(l)] = true;
        pos = end + 1;
    }
    return plan;
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
    B_ = B;
    T_ = T;
    recompute_ = plan;
    // Logits are produced in row chunks of at most ~64 MB so a large vocabulary never needs a
    // full (N, V) buffer.
    int64_t N = int64_t(B) * T;
    head_rows_ = int(std::clamp<int64_t>((int64_t(16) << 20) / V_, 1, N));
    slots_.assign(size_t(slots), Slot{});
    Arena counter;
    allocate(counter);
    arena_.reset(counter.used());
    allocate(arena_);
    rope_tables(rope_cos_, rope_sin_, T, cfg_.D(), cfg_.rope_theta, cfg_.rope_scaling);
}

void Transformer::allocate(Arena& a) {
    const size_t N = size_t(B_) * T_, C = cfg_.hidden_size, F = F_, D = cfg_.D();
    const size_t HD = size_t(H_) * D, S = size_t(H_ + 2 * KV_) * D;
    const size_t FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    const bool ln = cfg_.arch == Arch::GPT2, first = mp_.first_stage(), last = mp_.last_stage();
    auto ints = [&](size_t n) { return static_cast<int32_t*>(a.alloc_bytes(n * sizeof(int32_t))); };
    auto layer_acts = [&]() {
        LayerActs s;
        s.ln1 = a.alloc_f32(N * C);
        s.ln1_mean = ln ? a.alloc_f32(N) : nullptr;
        s.ln1_rstd = a.alloc_f32(N);
        s.qkv = a.alloc_f32(N * S);
        s.att = a.alloc_f32(N * HD);
        s.lse = a.alloc_f32(size_t(B_) * H_ * T_);
        s.resid_mid = a.alloc_f32(N * C);
        s.ln2 = a.alloc_f32(N * C);
        s.ln2_mean = ln ? a.alloc_f32(N) : nullptr;
        s.ln2_rstd = a.alloc_f32(N);
        s.fc = a.alloc_f32(N * FC);
        s.act = a.alloc_f32(N * F);
        return s;
    };
    act_index_.clear();
    int kept = 0;
    for (int l = mp_.layer_begin; l < mp_.layer_end; ++l)
        act_index_.push_back(recompute_[size_t(l)] ? -1 : kept++);
    const bool any_recompute = kept < int(act_index_.size());
    for (Slot& s : slots_) {
        s.resid.assign(act_index_.size() + 1, nullptr);
        for (float*& r : s.resid) r = a.alloc_f32(N * C);
        s.acts.clear();
        for (int k = 0; k < kept; ++k) s.acts.push_back(layer_acts());
        if (last) {
            s.lnf = a.alloc_f32(N * C);
            s.lnf_mean = a.alloc_f32(N);
            s.lnf_rstd = a.alloc_f32(N);
            // One slot runs its head backward right after its forward: the scratch d_ln_ holds it.
            s.d_lnf = slots_.size() > 1 ? a.alloc_f32(N * C) : nullptr;
        }
        s.d_out = last ? nullptr : a.alloc_f32(N * C);
        s.d_in = first ? nullptr : a.alloc_f32(N * C);
        s.ids = first ? ints(N) : nullptr;
        s.doc = ints(N);
    }
    scratch_acts_ = any_recompute ? layer_acts() : LayerActs{};
    logits_ = last ? a.alloc_f32(size_t(head_rows_) * V_) : nullptr;
    losses_ = last ? a.alloc_f32(N) : nullptr;
    rope_cos_ = a.alloc_f32(size_t(T_) * D / 2 + 1);
    rope_sin_ = a.alloc_f32(size_t(T_) * D / 2 + 1);
    d_resid_ = first ? a.alloc_f32(N * C) : nullptr;
    d_ln_ = a.alloc_f32(N * C);
    d_qkv_ = a.alloc_f32(N * S);
    d_att_ = a.alloc_f32(N * HD);
    d_fc_ = a.alloc_f32(N * FC);
    d_act_ = a.alloc_f32(N * F);
    tp_buf_ = tp_ ? a.alloc_f32(N * C) : nullptr;
    kv_old_ = kv_group_ ? a.alloc_f32(2 * D * C + 2 * D) : nullptr;
    kv_sum_ = kv_group_ ? a.alloc_f32(2 * D * C + 2 * D) : nullptr;
    ids_local_ = tp_ && first ? ints(N) : nullptr;
    ce_buf_ = tp_ && last ? a.alloc_f32(5 * size_t(head_rows_)) : nullptr;
    ce_tgt_ = tp_ && last ? ints(size_t(head_rows_)) : nullptr;
    for (Slot& s : slots_)
        if (last && !s.d_lnf) s.d_lnf = d_ln_;
}

const LayerActs& Transformer::acts(const Slot& s, int i) const {
    int k = act_index_[size_t(i)];
    return k < 0 ? scratch_acts_ : s.acts[size_t(k)];
}

void Transformer::tp_sum(float* x, size_t n) {
    if (tp_) tp_->all_reduce(x, n, DType::F32, ReduceOp::Sum);
}

// y(N, C) = resid + in(N, K) · Wᵀ + b for a row-parallel linear (W (C, K) holds this rank's K
// input columns). tp = 1: copy the residual and let the GEMM add into it. tp > 1: the partial
// products are summed over the group first, so the replicated bias is added once.
void Transformer::row_parallel_forward(float* y, const float* resid, const float* in, int K,
                                       const float* W, const float* b, int N) {
    const int C = cfg_.hidden_size;
    const size_t n = size_t(N) * C;
    if (!tp_) {
        std::memcpy(y, resid, sizeof(float) * n);
        linear_forward(be_, y, C, in, K, W, b, {N, K, C}, 1.0f);
        return;
    }
    linear_forward(be_, tp_buf_, C, in, K, W, nullptr, {N, K, C});
    tp_sum(tp_buf_, n);
    std::memcpy(y, resid, sizeof(float) * n);
    be_.add_inplace(y, tp_buf_, int64_t(n));
    if (b) be_.bias_forward(y, b, N, C, C);
}

namespace {

// RMSNorm (Llama, no mean/bias) or LayerNorm (GPT-2).
void norm_forward(Backend& be, const ModelConfig& c, float* out, float* mean, float* rstd,
                  const float* x, const float* w, const float* b, int N) {
    if (c.arch == Arch::Llama) {
        be.rmsnorm_forward(out, rstd, x, w, N, c.hidden_size, float(c.norm_eps));
    } else {
        be.layernorm_forward(out, mean, rstd, x, w, b, N, c.hidden_size, float(c.norm_eps));
    }
}

void norm_backward(Backend& be, const ModelConfig& c, float* d_x, float* d_w, float* d_b,
                   const float* d_out, const float* x, const float* w, const float* mean,
                   const float* rstd, int N) {
    if (c.arch == Arch::Llama) {
        be.rmsnorm_backward(d_x, d_w, d_out, x, w, rstd, N, c.hidden_size);
    } else {
        be.layernorm_backward(d_x, d_w, d_b, d_out, x, w, mean, rstd, N, c.hidden_size);
    }
}

}  // namespace

// x (N, C) -> out (N, C). out == null (a recompute in backward): everything the backward reads
// is saved, but the layer output itself is neither computed nor written.
void Transformer::layer_forward(int i, const LayerActs& s, const float* x, float* out, AttnDims d) {
    const LayerWeights& w = w_[size_t(i)];
    int N = d.B * d.T, C = cfg_.hidden_size, F = F_, S = d.qkv_stride();
    int HD = d.H * d.D, FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    norm_forward(be_, cfg_, s.ln1, s.ln1_mean, s.ln1_rstd, x, w.ln1_w, w.ln1_b, N);
    linear_forward(be_, s.qkv, S, s.ln1, C, w.qkv_w, w.qkv_b, {N, C, S});
    if (cfg_.arch == Arch::Llama) be_.rope_forward(s.qkv, rope_cos_, rope_sin_, d);
    be_.attention_forward(s.att, s.lse, s.qkv, d, 1.0f / std::sqrt(float(d.D)));
    row_parallel_forward(s.resid_mid, x, s.att, HD, w.o_w, w.o_b, N);
    norm_forward(be_, cfg_, s.ln2, s.ln2_mean, s.ln2_rstd, s.resid_mid, w.ln2_w, w.ln2_b, N);
    linear_forward(be_, s.fc, FC, s.ln2, C, w.fc_w, w.fc_b, {N, C, FC});
    if (cfg_.arch == Arch::Llama) {
        be_.swiglu_forward(s.act, s.fc, N, F);
    } else {
        be_.gelu_forward(s.act, s.fc, int64_t(N) * F);
    }
    if (out) row_parallel_forward(out, s.resid_mid, s.act, F, w.proj_w, w.proj_b, N);
}

// d_resid enters as dL/d(layer output) and leaves as dL/d(resid_mid).
void Transformer::mlp_backward(int i, const LayerActs& s, float* d_resid, AttnDims d) {
    const LayerWeights& w = w_[size_t(i)];
    LayerWeights& g = g_[size_t(i)];
    int N = d.B * d.T, C = cfg_.hidden_size, F = F_;
    int FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    linear_backward(be_, d_act_, d_resid, C, s.act, F, w.proj_w, g.proj_w, g.proj_b, {N, F, C});
    if (cfg_.arch == Arch::Llama) {
        be_.swiglu_backward(d_fc_, d_act_, s.fc, N, F);
    } else {
        be_.gelu_backward(d_fc_, d_act_, s.fc, int64_t(N) * F);
    }
    linear_backward(be_, d_ln_, d_fc_, FC, s.ln2, C, w.fc_w, g.fc_w, g.fc_b, {N, C, FC});
    tp_sum(d_ln_, size_t(N) * C);  // ln2 fed every rank's columns: sum their gradients
    norm_backward(be_, cfg_, d_resid, g.ln2_w, g.ln2_b, d_ln_, s.resid_mid, w.ln2_w, s.ln2_mean,
                  s.ln2_rstd, N);
}

// d_resid enters as dL/d(resid_mid) and leaves as dL/d(layer input x).
void Transformer::attention_backward(int i, const LayerActs& s, const float* x, float* d_resid,
                                     AttnDims d) {
    const LayerWeights& w = w_[size_t(i)];
    LayerWeights& g = g_[size_t(i)];
    int N = d.B * d.T, C = cfg_.hidden_size, S = d.qkv_stride(), HD = d.H * d.D;
    linear_backward(be_, d_att_, d_resid, C, s.att, HD, w.o_w, g.o_w, g.o_b, {N, HD, C});
    be_.attention_backward(d_qkv_, d_att_, s.att, s.lse, s.qkv, d, 1.0f / std::sqrt(float(d.D)));
    if (cfg_.arch == Arch::Llama) be_.rope_backward(d_qkv_, rope_cos_, rope_sin_, d);
    kv_grads_set_aside(i);
    linear_backward(be_, d_ln_, d_qkv_, S, s.ln1, C, w.qkv_w, g.qkv_w, g.qkv_b, {N, C, S});
    Request kv_sum = kv_grads_start_sum(i);  // overlaps the d(ln1) all-reduce and the norm
    tp_sum(d_ln_, size_t(N) * C);            // ln1 fed every rank's heads: sum their gradients
    norm_backward(be_, cfg_, d_resid, g.ln1_w, g.ln1_b, d_ln_, x, w.ln1_w, s.ln1_mean, s.ln1_rstd,
                  N);
    kv_grads_finish(i, kv_sum);
}

// Replicated kv heads. The k|v rows of the fused q|k|v gradient (weight (2·D, C) after the H·D
// q rows, bias (2·D) likewise) accumulate over micro-batches, but only this micro-batch's
// contribution may be summed over the kv group: the accumulated value is set aside and zeroed,
// the backward writes the fresh partial, the group sums it, and the old value is added back.
// Every holder adds the same two values, so the copies stay bit-identical.
void Transformer::kv_grads_set_aside(int i) {
    if (!kv_group_) return;
    const LayerWeights& g = g_[size_t(i)];
    const size_t D = cfg_.D(), C = cfg_.hidden_size, nw = 2 * D * C, q = size_t(H_) * D;
    std::memcpy(kv_old_, g.qkv_w + q * C, sizeof(float) * nw);
    std::memset(g.qkv_w + q * C, 0, sizeof(float) * nw);
    if (g.qkv_b) {
        std::memcpy(kv_old_ + nw, g.qkv_b + q, sizeof(float) * 2 * D);
        std::memset(g.qkv_b + q, 0, sizeof(float) * 2 * D);
    }
}

// Packs the fresh k|v weight and bias gradients into one message and starts its sum.
Request Transformer::kv_grads_start_sum(int i) {
    if (!kv_group_) return nullptr;
    const LayerWeights& g = g_[size_t(i)];
    const size_t D = cfg_.D(), C = cfg_.hidden_size, nw = 2 * D * C, q = size_t(H_) * D;
    std::memcpy(kv_sum_, g.qkv_w + q * C, sizeof(float) * nw);
    if (g.qkv_b) std::memcpy(kv_sum_ + nw, g.qkv_b + q, sizeof(float) * 2 * D);
    const size_t n = nw + (g.qkv_b ? 2 * D : 0);
    return kv_group_->iall_reduce(kv_sum_, n, DType::F32, ReduceOp::Sum);
}

// gradient = set-aside value + the group's sum of this micro-batch's partials.
void Transformer::kv_grads_finish(int i, Request& sum) {
    if (!kv_group_) return;
    sum->wait();
    const LayerWeights& g = g_[size_t(i)];
    const size_t D = cfg_.D(), C = cfg_.hidden_size, nw = 2 * D * C, q = size_t(H_) * D;
    std::memcpy(g.qkv_w + q * C, kv_old_, sizeof(float) * nw);
    be_.add_inplace(g.qkv_w + q * C, kv_sum_, int64_t(nw));
    if (g.qkv_b) {
        std::memcpy(g.qkv_b + q, kv_old_ + nw, sizeof(float) * 2 * D);
        be_.add_inplace(g.qkv_b + q, kv_sum_ + nw, int64_t(2 * D));
    }
}

void Transformer::layer_backward(int i, Slot& s, float* d_resid, AttnDims d) {
    const LayerActs& a = acts(s, i);
    const float* x = s.resid[size_t(i)];
    if (recompute_[size_t(mp_.layer_begin + i)]) layer_forward(i, a, x, nullptr, d);
    mlp_backward(i, a, d_resid, d);
    attention_backward(i, a, x, d_resid, d);
}

void Transformer::final_norm_forward(Slot& s, int N) {
    bool llama = cfg_.arch == Arch::Llama;
    const float* w = params_.param(final_norm_name(cfg_));
    const float* b = llama ? nullptr : params_.param("ln_f.bias");
    norm_forward(be_, cfg_, s.lnf, s.lnf_mean, s.lnf_rstd, s.resid.back(), w, b, N);
}

// d_resid (N, C) = dL/d(stage output) from d_lnf.
void Transformer::final_norm_backward(Slot& s, float* d_resid, int N) {
    bool llama = cfg_.arch == Arch::Llama;
    const char* wn = final_norm_name(cfg_);
    float* d_b = llama ? nullptr : params_.grad("ln_f.bias");
    std::memset(d_resid, 0, sizeof(float) * size_t(N) * cfg_.hidden_size);
    norm_backward(be_, cfg_, d_resid, params_.grad(wn), d_b, s.d_lnf, s.resid.back(),
                  params_.param(wn), s.lnf_mean, s.lnf_rstd, N);
}

}  // namespace ete
