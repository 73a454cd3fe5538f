// tests/model/parallel_util.h — shared by the tensor- and pipeline-parallel model tests: tiny
// models whose vocabulary and MLP width need padding at tp = 2 and 4, a reference (whole) model,
// copying its weights into any (tp, stage) part and gathering a part's gradients back.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ete/core/rng.h"
#include "ete/model/shard.h"
#include "ete/model/transformer.h"
#include "numerics.h"
#include "phi3_rope.h"

namespace ete::testing {

// Llama with GQA; V = 61 and F = 45 are prime-ish so tp = 2 and 4 both pad (31·2, 16·4 rows;
// 23·2, 12·4 columns). kv_heads 4 splits at tp = 4; fewer kv heads than tp replicate them.
inline ModelConfig tp_llama(int kv_heads = 2, bool tied = false) {
    ModelConfig c;
    c.arch = Arch::Llama;
    c.vocab_size = 61;
    c.hidden_size = 48;
    c.intermediate_size = 45;
    c.num_layers = 4;
    c.num_heads = 8;
    c.num_kv_heads = kv_heads;
    c.max_position_embeddings = 16;
    c.norm_eps = 1e-6;
    c.tie_word_embeddings = tied;
    c.attention_bias = true;  // bias paths: column-parallel q/k/v, replicated o_proj
    c.mlp_bias = true;
    c.initializer_range = 0.2;  // far from the linear regime, so attention mixing matters
    return c;
}

// GPT-2 (tied, fused c_attn with q|k|v groups, learned positions).
inline ModelConfig tp_gpt2() {
    ModelConfig c;
    c.arch = Arch::GPT2;
    c.vocab_size = 61;
    c.hidden_size = 48;
    c.intermediate_size = 45;
    c.num_layers = 4;
    c.num_heads = 4;
    c.num_kv_heads = 4;
    c.max_position_embeddings = 16;
    c.norm_eps = 1e-5;
    c.tie_word_embeddings = true;
    c.initializer_range = 0.2;
    return c;
}

// Qwen2 (q/k/v biases only; a window of 5 on layers 2 and 3), Mistral (no biases; a window of 4
// on every layer) and Qwen3 (per-head q/k norms, q/k/v/o biases; a window of 5 on layers 2 and 3)
// on tp_llama's shapes: the tests' sequences (11) cross the windows. Gemma 2 and 3: gemma_like;
// Phi-3: phi3_like.
inline ModelConfig tp_family(Arch arch, int kv_heads = 2);

// Gemma 2 (soft-caps of 1 on the scores and 2 on the logits, so tanh bends the tiny model's
// values as 50 and 30 do a real one's; local layers 0 and 2) and Gemma 3 (q/k norms; local
// layers 0, 1 and 3 at their own RoPE base, layer 2 global at a scaled one) on c's shapes, with
// a window of `window` on the local layers and query_pre_attn_scalar 24 (not head_dim).
inline ModelConfig gemma_like(ModelConfig c, Arch arch, int window) {
    c.arch = arch;
    c.use_family_defaults();
    c.attention_bias = false;
    c.mlp_bias = false;
    c.tie_word_embeddings = true;
    c.sliding_window = window;
    c.window_from_layer = 0;
    c.query_pre_attn_scalar = 24;
    if (arch == Arch::Gemma2) {
        c.attn_softcap = 1.0f;
        c.final_softcap = 2.0f;
    } else {
        c.window_pattern = 3;
        c.rope_theta = 1e6;
        c.rope_scaling.type = "linear";
        c.rope_scaling.factor = 8;
    }
    return c;
}

// Phi-3 on c's shapes: fused qkv_proj and gate_up_proj, RoPE on part of each head
// (int(D · rotary), which must be even) with LongRoPE — the tests' sequences pass the original
// context of 8, so the long factors and the attention factor apply — and a window of `window` on
// every layer.
inline ModelConfig phi3_like(ModelConfig c, int window, double rotary = 0.75) {
    c.arch = Arch::Phi3;
    c.use_family_defaults();
    c.attention_bias = false;
    c.mlp_bias = false;
    c.sliding_window = window;
    c.window_from_layer = 0;
    phi3_rope(c, rotary, 8);
    return c;
}

inline ModelConfig tp_family(Arch arch, int kv_heads) {
    ModelConfig c = tp_llama(kv_heads);
    if (arch == Arch::Gemma2 || arch == Arch::Gemma3) return gemma_like(c, arch, 5);
    if (arch == Arch::Phi3) return phi3_like(c, 5);
    c.arch = arch;
    c.attention_bias = arch == Arch::Qwen3;  // the bias path of Qwen3's attention_bias
    c.mlp_bias = false;
    c.sliding_window = arch == Arch::Mistral ? 4 : 5;
    c.window_from_layer = arch == Arch::Mistral ? 0 : 2;
    return c;
}

// The test model of a family: tp_gpt2, tp_llama (kv heads as given) or tp_family.
inline ModelConfig tp_config(Arch arch, int kv_heads = 2) {
    if (arch == Arch::GPT2) return tp_gpt2();
    return arch == Arch::Llama ? tp_llama(kv_heads) : tp_family(arch, kv_heads);
}

// Deterministic tokens in [0, V) for micro-batch `mb`; every 7th target ignored.
struct Batch {
    std::vector<int32_t> inputs, targets;
};
inline Batch make_batch(int B, int T, int V, int mb = 0) {
    Batch b;
    for (int i = 0; i < B * T; ++i) {
        int k = i + 97 * mb;
        b.inputs.push_back(int32_t((k * 37 + 11) % V));
        b.targets.push_back(i % 7 == 3 ? kIgnoreIndex : int32_t((k * 53 + 5) % V));
    }
    return b;
}

inline int count_targets(const std::vector<int32_t>& t) {
    return int(std::count_if(t.begin(), t.end(), [](int32_t x) { return x != kIgnoreIndex; }));
}

// The whole model (tp 1, one stage), initialised with norm weights and biases moved off their
// exact 1/0 so every gradient path carries signal.
inline std::unique_ptr<Transformer> make_reference(const ModelConfig& c, Backend& be) {
    auto m = std::make_unique<Transformer>(c, be);
    ParamStore& ps = m->params();
    ps.init(7);
    for (int i = 0; i < int(ps.specs().size()); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        if (s.kind != ParamKind::Norm && s.kind != ParamKind::Bias) continue;
        CounterRng rng(99, s.name);
        std::vector<float> v = ps.download(i);
        for (size_t k = 0; k < v.size(); ++k) v[k] += 0.1f * rng.normal(uint64_t(k));
        ps.upload(i, v.data());
    }
    return m;
}

// part's parameters = its shards of the whole model's (by name; a tied copy from the embedding).
inline void copy_params(const ParamStore& whole, ParamStore& part) {
    for (int i = 0; i < int(part.specs().size()); ++i) {
        const ParamSpec& s = part.specs()[size_t(i)];
        std::vector<float> global = whole.download(whole.index(s.name));
        std::vector<float> local(size_t(part.numel(i)));
        shard_from_global(s, part.tp_rank(), part.tp_size(), global.data(), local.data());
        part.upload(i, local.data());
    }
}

// A copy of one rank's gradients, with what is needed to put them back in the global layout.
struct RankGrads {
    std::vector<ParamSpec> specs;
    std::vector<int64_t> offsets;
    std::vector<float> grads;
    int tp_rank = 0, tp_size = 1;
    std::vector<bool> counted;  // counts_in_norm
};
inline RankGrads rank_grads(const ParamStore& ps) {
    RankGrads r{ps.specs(), {}, {}, ps.tp_rank(), ps.tp_size(), {}};
    for (int i = 0; i < int(ps.specs().size()); ++i) {
        r.offsets.push_back(ps.offset(i));
        r.counted.push_back(ps.counts_in_norm(i));
    }
    r.grads = ps.download_grads();
    return r;
}

// Adds a part's gradients into the global layout of `whole`: each element from its owner only
// (shard_owner: sharded slices from every rank, replicated parameters from tp rank 0, a kv head
// held by several ranks from the first of them); the tied copy adds into the embedding.
// `global` is a buffer of whole.numel() floats.
inline void add_to_global(const RankGrads& r, const ParamStore& whole, std::vector<float>& global) {
    for (size_t i = 0; i < r.specs.size(); ++i) {
        const ParamSpec& s = r.specs[i];
        if (!shard_owner(s.shard, r.tp_rank, r.tp_size)) continue;
        int w = whole.index(s.name);
        // Elements this rank does not hold stay 0 in tmp.
        std::vector<float> tmp(size_t(shape_numel(s.global_shape)), 0.0f);
        shard_to_global(s, r.tp_rank, r.tp_size, r.grads.data() + r.offsets[i], tmp.data());
        float* dst = global.data() + whole.offset(w);
        for (size_t k = 0; k < tmp.size(); ++k) dst[k] += tmp[k];
    }
}

inline double rel_max_err(const float* a, const float* b, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return scale > 0 ? err / scale : err;
}

// How far a tp / pp layout of these models may be from the whole one (numerics.h): the same
// products summed in other orders (tp's partial sums and float all-reduces, other GEMM blockings),
// two orders along the model's chains of reductions, with T positions and N tokens per gradient:
//  - a loss, a sum of per-token terms lse - z_t >= 0 about as large as their parts: the forward
//    chain and the log-sum-exp, reorder_prob(n_fwd + V) (2.7e-5 for tp_llama(), T = 11);
//  - logits against the largest: the head's C products cancel to ~1/√C of their magnitudes,
//    reorder_prob(n_fwd)·√C (1.8e-4);
//  - a gradient against its tensor's largest: forward and backward (decoder_chain), its N
//    per-token terms cancelling likewise, reorder_prob(n)·√N (2.5e-4 for N = 44);
//  - a squared gradient norm: δ(Σg²) = 2·Σg·δg, twice the gradients' relative error.
// A wrong shard, a missed or doubled all-reduce or a wrong scale moves these by 1e-3 or more.
struct LayoutTolerance {
    double loss, logits, grad, norm_sq;
};
inline LayoutTolerance layout_tolerance(const ModelConfig& c, int64_t T, int64_t N) {
    const double fwd = model_forward_chain(c, T);
    const double grad = reorder_prob(model_chain(c, T, N)) * std::sqrt(double(N));
    return {reorder_prob(fwd + c.vocab_size), reorder_prob(fwd) * std::sqrt(double(c.hidden_size)),
            grad, 2 * grad};
}

// Every parameter's gradient in `global` matches the whole model's within rel_tol (max error
// over the tensor relative to its largest element; tol_of, where given, sets a parameter's own),
// and is not all zero. The key bias's gradient is mathematically zero (it shifts all of a query's
// scores alike, which the softmax ignores): what both sides hold is rounding noise, compared
// against the scale of the layer's query-bias gradient instead of its own.
inline void expect_grads_match(const ParamStore& whole, const std::vector<float>& global,
                               double rel_tol, const std::string& what,
                               const std::function<double(const ParamSpec&)>& tol_of = {}) {
    auto max_abs = [](const std::vector<float>& v) {
        double m = 0;
        for (float x : v) m = std::max(m, std::abs(double(x)));
        return m;
    };
    for (int i = 0; i < int(whole.specs().size()); ++i) {
        const ParamSpec& s = whole.specs()[size_t(i)];
        std::vector<float> want = whole.download_grad(i);
        const float* got = global.data() + whole.offset(i);
        double err = 0;
        for (size_t k = 0; k < want.size(); ++k)
            err = std::max(err, std::abs(double(got[k]) - double(want[k])));
        double scale = max_abs(want);
        if (s.role == ParamRole::KBias)
            scale = std::max(scale,
                             max_abs(whole.download_grad(whole.find(ParamRole::QBias, s.layer))));
        EXPECT_LE(scale > 0 ? err / scale : err, tol_of ? tol_of(s) : rel_tol)
            << what << ": " << s.name;
        EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float x) { return x != 0.0f; }))
            << s.name;
    }
}

}  // namespace ete::testing
