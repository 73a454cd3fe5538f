// ete/model/transformer.cpp — forward and backward of the decoder, layer by layer.
#include "ete/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ete/nn/linear.h"
#include "ete/nn/rope.h"

namespace ete {

Transformer::Transformer(const ModelConfig& config, Backend& backend)
    : cfg_(config), be_(backend), params_((config.validate(), param_specs(config))) {
    for (int l = 0; l < cfg_.num_layers; ++l) {
        w_.push_back(weights(l, false));
        g_.push_back(weights(l, true));
    }
}

LayerWeights Transformer::weights(int l, bool grads) {
    auto get = [&](const std::string& n) -> float* {
        if (!params_.has(n)) return nullptr;
        return grads ? params_.grad(n) : params_.param(n);
    };
    LayerWeights w;
    if (cfg_.arch == Arch::Llama) {
        std::string p = fmt::format("model.layers.{}.", l);
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
        std::string p = fmt::format("h.{}.", l);
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

void Transformer::setup(int B, int T, const std::vector<bool>& plan) {
    ETE_ASSERT(plan.size() == size_t(cfg_.num_layers));
    ETE_CHECK(B > 0 && T > 0, "model setup: batch {} and sequence {} must be > 0", B, T);
    ETE_CHECK(T <= cfg_.max_position_embeddings,
              "sequence length {} exceeds model.max_position_embeddings = {}", T,
              cfg_.max_position_embeddings);
    B_ = B;
    T_ = T;
    recompute_ = plan;
    // Logits are produced in row chunks of at most ~64 MB so a large vocabulary never needs a
    // full (N, V) buffer.
    int64_t N = int64_t(B) * T;
    head_rows_ = int(std::clamp<int64_t>((int64_t(16) << 20) / cfg_.vocab_size, 1, N));
    Arena counter;
    allocate(counter);
    arena_.reset(counter.used());
    allocate(arena_);
    rope_tables(rope_cos_, rope_sin_, T, cfg_.D(), cfg_.rope_theta, cfg_.rope_scaling);
}

void Transformer::allocate(Arena& a) {
    size_t N = size_t(B_) * T_, C = cfg_.hidden_size, F = cfg_.intermediate_size;
    size_t HD = size_t(cfg_.num_heads) * cfg_.D();
    size_t S = size_t(cfg_.num_heads + 2 * cfg_.num_kv_heads) * cfg_.D();
    size_t FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    bool ln = cfg_.arch == Arch::GPT2;
    resid_.assign(size_t(cfg_.num_layers) + 1, nullptr);
    for (auto& r : resid_) r = a.alloc_f32(N * C);
    act_slot_.clear();
    size_t kept = 0, recomputed = 0;
    for (bool r : recompute_) act_slot_.push_back(r ? SIZE_MAX : kept++), recomputed += r;
    for (size_t& slot : act_slot_) slot = slot == SIZE_MAX ? kept : slot;  // the shared scratch
    layer_acts_.assign(kept + (recomputed ? 1 : 0), LayerActs{});
    for (LayerActs& s : layer_acts_) {
        s.ln1 = a.alloc_f32(N * C);
        s.ln1_mean = ln ? a.alloc_f32(N) : nullptr;
        s.ln1_rstd = a.alloc_f32(N);
        s.qkv = a.alloc_f32(N * S);
        s.att = a.alloc_f32(N * HD);
        s.lse = a.alloc_f32(size_t(B_) * cfg_.num_heads * T_);
        s.resid_mid = a.alloc_f32(N * C);
        s.ln2 = a.alloc_f32(N * C);
        s.ln2_mean = ln ? a.alloc_f32(N) : nullptr;
        s.ln2_rstd = a.alloc_f32(N);
        s.fc = a.alloc_f32(N * FC);
        s.act = a.alloc_f32(N * F);
    }
    lnf_ = a.alloc_f32(N * C);
    lnf_mean_ = a.alloc_f32(N);
    lnf_rstd_ = a.alloc_f32(N);
    logits_ = a.alloc_f32(size_t(head_rows_) * cfg_.vocab_size);
    losses_ = a.alloc_f32(N);
    rope_cos_ = a.alloc_f32(size_t(T_) * cfg_.D() / 2 + 1);
    rope_sin_ = a.alloc_f32(size_t(T_) * cfg_.D() / 2 + 1);
    d_resid_ = a.alloc_f32(N * C);
    d_ln_ = a.alloc_f32(N * C);
    d_qkv_ = a.alloc_f32(N * S);
    d_att_ = a.alloc_f32(N * HD);
    d_fc_ = a.alloc_f32(N * FC);
    d_act_ = a.alloc_f32(N * F);
    ids_ = static_cast<int32_t*>(a.alloc_bytes(N * sizeof(int32_t)));
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

void Transformer::layer_forward(int l, const LayerActs& s, AttnDims d) {
    const LayerWeights& w = w_[size_t(l)];
    int N = d.B * d.T, C = cfg_.hidden_size, F = cfg_.intermediate_size, S = d.qkv_stride();
    int HD = d.H * d.D, FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    const float* x = resid_[size_t(l)];
    norm_forward(be_, cfg_, s.ln1, s.ln1_mean, s.ln1_rstd, x, w.ln1_w, w.ln1_b, N);
    linear_forward(be_, s.qkv, S, s.ln1, C, w.qkv_w, w.qkv_b, {N, C, S});
    if (cfg_.arch == Arch::Llama) be_.rope_forward(s.qkv, rope_cos_, rope_sin_, d);
    be_.attention_forward(s.att, s.lse, s.qkv, d, 1.0f / std::sqrt(float(d.D)));
    // resid_mid = x + att · o_wᵀ + o_b: copy the residual, let the GEMM add into it.
    std::memcpy(s.resid_mid, x, sizeof(float) * size_t(N) * C);
    linear_forward(be_, s.resid_mid, C, s.att, HD, w.o_w, w.o_b, {N, HD, C}, 1.0f);
    norm_forward(be_, cfg_, s.ln2, s.ln2_mean, s.ln2_rstd, s.resid_mid, w.ln2_w, w.ln2_b, N);
    linear_forward(be_, s.fc, FC, s.ln2, C, w.fc_w, w.fc_b, {N, C, FC});
    if (cfg_.arch == Arch::Llama) {
        be_.swiglu_forward(s.act, s.fc, N, F);
    } else {
        be_.gelu_forward(s.act, s.fc, int64_t(N) * F);
    }
    float* out = resid_[size_t(l) + 1];
    std::memcpy(out, s.resid_mid, sizeof(float) * size_t(N) * C);
    linear_forward(be_, out, C, s.act, F, w.proj_w, w.proj_b, {N, F, C}, 1.0f);
}

// d_resid_ enters as dL/d(layer output) and leaves as dL/d(resid_mid).
void Transformer::mlp_backward(int l, const LayerActs& s, AttnDims d) {
    const LayerWeights& w = w_[size_t(l)];
    LayerWeights& g = g_[size_t(l)];
    int N = d.B * d.T, C = cfg_.hidden_size, F = cfg_.intermediate_size;
    int FC = cfg_.arch == Arch::Llama ? 2 * F : F;
    linear_backward(be_, d_act_, d_resid_, C, s.act, F, w.proj_w, g.proj_w, g.proj_b, {N, F, C});
    if (cfg_.arch == Arch::Llama) {
        be_.swiglu_backward(d_fc_, d_act_, s.fc, N, F);
    } else {
        be_.gelu_backward(d_fc_, d_act_, s.fc, int64_t(N) * F);
    }
    linear_backward(be_, d_ln_, d_fc_, FC, s.ln2, C, w.fc_w, g.fc_w, g.fc_b, {N, C, FC});
    norm_backward(be_, cfg_, d_resid_, g.ln2_w, g.ln2_b, d_ln_, s.resid_mid, w.ln2_w, s.ln2_mean,
                  s.ln2_rstd, N);
}

// d_resid_ enters as dL/d(resid_mid) and leaves as dL/d(layer input).
void Transformer::attention_backward(int l, const LayerActs& s, AttnDims d) {
    const LayerWeights& w = w_[size_t(l)];
    LayerWeights& g = g_[size_t(l)];
    int N = d.B * d.T, C = cfg_.hidden_size, S = d.qkv_stride(), HD = d.H * d.D;
    linear_backward(be_, d_att_, d_resid_, C, s.att, HD, w.o_w, g.o_w, g.o_b, {N, HD, C});
    be_.attention_backward(d_qkv_, d_att_, s.att, s.lse, s.qkv, d, 1.0f / std::sqrt(float(d.D)));
    if (cfg_.arch == Arch::Llama) be_.rope_backward(d_qkv_, rope_cos_, rope_sin_, d);
    linear_backward(be_, d_ln_, d_qkv_, S, s.ln1, C, w.qkv_w, g.qkv_w, g.qkv_b, {N, C, S});
    norm_backward(be_, cfg_, d_resid_, g.ln1_w, g.ln1_b, d_ln_, resid_[size_t(l)], w.ln1_w,
                  s.ln1_mean, s.ln1_rstd, N);
}

void Transformer::layer_backward(int l, const LayerActs& s, AttnDims d) {
    if (recompute_[size_t(l)]) layer_forward(l, s, d);
    mlp_backward(l, s, d);
    attention_backward(l, s, d);
}

namespace {

const char* embed_name(const ModelConfig& c) {
    return c.arch == Arch::Llama ? "model.embed_tokens.weight" : "wte.weight";
}

// The LM head is its own matrix only for untied Llama; otherwise it is the embedding table.
const char* head_name(const ModelConfig& c) {
    return c.arch == Arch::Llama && !c.tie_word_embeddings ? "lm_head.weight" : embed_name(c);
}

}  // namespace

const float* Transformer::head_weight() const {
    return params_.param(params_.index(head_name(cfg_)));
}

float* Transformer::head_grad() {
    return params_.grad(head_name(cfg_));
}

// The attention shape of a (B, T) batch; validates doc_start once for the whole call.
AttnDims Transformer::attn_dims(int B, int T, const int32_t* doc_start) const {
    ETE_CHECK(B <= B_ && T <= T_, "batch ({}, {}) exceeds the set-up size ({}, {})", B, T, B_, T_);
    check_doc_start(doc_start, B, T);
    return AttnDims{B, T, cfg_.num_heads, cfg_.num_kv_heads, cfg_.D(), doc_start};
}

void Transformer::forward_body(const int32_t* inputs, AttnDims d) {
    int B = d.B, T = d.T, N = B * T, C = cfg_.hidden_size, V = cfg_.vocab_size;
    for (int i = 0; i < N; ++i) {
        ETE_CHECK(inputs[i] >= 0 && inputs[i] < V,
                  "token id {} at position {} is outside the "
                  "vocabulary [0, {})",
                  inputs[i], i, V);
    }
    std::memcpy(ids_, inputs, sizeof(int32_t) * size_t(N));
    be_.embedding_forward(resid_[0], ids_, params_.param(embed_name(cfg_)), N, C);
    if (cfg_.arch == Arch::GPT2) {
        be_.pos_embedding_forward(resid_[0], params_.param("wpe.weight"), d.doc_start, B, T, C);
    }
    for (int l = 0; l < cfg_.num_layers; ++l) layer_forward(l, acts(l), d);
    final_norm_forward(N);
}

void Transformer::final_norm_forward(int N) {
    bool llama = cfg_.arch == Arch::Llama;
    float* w = params_.param(llama ? "model.norm.weight" : "ln_f.weight");
    float* b = llama ? nullptr : params_.param("ln_f.bias");
    norm_forward(be_, cfg_, lnf_, lnf_mean_, lnf_rstd_, resid_[size_t(cfg_.num_layers)], w, b, N);
}

void Transformer::final_norm_backward(int N) {
    bool llama = cfg_.arch == Arch::Llama;
    const char* wn = llama ? "model.norm.weight" : "ln_f.weight";
    float* d_b = llama ? nullptr : params_.grad("ln_f.bias");
    std::memset(d_resid_, 0, sizeof(float) * size_t(N) * cfg_.hidden_size);
    norm_backward(be_, cfg_, d_resid_, params_.grad(wn), d_b, d_ln_,
                  resid_[size_t(cfg_.num_layers)], params_.param(wn), lnf_mean_, lnf_rstd_, N);
}

double Transformer::head_forward_backward(const int32_t* targets, int N, float d_scale,
                                          bool backward) {
    int C = cfg_.hidden_size, V = cfg_.vocab_size;
    const float* W = head_weight();
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
        int rows = std::min(head_rows_, N - r0);
        const float* x = lnf_ + size_t(r0) * C;
        be_.gemm(false, true, rows, V, C, 1.0f, x, C, W, C, 0.0f, logits_, V);
        if (!backward) {
            be_.cross_entropy_forward(losses_ + r0, logits_, targets + r0, rows, V);
            continue;
        }
        be_.cross_entropy_forward_backward(logits_, losses_ + r0, targets + r0, rows, V, d_scale);
        be_.gemm(false, false, rows, C, V, 1.0f, logits_, V, W, C, 0.0f, d_ln_ + size_t(r0) * C, C);
        be_.gemm(true, false, V, C, rows, 1.0f, logits_, V, x, C, 1.0f, head_grad(), C);
    }
    double sum = 0;
    for (int i = 0; i < N; ++i) sum += losses_[i];
    return sum;
}

double Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                     float d_scale, const int32_t* doc_start) {
    // One AttnDims (and so one doc_start) for the forward and every recomputed layer forward.
    const AttnDims d = attn_dims(B, T, doc_start);
    forward_body(inputs, d);
    int N = B * T, C = cfg_.hidden_size;
    double loss = head_forward_backward(targets, N, d_scale, true);
    final_norm_backward(N);
    for (int l = cfg_.num_layers - 1; l >= 0; --l) layer_backward(l, acts(l), d);
    be_.embedding_backward(params_.grad(embed_name(cfg_)), d_resid_, ids_, N, C);
    if (cfg_.arch == Arch::GPT2) {
        be_.pos_embedding_backward(params_.grad("wpe.weight"), d_resid_, doc_start, B, T, C);
    }
    return loss;
}

double Transformer::forward_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                                 const int32_t* doc_start) {
    forward_body(inputs, attn_dims(B, T, doc_start));
    return head_forward_backward(targets, B * T, 0.0f, false);
}

void Transformer::forward_logits(const int32_t* inputs, int B, int T, float* logits,
                                 const int32_t* doc_start) {
    forward_body(inputs, attn_dims(B, T, doc_start));
    int N = B * T, C = cfg_.hidden_size, V = cfg_.vocab_size;
    be_.gemm(false, true, N, V, C, 1.0f, lnf_, C, head_weight(), C, 0.0f, logits, V);
}

}  // namespace ete
