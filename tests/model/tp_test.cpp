// tests/model/tp_test.cpp — tensor parallelism of the model layer: shard layouts and their round
// trips, layout-invariant initialisation, ModelParallel errors, and tp = 2 / 4 models on the
// in-process fake world matching the tp = 1 model (loss, every gradient, logits), with padded
// gradients exactly zero and replicated gradients identical on every rank — including GQA kv
// heads replicated over tp / KV ranks when tp > KV (and MQA, KV = 1).
#include <gtest/gtest.h>
#include <omp.h>

#include <limits>
#include <ostream>

#include "ete/parallel/fake_comm.h"
#include "parallel_util.h"
#include "test_util.h"

namespace ete {
namespace tp_test {

using testing::add_to_global;
using testing::Batch;
using testing::RankGrads;

ParamSpec hand_spec(Shape global, ShardRule rule, int tp) {
    ParamSpec s;
    s.name = "t";
    s.global_shape = global;
    s.shard = rule;
    s.shape = shard_shape(rule, global, tp);
    return s;
}

// Global values 1..n, so a local element names the global element it came from (0 = padding).
std::vector<float> iota_global(const ParamSpec& s) {
    std::vector<float> g(size_t(shape_numel(s.global_shape)));
    for (size_t k = 0; k < g.size(); ++k) g[k] = float(k + 1);
    return g;
}

std::vector<float> local_of(const ParamSpec& s, int rank, int tp) {
    std::vector<float> g = iota_global(s), l(size_t(shape_numel(s.shape)), -1.0f);
    shard_from_global(s, rank, tp, g.data(), l.data());
    return l;
}

// The Megatron layouts, written out by hand.
TEST(Shard, LayoutsByHand) {
    // GPT-2 c_attn rows q|k|v (12 rows of 1 column), tp 2: rank 1 holds rows 2-3 of each group.
    ParamSpec qkv = hand_spec({12, 1}, {0, 3, false}, 2);
    EXPECT_EQ(qkv.shape, (Shape{6, 1}));
    EXPECT_EQ(local_of(qkv, 1, 2), (std::vector<float>{3, 4, 7, 8, 11, 12}));
    // Vocabulary rows 5 of 2 columns, tp 2: 3 rows each, the last one padding on rank 1.
    ParamSpec vocab = hand_spec({5, 2}, {0, 1, true}, 2);
    EXPECT_EQ(vocab.shape, (Shape{3, 2}));
    EXPECT_EQ(local_of(vocab, 0, 2), (std::vector<float>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(local_of(vocab, 1, 2), (std::vector<float>{7, 8, 9, 10, 0, 0}));
    // Row-parallel columns 5 of 2 rows, padded, tp 2: rank 1 holds columns 3, 4 and padding.
    ParamSpec down = hand_spec({2, 5}, {1, 1, true}, 2);
    EXPECT_EQ(down.shape, (Shape{2, 3}));
    EXPECT_EQ(local_of(down, 1, 2), (std::vector<float>{4, 5, 0, 9, 10, 0}));
    // Padding spreads over the last ranks: 5 rows at tp 4 are 2 + 2 + 1 + 0 real rows.
    ParamSpec v4 = hand_spec({5}, {0, 1, true}, 4);
    EXPECT_EQ(local_of(v4, 2, 4), (std::vector<float>{5, 0}));
    EXPECT_EQ(local_of(v4, 3, 4), (std::vector<float>{0, 0}));
    EXPECT_TRUE(shard_has_padding(v4, 4));
    EXPECT_FALSE(shard_has_padding(hand_spec({8}, {0, 1, true}, 4), 4));
}

// The tiny models at tp 2 and 4: kv heads split (KV 4), split then replicated (KV 2), replicated
// (KV 1), and GPT-2.
std::vector<ModelConfig> tp_models() {
    return {testing::tp_llama(4), testing::tp_llama(2), testing::tp_llama(1), testing::tp_gpt2()};
}

// shard_to_global inverts shard_from_global for every parameter of the tiny models at tp 2 and
// 4: the ranks' slices cover each global element tp / parts times (once when split, on every
// rank when replicated), its owners exactly once; padding is zero.
TEST(Shard, RoundTripEveryModelParameter) {
    for (const ModelConfig& c : tp_models()) {
        for (int tp : {2, 4}) {
            std::vector<ParamSpec> specs = param_specs(c, ModelParallel{nullptr, 0, tp});
            for (const ParamSpec& s : specs) {
                std::vector<float> g = iota_global(s);
                std::vector<float> back(g.size(), std::numeric_limits<float>::quiet_NaN());
                std::vector<int> writes(g.size(), 0), owned(g.size(), 0);
                for (int r = 0; r < tp; ++r) {
                    std::vector<float> l(size_t(shape_numel(s.shape)), -1.0f);
                    shard_from_global(s, r, tp, g.data(), l.data());
                    for (const ShardRun& run : shard_runs(s, r, tp)) {
                        for (int64_t k = 0; k < run.len; ++k) {
                            if (run.global < 0) {
                                EXPECT_EQ(l[size_t(run.local + k)], 0.0f) << s.name;
                            } else {
                                ++writes[size_t(run.global + k)];
                                owned[size_t(run.global + k)] += shard_owner(s.shard, r, tp);
                            }
                        }
                    }
                    shard_to_global(s, r, tp, l.data(), back.data());
                }
                EXPECT_EQ(std::memcmp(back.data(), g.data(), sizeof(float) * g.size()), 0)
                    << s.name << " tp " << tp;
                const int want = tp / shard_parts(s.shard, tp);
                EXPECT_TRUE(
                    std::all_of(writes.begin(), writes.end(), [&](int w) { return w == want; }))
                    << s.name << " tp " << tp;
                EXPECT_TRUE(std::all_of(owned.begin(), owned.end(), [](int w) { return w == 1; }))
                    << s.name << " tp " << tp;
            }
        }
    }
}

// A tp shard's init is exactly the slice of the tp = 1 init (same seed), padding zero.
TEST(ParamStoreInit, LayoutInvariantAcrossTp) {
    auto be = make_backend("cpu");
    for (const ModelConfig& c : tp_models()) {
        ParamStore whole(param_specs(c), *be);
        whole.init(5);
        for (int tp : {2, 4}) {
            int padded = 0;
            for (int r = 0; r < tp; ++r) {
                ParamStore part(param_specs(c, ModelParallel{nullptr, r, tp}), *be, r, tp);
                part.init(5);
                for (int i = 0; i < int(part.specs().size()); ++i) {
                    const ParamSpec& s = part.specs()[size_t(i)];
                    std::vector<float> want(size_t(shape_numel(s.shape)));
                    std::vector<float> global = whole.download(whole.index(s.name));
                    shard_from_global(s, r, tp, global.data(), want.data());
                    EXPECT_EQ(part.download(i), want) << s.name << " tp " << tp << " rank " << r;
                    padded += shard_has_padding(s, tp);
                }
            }
            EXPECT_GT(padded, 0) << "the test model must exercise padding at tp " << tp;
        }
    }
}

TEST(ModelParallelErrors, HeadsGroupsAndTargets) {
    ModelConfig c = testing::tp_llama(2);
    ModelConfig six = c;
    six.num_heads = 6;  // divides by tp = 3, but 2 kv heads neither split nor replicate over 3
    EXPECT_EQ(error_of([&] {
                  param_specs(six, ModelParallel{nullptr, 0, 3});
              }),
              "model.num_kv_heads = 2 does not fit parallel.tp = 3: expected num_kv_heads "
              "divisible by tp (kv heads split) or tp divisible by num_kv_heads (each kv head "
              "replicated on tp / num_kv_heads ranks)");
    EXPECT_EQ(error_of([&] {
                  param_specs(c, ModelParallel{nullptr, 0, 3});
              }),
              "model.num_heads = 8 is not divisible by parallel.tp = 3");
    auto be = make_backend("ref");
    EXPECT_EQ(error_of([&] {
                  Transformer m(c, *be, ModelParallel{nullptr, 1, 2});
              }),
              "tensor parallelism over parallel.tp = 2 ranks needs the tp communicator");
    Batch b = testing::make_batch(1, 5, 61);
    b.targets[3] = 61;
    run_fake_world(2, [&](Communicator& w) {
        Transformer m(c, *be, ModelParallel{&w, w.rank(), 2});
        m.setup(1, 5);
        EXPECT_EQ(error_of([&] { m.forward_loss(b.inputs.data(), b.targets.data(), 1, 5); }),
                  "cross_entropy: target 61 of row 3 is outside [0, 61) and not the ignore index "
                  "-100");
        EXPECT_NE(error_of([&] {
                      Transformer m(c, *be, ModelParallel{&w, 1 - w.rank(), 2});
                  }).find("has rank"),
                  std::string::npos);
    });
}

// One tensor-parallel rank's results.
struct RankOut {
    double loss = 0, eval_loss = 0;
    std::vector<float> logits;
    RankGrads grads;
};

struct TpCase {
    Arch arch;
    int tp;
    bool recompute;
    const char* backend;
    int vocab = 61;         // 5 at tp 4: 2 + 2 + 1 + 0 real rows, one rank owns no token
    int heads = 0, kv = 0;  // Llama: 0 = 8 heads, kv heads 4 at tp 4 and 2 otherwise (split)
};

void PrintTo(const TpCase& c, std::ostream* os) {
    *os << arch_name(c.arch) << "/tp" << c.tp << (c.recompute ? "/recompute" : "") << "/"
        << c.backend << "/V" << c.vocab << "/H" << c.heads << "/KV" << c.kv;
}

class TensorParallel : public ::testing::TestWithParam<TpCase> {
  protected:
    void SetUp() override {
        const TpCase& p = GetParam();
        cfg_ = testing::tp_config(p.arch, p.kv ? p.kv : p.tp == 4 ? 4 : 2);
        if (p.heads) cfg_.num_heads = p.heads;
        cfg_.vocab_size = p.vocab;
        be_ = make_backend(p.backend);
        for (int mb = 0; mb < 2; ++mb)
            batches_.push_back(testing::make_batch(B_, T_, cfg_.vocab_size, mb));
        int n = testing::count_targets(batches_[0].targets) +
                testing::count_targets(batches_[1].targets);
        d_scale_ = 1.0f / float(n);
    }

    // Two accumulated micro-batches, then an evaluation loss and logits of the first.
    RankOut run(Transformer& m) {
        m.setup(B_, T_, GetParam().recompute ? Recompute::Full : Recompute::None);
        RankOut o;
        for (const Batch& b : batches_)
            o.loss += m.forward_backward(b.inputs.data(), b.targets.data(), B_, T_, d_scale_);
        o.grads = testing::rank_grads(m.params());
        o.eval_loss = m.forward_loss(batches_[0].inputs.data(), batches_[0].targets.data(), B_, T_);
        o.logits.resize(size_t(B_) * T_ * cfg_.vocab_size);
        m.forward_logits(batches_[0].inputs.data(), B_, T_, o.logits.data());
        return o;
    }

    ModelConfig cfg_;
    std::unique_ptr<Backend> be_;
    int B_ = 2, T_ = 11;
    std::vector<Batch> batches_;
    float d_scale_ = 0;
};

TEST_P(TensorParallel, MatchesTheTp1Model) {
    const int tp = GetParam().tp;
    auto whole = testing::make_reference(cfg_, *be_);
    RankOut want = run(*whole);

    std::vector<RankOut> got(static_cast<size_t>(tp));
    run_fake_world(tp, [&](Communicator& w) {
        omp_set_num_threads(1);
        auto be = make_backend(GetParam().backend);
        Transformer m(cfg_, *be, ModelParallel{&w, w.rank(), tp});
        testing::copy_params(whole->params(), m.params());
        got[size_t(w.rank())] = run(m);
    });

    // The rows of o_proj/down_proj/head GEMMs are summed in tp parts, and the loss's softmax is
    // combined from per-rank log-sum-exps (float all-reduces): another summation order of the
    // same terms, over both micro-batches' tokens (parallel_util.h).
    const testing::LayoutTolerance tol = testing::layout_tolerance(cfg_, T_, 2 * B_ * T_);
    std::vector<float> global(size_t(whole->params().numel()), 0.0f);
    double counted_sq = 0, want_sq = 0;
    for (int r = 0; r < tp; ++r) {
        const RankOut& o = got[size_t(r)];
        EXPECT_EQ(o.loss, got[0].loss) << "the loss is the global value on every rank";
        EXPECT_NEAR(o.loss, want.loss, tol.loss * want.loss);
        EXPECT_NEAR(o.eval_loss, want.eval_loss, tol.loss * want.eval_loss);
        EXPECT_LE(
            testing::rel_max_err(o.logits.data(), want.logits.data(), int64_t(want.logits.size())),
            tol.logits);
        add_to_global(o.grads, whole->params(), global);
        for (size_t i = 0; i < o.grads.specs.size(); ++i) {
            const ParamSpec& s = o.grads.specs[i];
            const float* g = o.grads.grads.data() + o.grads.offsets[i];
            for (const ShardRun& run : shard_runs(s, r, tp))
                for (int64_t k = 0; run.global < 0 && k < run.len; ++k)
                    ASSERT_EQ(g[run.local + k], 0.0f) << s.name << " padding, rank " << r;
            // Replicated parameters (holders: every rank) and replicated kv heads (holders: the
            // tp / KV consecutive ranks of the head) have the same gradient on every holder.
            const int first = r - r % (tp / shard_parts(s.shard, tp));
            if (first != r) {
                const RankGrads& h = got[size_t(first)].grads;
                EXPECT_EQ(
                    std::memcmp(g, h.grads.data() + h.offsets[i], 4 * size_t(shape_numel(s.shape))),
                    0)
                    << s.name << " (replicated) differs on rank " << r << " from rank " << first;
            }
            for (int64_t k = 0; o.grads.counted[i] && k < shape_numel(s.shape); ++k)
                counted_sq += double(g[k]) * g[k];
        }
    }
    testing::expect_grads_match(whole->params(), global, tol.grad, "tp");
    for (float g : whole->params().download_grads()) want_sq += double(g) * g;
    EXPECT_NEAR(counted_sq, want_sq, tol.norm_sq * want_sq) << "counts_in_norm over the tp group";
}

std::string tp_case_name(const ::testing::TestParamInfo<TpCase>& info) {
    const TpCase& c = info.param;
    std::string heads = c.kv ? fmt::format("_h{}kv{}", c.heads ? c.heads : 8, c.kv) : "";
    return arch_name(c.arch) + "_tp" + std::to_string(c.tp) + (c.recompute ? "_recompute_" : "_") +
           c.backend + "_v" + std::to_string(c.vocab) + heads;
}

INSTANTIATE_TEST_SUITE_P(
    Models, TensorParallel,
    ::testing::Values(
        TpCase{Arch::Llama, 2, false, "cpu"}, TpCase{Arch::Llama, 2, true, "cpu"},
        TpCase{Arch::Llama, 4, false, "cpu"}, TpCase{Arch::GPT2, 2, false, "cpu"},
        TpCase{Arch::GPT2, 2, true, "cpu"}, TpCase{Arch::GPT2, 4, false, "cpu"},
        TpCase{Arch::Llama, 2, false, "ref"}, TpCase{Arch::GPT2, 4, true, "ref"},
        TpCase{Arch::GPT2, 4, false, "cpu", 5}, TpCase{Arch::Llama, 2, true, "guarded"},
        // q/k/v biases sharded with their heads; windows on some or all layers
        TpCase{Arch::Qwen2, 2, false, "cpu"}, TpCase{Arch::Qwen2, 4, true, "cpu"},
        TpCase{Arch::Mistral, 2, true, "cpu"}, TpCase{Arch::Mistral, 2, false, "ref"},
        // q/k norm weights replicated, their gradients summed over the tp group;
        // at tp 4 > KV 2 the k heads (and their norms) are replicated too
        TpCase{Arch::Qwen3, 2, false, "cpu"}, TpCase{Arch::Qwen3, 4, true, "cpu", 61, 0, 2},
        TpCase{Arch::Qwen3, 2, true, "guarded"}, TpCase{Arch::GPT2, 4, false, "guarded", 5},
        // Gemma: post norms after the row-parallel all-reduce, soft-capped scores and
        // vocab-parallel logits, local and global RoPE tables
        TpCase{Arch::Gemma2, 2, false, "cpu"}, TpCase{Arch::Gemma2, 4, true, "cpu"},
        TpCase{Arch::Gemma3, 2, true, "cpu"}, TpCase{Arch::Gemma3, 4, false, "ref"},
        // Phi-3: the fused qkv_proj split per group (q twice as wide as k and v), gate_up_proj
        // per half, partial RoPE with LongRoPE's factors
        TpCase{Arch::Phi3, 2, false, "cpu"}, TpCase{Arch::Phi3, 2, true, "guarded"},
        TpCase{Arch::Phi3, 4, false, "cpu", 61, 8, 4}),
    tp_case_name);

// tp > KV: each kv head replicated on tp / KV ranks (one query head per rank at H 4, two sharing
// the local kv head at H 8; four holders at tp 8), and MQA (KV 1) at tp 2 and 4.
INSTANTIATE_TEST_SUITE_P(KvReplicated, TensorParallel,
                         ::testing::Values(TpCase{Arch::Llama, 4, false, "cpu", 61, 4, 2},
                                           TpCase{Arch::Llama, 4, true, "cpu", 61, 4, 2},
                                           TpCase{Arch::Llama, 4, false, "cpu", 61, 8, 2},
                                           TpCase{Arch::Llama, 8, false, "cpu", 61, 8, 2},
                                           TpCase{Arch::Llama, 2, false, "cpu", 61, 8, 1},
                                           TpCase{Arch::Llama, 2, true, "cpu", 61, 8, 1},
                                           TpCase{Arch::Llama, 4, false, "cpu", 61, 8, 1},
                                           TpCase{Arch::Llama, 4, true, "ref", 61, 8, 1},
                                           TpCase{Arch::Llama, 4, false, "guarded", 61, 8, 2}),
                         tp_case_name);

}  // namespace tp_test
}  // namespace ete
