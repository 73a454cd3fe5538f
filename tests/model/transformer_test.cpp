// tests/model/transformer_test.cpp — model invariants that need no golden: recompute parity,
// forward_loss vs forward_backward, causality, gradient accumulation, deterministic init.
#include "ete/model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "ete/core/rng.h"
#include "parallel_util.h"

namespace ete {
namespace {

// Tiny bench-like models; sizes deliberately not powers of two.
ModelConfig tiny_config(Arch arch) {
    ModelConfig c;
    c.arch = arch;
    c.vocab_size = 67;
    c.hidden_size = 48;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = arch == Arch::Llama ? 2 : 4;
    c.intermediate_size = arch == Arch::Llama ? 72 : 4 * 48;
    c.max_position_embeddings = 32;
    c.norm_eps = arch == Arch::Llama ? 1e-6 : 1e-5;
    c.tie_word_embeddings = arch == Arch::GPT2;
    // Larger than HF's 0.02 so attention and the MLP are far from their linear regimes.
    c.initializer_range = 0.2;
    return c;
}

// Deterministic tokens in [0, V); every 7th target ignored.
void make_batch(int B, int T, int V, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
    inputs.resize(size_t(B) * T);
    targets.resize(size_t(B) * T);
    for (int i = 0; i < B * T; ++i) {
        inputs[size_t(i)] = int32_t((i * 37 + 11) % V);
        targets[size_t(i)] = i % 7 == 3 ? kIgnoreIndex : int32_t((i * 53 + 5) % V);
    }
}

int count_targets(const std::vector<int32_t>& t) {
    return int(std::count_if(t.begin(), t.end(), [](int32_t x) { return x != kIgnoreIndex; }));
}

// Norm weights around 1 and biases around 0 (not the init's exact 1/0) so their gradients and
// the bias paths carry information.
void perturb_norms_and_biases(ParamStore& ps) {
    for (int i = 0; i < int(ps.specs().size()); ++i) {
        const ParamSpec& s = ps.specs()[size_t(i)];
        if (s.kind != ParamKind::Norm && s.kind != ParamKind::Bias) continue;
        CounterRng rng(99, s.name);
        std::vector<float> v = ps.download(i);
        for (size_t k = 0; k < v.size(); ++k) v[k] += 0.1f * rng.normal(uint64_t(k));
        ps.upload(i, v.data());
    }
}

std::unique_ptr<Transformer> make_model(const ModelConfig& c, Backend& be, int B, int T,
                                        Recompute r = Recompute::None) {
    auto m = std::make_unique<Transformer>(c, be);
    m->params().init(7);
    perturb_norms_and_biases(m->params());
    m->setup(B, T, r);
    return m;
}

double rel_max_err(const float* a, const float* b, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
        err = std::max(err, std::abs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::abs(double(b[i])));
    }
    return scale > 0 ? err / scale : err;
}

// Every gradient of b within tol of a's, relative to a parameter's largest.
void expect_same_grads(const Transformer& a, const Transformer& b, double tol) {
    for (int i = 0; i < int(b.params().specs().size()); ++i) {
        const ParamSpec& s = b.params().specs()[size_t(i)];
        std::vector<float> ga = a.params().download_grad(i), gb = b.params().download_grad(i);
        EXPECT_LE(rel_max_err(ga.data(), gb.data(), shape_numel(s.shape)), tol) << s.name;
    }
}

// Two runs of the same model that differ only in summation order (GEMMs over other row counts,
// the batch in micro-batches) are held to layout_tolerance (parallel_util.h: two orders along
// the chains of reductions; here C = 48, head dim 12, T = 13, N = B·T = 26 tokens, for Llama:
// loss 2.1e-5, logits 1.4e-4, gradients 1.5e-4). A leak across positions or a missing
// micro-batch term moves these by 1e-2 or more.

struct Case {
    Arch arch;
    const char* backend;
};

class TransformerTest : public ::testing::TestWithParam<Case> {
  protected:
    void SetUp() override {
        cfg_ = tiny_config(GetParam().arch);
        be_ = make_backend(GetParam().backend);
        make_batch(B_, T_, cfg_.vocab_size, inputs_, targets_);
        d_scale_ = 1.0f / float(count_targets(targets_));
        tol_ = testing::layout_tolerance(cfg_, T_, int64_t(B_) * T_);
    }
    ModelConfig cfg_;
    testing::LayoutTolerance tol_{};
    std::unique_ptr<Backend> be_;
    int B_ = 2, T_ = 13;
    std::vector<int32_t> inputs_, targets_;
    float d_scale_ = 0;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << arch_name(c.arch) << "/" << c.backend;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return arch_name(info.param.arch) + "_" + info.param.backend;
}

// Recompute re-runs exactly the same kernels on the same inputs, so it must be bit-identical
// (OpenMP loops use static schedules, so every run splits the work the same way).
TEST_P(TransformerTest, RecomputeFullIsBitwiseIdenticalToNone) {
    auto a = make_model(cfg_, *be_, B_, T_, Recompute::None);
    auto b = make_model(cfg_, *be_, B_, T_, Recompute::Full);
    EXPECT_LT(b->activation_bytes(), a->activation_bytes());
    double la = a->forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    double lb = b->forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    EXPECT_EQ(la, lb);
    EXPECT_EQ(a->params().download_grads(), b->params().download_grads());
    // A non-trivial gradient everywhere it should be: no parameter left with an all-zero grad.
    for (int i = 0; i < int(a->params().specs().size()); ++i) {
        std::vector<float> g = a->params().download_grad(i);
        EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](float x) { return x != 0.0f; }))
            << a->params().specs()[size_t(i)].name;
    }
}

// Recomputing only some layers (here layer 1 of 2) is also bit-identical. Memory: one kept layer
// plus one shared scratch — with two layers that equals none; full keeps only the scratch.
TEST_P(TransformerTest, RecomputeSomeLayersIsBitwiseIdenticalToNone) {
    auto a = make_model(cfg_, *be_, B_, T_, Recompute::None);
    auto full = make_model(cfg_, *be_, B_, T_, Recompute::Full);
    Transformer b(cfg_, *be_);
    b.params().init(7);
    perturb_norms_and_biases(b.params());
    b.setup(B_, T_, recompute_plan("1", cfg_.num_layers));
    EXPECT_EQ(b.activation_bytes(), a->activation_bytes());
    EXPECT_GT(b.activation_bytes(), full->activation_bytes());
    double la = a->forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    double lb = b.forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    EXPECT_EQ(la, lb);
    EXPECT_EQ(a->params().download_grads(), b.params().download_grads());
}

// A model built without gradients (eval, generate) only runs forward: the same losses and logits
// bit for bit, from less activation memory than even full recompute (no backward buffers), no
// gradient buffer, and a backward refused by name.
TEST_P(TransformerTest, ForwardOnlyModelMatchesTheTrainingModel) {
    auto a = make_model(cfg_, *be_, B_, T_, Recompute::Full);
    Transformer b(cfg_, *be_, {}, DType::F32, {}, {}, /*gradients=*/false);
    b.params().init(7);
    perturb_norms_and_biases(b.params());
    b.setup(B_, T_);
    EXPECT_LT(b.activation_bytes(), a->activation_bytes());
    EXPECT_TRUE(b.params().grads_released());
    EXPECT_TRUE(b.params().grad(0).empty());
    EXPECT_EQ(b.forward_loss(inputs_.data(), targets_.data(), B_, T_),
              a->forward_loss(inputs_.data(), targets_.data(), B_, T_));
    std::vector<float> la(size_t(B_ * T_ * cfg_.vocab_size)), lb(la.size());
    a->forward_logits(inputs_.data(), B_, T_, la.data());
    b.forward_logits(inputs_.data(), B_, T_, lb.data());
    EXPECT_EQ(lb, la);
    try {
        b.forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
        ADD_FAILURE() << "backward ran on a model without gradients";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
    }
}

TEST(RecomputePlan, ParsesNamesListsAndRanges) {
    EXPECT_EQ(recompute_plan("none", 3), (std::vector<bool>{false, false, false}));
    EXPECT_EQ(recompute_plan("full", 3), (std::vector<bool>{true, true, true}));
    EXPECT_EQ(recompute_plan("0-1,3", 5), (std::vector<bool>{true, true, false, true, false}));
    for (const char* bad : {"", "4", "2-1", "a", "1-", "0,,1", "1x", "-1"}) {
        EXPECT_THROW(recompute_plan(bad, 4), Error) << bad;
    }
}

// forward_loss and forward_backward run the same forward; only the loss kernel differs (forward
// only vs fused with its gradient), which the ref kernels compute identically in double.
TEST_P(TransformerTest, ForwardLossEqualsForwardBackwardSum) {
    auto m = make_model(cfg_, *be_, B_, T_);
    double fb = m->forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    double fl = m->forward_loss(inputs_.data(), targets_.data(), B_, T_);
    // The cpu loss kernels may evaluate a token's log-sum-exp differently in the two paths: its
    // V positive terms in another order, exp within a few ulp, so log Σ moves by at most
    // reorder_worst(V + 3) (absolute), 1.8e-4 over the 22 tokens here (1.5e-6 of the loss).
    EXPECT_NEAR(fl, fb,
                count_targets(targets_) * testing::reorder_worst(double(cfg_.vocab_size + 3)));
    EXPECT_GT(fb, 0.0);
    // Ignored targets contribute nothing.
    std::vector<int32_t> all_ignored(targets_.size(), kIgnoreIndex);
    EXPECT_EQ(m->forward_loss(inputs_.data(), all_ignored.data(), B_, T_), 0.0);
}

// Position t's logits depend only on tokens 0..t: a prefix run gives the same first T' rows,
// and changing a later token leaves the earlier logits untouched.
TEST_P(TransformerTest, LogitsAreCausal) {
    auto m = make_model(cfg_, *be_, B_, T_);
    int V = cfg_.vocab_size, Tp = 5;
    std::vector<float> full(size_t(B_) * T_ * V), prefix(size_t(B_) * Tp * V);
    m->forward_logits(inputs_.data(), B_, T_, full.data());
    std::vector<int32_t> in_p(size_t(B_) * Tp);
    for (int b = 0; b < B_; ++b) std::copy_n(inputs_.begin() + b * T_, Tp, in_p.begin() + b * Tp);
    m->forward_logits(in_p.data(), B_, Tp, prefix.data());
    for (int b = 0; b < B_; ++b) {
        // GEMMs over a different row count may block (and so round) differently.
        double err = rel_max_err(prefix.data() + size_t(b) * Tp * V,
                                 full.data() + size_t(b) * T_ * V, int64_t(Tp) * V);
        EXPECT_LE(err, tol_.logits) << "batch row " << b;
    }

    std::vector<int32_t> changed = inputs_;
    int t0 = 8;
    for (int b = 0; b < B_; ++b)
        changed[size_t(b * T_ + t0)] = (changed[size_t(b * T_ + t0)] + 1) % V;
    std::vector<float> full2(full.size());
    m->forward_logits(changed.data(), B_, T_, full2.data());
    for (int b = 0; b < B_; ++b) {
        const float* x = full.data() + size_t(b) * T_ * V;
        const float* y = full2.data() + size_t(b) * T_ * V;
        EXPECT_LE(rel_max_err(y, x, int64_t(t0) * V), tol_.logits)
            << "past changed, batch row " << b;
        EXPECT_GT(rel_max_err(y + t0 * V, x + t0 * V, int64_t(T_ - t0) * V), 1e-3)
            << "future unchanged, batch row " << b;
    }
}

// Two micro-batches of B=1 accumulate the same gradient as one batch of B=2 (same d_scale).
TEST_P(TransformerTest, GradientAccumulationMatchesFullBatch) {
    auto whole = make_model(cfg_, *be_, B_, T_);
    auto micro = make_model(cfg_, *be_, 1, T_);
    double lw = whole->forward_backward(inputs_.data(), targets_.data(), B_, T_, d_scale_);
    double lm = 0;
    for (int b = 0; b < B_; ++b) {
        lm += micro->forward_backward(inputs_.data() + b * T_, targets_.data() + b * T_, 1, T_,
                                      d_scale_);
    }
    // The sums over rows are split in two and added in another order, and the cpu GEMMs block
    // B = 1 and B = 2 differently, so the activations round differently too: another order.
    EXPECT_NEAR(lm, lw, tol_.loss * std::abs(lw));
    expect_same_grads(*micro, *whole, tol_.grad);
}

// The head in row chunks (Transformer::plan_activation_bytes: ~4M logits a chunk, no fewer rows
// than C): with V = 49152 and C = 48 a chunk is 85 rows, so 8 rows of 13 tokens (104) run in
// two chunks, the second one partial, while each micro-batch of 13 rows runs in one. The same
// losses and gradients as the micro-batches summed, within the other-order tolerance above (a
// chunk reading or writing the wrong rows moves them by far more).
TEST_P(TransformerTest, TheHeadInChunksMatchesOneChunk) {
    ModelConfig c = cfg_;
    c.vocab_size = 49152;
    const int B = 8;
    std::vector<int32_t> in, tgt;
    make_batch(B, T_, c.vocab_size, in, tgt);
    const float d_scale = 1.0f / float(count_targets(tgt));
    const testing::LayoutTolerance tol = testing::layout_tolerance(c, T_, int64_t(B) * T_);
    auto whole = make_model(c, *be_, B, T_);
    auto micro = make_model(c, *be_, 1, T_);
    // The 104-row model holds an 85-row chunk of logits: 72 rows of fp32 logits (14.2 MB) and
    // 91 rows' worth of the other activations (0.6 MB) more than the 13-row one; all 104 rows
    // of logits at once would add 91 rows of them alone (17.9 MB).
    const size_t more_rows_of_logits = size_t(B - 1) * T_ * size_t(c.vocab_size) * 4;
    EXPECT_LT(whole->activation_bytes() - micro->activation_bytes(), more_rows_of_logits);
    double lw = whole->forward_backward(in.data(), tgt.data(), B, T_, d_scale), lm = 0;
    for (int b = 0; b < B; ++b)
        lm += micro->forward_backward(in.data() + b * T_, tgt.data() + b * T_, 1, T_, d_scale);
    EXPECT_NEAR(lm, lw, tol.loss * std::abs(lw));
    expect_same_grads(*micro, *whole, tol.grad);
}

// A model set up for (B, T) also runs smaller batches, and a smaller batch gives the same losses.
TEST_P(TransformerTest, SmallerBatchThanSetupMatches) {
    auto big = make_model(cfg_, *be_, B_, T_);
    auto one = make_model(cfg_, *be_, 1, T_);
    double a = big->forward_loss(inputs_.data(), targets_.data(), 1, T_);
    double b = one->forward_loss(inputs_.data(), targets_.data(), 1, T_);
    EXPECT_NEAR(a, b, tol_.loss * std::abs(b));  // GEMMs over buffers set up for other sizes
}

INSTANTIATE_TEST_SUITE_P(Models, TransformerTest,
                         ::testing::Values(Case{Arch::Llama, "cpu"}, Case{Arch::GPT2, "cpu"},
                                           Case{Arch::Llama, "ref"}, Case{Arch::GPT2, "ref"},
                                           Case{Arch::Llama, "guarded"},
                                           Case{Arch::GPT2, "guarded"}),
                         case_name);

TEST(ParamStoreInit, SameSeedSameModelDifferentSeedDifferent) {
    ModelConfig c = tiny_config(Arch::Llama);
    auto be = make_guarded_backend();
    ParamStore sa(param_specs(c), *be), sb(param_specs(c), *be), sd(param_specs(c), *be);
    sa.init(123);
    sb.init(123);
    sd.init(124);
    HostParams a = sa.to_host(), b = sb.to_host(), d = sd.to_host();
    size_t bytes = sizeof(float) * size_t(a.numel());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), bytes), 0);
    for (int i = 0; i < int(a.specs().size()); ++i) {
        const ParamSpec& s = a.specs()[size_t(i)];
        int64_t n = shape_numel(s.shape);
        if (s.init == ParamInit::Normal) {
            EXPECT_NE(std::memcmp(a.param(i), d.param(i), sizeof(float) * size_t(n)), 0) << s.name;
            // The draw has the spec's std: a statistical check, 3 sigma of the sample std's spread
            // (the draws are fixed by the seed, so it cannot flake).
            double ss = 0;
            for (int64_t k = 0; k < n; ++k) ss += double(a.param(i)[k]) * a.param(i)[k];
            double std = std::sqrt(ss / double(n));
            EXPECT_NEAR(std, s.init_std, 3.0 * s.init_std / std::sqrt(2.0 * double(n))) << s.name;
        } else {
            float want = s.init == ParamInit::Ones ? 1.0f : 0.0f;
            EXPECT_TRUE(std::all_of(a.param(i), a.param(i) + n, [&](float x) { return x == want; }))
                << s.name;
        }
    }
    // Different tensors are not copies of each other (the name keys the stream).
    int q = a.index("model.layers.0.self_attn.q_proj.weight");
    int q1 = a.index("model.layers.1.self_attn.q_proj.weight");
    EXPECT_NE(std::memcmp(a.param(q), a.param(q1), sizeof(float) * 16), 0);
}

}  // namespace
}  // namespace ete
