// tests/model/stage_test.cpp — pipeline stages of the model layer: stage boundaries (balanced
// and explicit), a model split into 2 and 3 stages with two micro-batches in flight matching the
// unsplit model, the grad-ready hook, misuse errors, and tp = 2 × 2 stages on the fake world
// (including counts_in_norm over the tp × pp ranks).
#include <gtest/gtest.h>
#include <omp.h>

#include <functional>
#include <map>

#include "ete/parallel/device_comm.h"
#include "ete/parallel/fake_comm.h"
#include "parallel_util.h"
#include "test_util.h"

namespace ete {
namespace stage_test {

using testing::Batch;
using testing::RankGrads;

// ---------------------------------------------------------------- stage boundaries

TEST(PipelineBounds, ExplicitListAndErrors) {
    ModelConfig c = testing::tp_llama();
    EXPECT_EQ(pipeline_layer_bounds(c, 3, "1,2,1"), (std::vector<int>{0, 1, 3, 4}));
    EXPECT_EQ(pipeline_layer_bounds(c, 1, "4"), (std::vector<int>{0, 4}));
    for (const char* bad : {"1,2", "2,2,0", "1,1,1", "a,b,c", "1,2,1,", "1, 2,1x", "-1,4,1"}) {
        EXPECT_EQ(error_of([&] { pipeline_layer_bounds(c, 3, bad); }),
                  fmt::format("parallel.pp_layers = '{}': expected 3 positive layer counts "
                              "separated by commas (one per stage) that sum to "
                              "model.num_layers = 4",
                              bad));
    }
    EXPECT_EQ(error_of([&] { pipeline_layer_bounds(c, 5); }),
              "parallel.pp = 5: expected 1..model.num_layers = 4 (each stage holds >= 1 layer)");
}

// Equal layers and a head worth less than one layer: equal stages.
TEST(PipelineBounds, BalancedLlama7bShape) {
    ModelConfig c;  // the defaults are Llama-2 7B's shape
    EXPECT_LT(layer_cost_model(c).head, 1.0);
    EXPECT_EQ(pipeline_layer_bounds(c, 4), (std::vector<int>{0, 8, 16, 24, 32}));
    EXPECT_EQ(pipeline_layer_bounds(c, 1), (std::vector<int>{0, 32}));
}

// A head worth several layers: the balanced split has the smallest possible most-expensive
// stage (checked against every split), and the last stage gets fewer layers.
TEST(PipelineBounds, BalancedIsOptimalWithAHeavyHead) {
    ModelConfig c = testing::tp_llama();
    c.num_layers = 9;
    c.vocab_size = 4000;
    const StageCosts k = layer_cost_model(c);
    ASSERT_GT(k.head, 2.0);
    auto max_cost = [&](const std::vector<int>& b) {
        double m = 0;
        for (size_t s = 0; s + 1 < b.size(); ++s) {
            double cost =
                b[s + 1] - b[s] + (s == 0 ? k.embedding : 0.0) + (s + 2 == b.size() ? k.head : 0.0);
            m = std::max(m, cost);
        }
        return m;
    };
    std::vector<int> got = pipeline_layer_bounds(c, 3);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got.front(), 0);
    EXPECT_EQ(got.back(), 9);
    double best = 1e30;
    for (int a = 1; a < 9; ++a)
        for (int b = a + 1; b < 9; ++b) best = std::min(best, max_cost({0, a, b, 9}));
    EXPECT_DOUBLE_EQ(max_cost(got), best);
    EXPECT_LT(got[3] - got[2], got[1] - got[0]);
}

// ---------------------------------------------------------------- split models

using Stages = std::vector<std::unique_ptr<Transformer>>;

Stages make_stages(const ModelConfig& c, Backend& be, const Transformer& whole,
                   const std::vector<int>& b, const std::vector<bool>& plan, int B, int T) {
    Stages st;
    const int p = int(b.size()) - 1;
    for (int s = 0; s < p; ++s) {
        ModelParallel mp;
        mp.stage = s;
        mp.num_stages = p;
        mp.layer_begin = b[size_t(s)];
        mp.layer_end = b[size_t(s) + 1];
        st.push_back(std::make_unique<Transformer>(c, be, mp));
        testing::copy_params(whole.params(), st.back()->params());
        st.back()->setup(B, T, plan, 2);
    }
    return st;
}

// The forward of micro-batch `mb` (in slot mb) through every stage; returns the loss. Stage
// buffers are backend memory: the backend copies them from one stage to the next.
double pipeline_forward(Stages& st, int mb, const Batch& b, float d_scale) {
    double loss = 0;
    for (size_t s = 0; s < st.size(); ++s) {
        loss = st[s]->stage_forward(mb, b.inputs.data(), b.targets.data(), nullptr, d_scale);
        if (s + 1 < st.size())
            st[s]->backend().copy(st[s + 1]->stage_input(mb), st[s]->stage_output(mb));
    }
    return loss;
}

void pipeline_backward(Stages& st, int mb) {
    for (size_t s = st.size(); s-- > 0;) {
        st[s]->stage_backward(mb);
        if (s > 0)
            st[s]->backend().copy(st[s - 1]->stage_output_grad(mb), st[s]->stage_input_grad(mb));
    }
}

// Host copy of `count` gradient elements from `offset`.
std::vector<float> grads_at(const ParamStore& ps, int64_t offset, int64_t count) {
    std::vector<float> h(static_cast<size_t>(count));
    ps.backend().download(h.data(), ps.grads().slice(offset, count).data, h.size() * 4);
    return h;
}

// Checks the grad-ready hook of one model over one backward: ranges descend contiguously over
// the whole buffer (each element once), and each range's values at report time are final.
class HookChecker {
  public:
    explicit HookChecker(Transformer& m) : m_(m) {
        m.set_grad_ready_hook([this](int64_t offset, int64_t count) {
            seen_.push_back({offset, grads_at(m_.params(), offset, count)});
        });
    }
    ~HookChecker() { m_.set_grad_ready_hook({}); }
    void expect_complete(const std::string& what) {
        int64_t next = m_.params().numel();
        for (const auto& [offset, values] : seen_) {
            EXPECT_EQ(offset + int64_t(values.size()), next) << what << ": ranges not descending";
            EXPECT_EQ(values, grads_at(m_.params(), offset, int64_t(values.size())))
                << what << ": the range at " << offset << " changed after it was reported";
            next = offset;
        }
        EXPECT_EQ(next, 0) << what << ": not every gradient was reported";
        seen_.clear();
    }
    void expect_none(const std::string& what) {
        EXPECT_TRUE(seen_.empty()) << what << ": reported gradients without a backward";
        seen_.clear();
    }

  private:
    Transformer& m_;
    std::vector<std::pair<int64_t, std::vector<float>>> seen_;
};

struct SplitCase {
    Arch arch;
    int stages;
    const char* layers;     // parallel.pp_layers
    const char* recompute;  // train.recompute
    const char* backend = "cpu";
};

void PrintTo(const SplitCase& c, std::ostream* os) {
    *os << arch_name(c.arch) << "/" << c.layers << "/" << c.recompute << "/" << c.backend;
}

class PipelineSplit : public ::testing::TestWithParam<SplitCase> {};

// Two micro-batches in flight in slots 0 and 1, in the order F0 F1 B0 B1: the same losses and
// gradients as the unsplit model running them one after the other. Every kernel sees the same
// inputs, so the results are bitwise equal — except a tied embedding, whose element adds its
// head part (one GEMM per micro-batch) and its embedding rows (at most one per token) in another
// association: at most N + 2 summands, N = 44 tokens, within reorder_worst(N + 2) of their
// magnitudes, √N of the tensor's largest as for any gradient (numerics.h): 3.6e-5.
TEST_P(PipelineSplit, MatchesTheUnsplitModel) {
    const SplitCase& p = GetParam();
    ModelConfig c = testing::tp_config(p.arch);
    auto be = make_backend(p.backend);
    const int B = 2, T = 11;
    const std::vector<bool> plan = recompute_plan(p.recompute, c.num_layers);
    std::vector<Batch> mbs{testing::make_batch(B, T, 61, 0), testing::make_batch(B, T, 61, 1)};
    const float d_scale = 0.01f;

    auto whole = testing::make_reference(c, *be);
    whole->setup(B, T, plan);
    double want0 =
        whole->forward_backward(mbs[0].inputs.data(), mbs[0].targets.data(), B, T, d_scale);
    double want1 =
        whole->forward_backward(mbs[1].inputs.data(), mbs[1].targets.data(), B, T, d_scale);

    Stages st =
        make_stages(c, *be, *whole, pipeline_layer_bounds(c, p.stages, p.layers), plan, B, T);
    std::vector<std::unique_ptr<HookChecker>> hooks;
    for (auto& s : st) hooks.push_back(std::make_unique<HookChecker>(*s));
    EXPECT_EQ(pipeline_forward(st, 0, mbs[0], d_scale), want0);
    EXPECT_EQ(pipeline_forward(st, 1, mbs[1], d_scale), want1);
    for (int mb = 0; mb < 2; ++mb) {
        pipeline_backward(st, mb);
        for (size_t s = 0; s < st.size(); ++s)
            hooks[s]->expect_complete(fmt::format("stage {} micro-batch {}", s, mb));
    }

    std::vector<float> global(size_t(whole->params().numel()), 0.0f);
    for (auto& s : st) {
        const ParamStore& ps = s->params();
        testing::add_to_global(testing::rank_grads(ps), whole->params(), global);
        for (int i = 0; i < int(ps.specs().size()); ++i) {
            const ParamSpec& sp = ps.specs()[size_t(i)];
            if (c.tie_word_embeddings &&
                (sp.name == "wte.weight" || sp.name == "model.embed_tokens.weight"))
                continue;
            EXPECT_EQ(ps.download_grad(i),
                      whole->params().download_grad(whole->params().index(sp.name)))
                << sp.name;
        }
    }
    const int64_t N = 2 * B * T;
    testing::expect_grads_match(whole->params(), global,
                                testing::reorder_worst(double(N + 2)) * std::sqrt(double(N)),
                                "pipeline");
}

std::string split_case_name(const ::testing::TestParamInfo<SplitCase>& info) {
    std::string s = arch_name(info.param.arch) + "_" + info.param.layers + "_" +
                    info.param.recompute + "_" + info.param.backend;
    for (char& ch : s)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Models, PipelineSplit,
                         ::testing::Values(SplitCase{Arch::Llama, 2, "2,2", "none"},
                                           SplitCase{Arch::Llama, 3, "1,2,1", "1-2"},
                                           SplitCase{Arch::GPT2, 2, "2,2", "none"},
                                           SplitCase{Arch::GPT2, 3, "1,2,1", "full"},
                                           SplitCase{Arch::Llama, 3, "1,2,1", "1-2", "guarded"},
                                           SplitCase{Arch::GPT2, 2, "2,2", "none", "guarded"},
                                           SplitCase{Arch::Qwen2, 2, "2,2", "1-2"},
                                           SplitCase{Arch::Mistral, 3, "1,2,1", "full"},
                                           SplitCase{Arch::Qwen3, 2, "2,2", "1-2"},
                                           SplitCase{Arch::Gemma2, 2, "2,2", "1-2"},
                                           SplitCase{Arch::Phi3, 3, "1,2,1", "1-2"},
                                           SplitCase{Arch::Gemma3, 3, "1,2,1", "full"}),
                         split_case_name);

// One stage holding everything, tied (the embedding is also the head): still one descending
// pass over the buffer, the embedding (offset 0) last.
TEST(GradReadyHook, WholeTiedModel) {
    ModelConfig c = testing::tp_gpt2();
    auto be = make_backend("cpu");
    auto m = testing::make_reference(c, *be);
    m->setup(2, 11);
    Batch b = testing::make_batch(2, 11, 61);
    HookChecker hook(*m);
    m->forward_backward(b.inputs.data(), b.targets.data(), 2, 11, 0.01f);
    hook.expect_complete("forward_backward");
    m->forward_loss(b.inputs.data(), b.targets.data(), 2, 11);  // no backward: nothing reported
    hook.expect_none("forward_loss");
}

TEST(StageApi, MisuseIsAClearError) {
    ModelConfig c = testing::tp_llama();
    auto be = make_backend("ref");
    auto whole = testing::make_reference(c, *be);
    Stages st = make_stages(c, *be, *whole, {0, 2, 4}, std::vector<bool>(4, false), 1, 5);
    Batch b = testing::make_batch(1, 5, 61);
    EXPECT_EQ(error_of([&] { st[0]->stage_input(0); }),
              "stage_input: stage 0 reads token ids, not an activation");
    EXPECT_EQ(error_of([&] { st[1]->stage_output(0); }),
              "stage_output: the last stage ends in the loss, not an activation");
    EXPECT_EQ(error_of([&] { st[0]->stage_forward(2, b.inputs.data(), nullptr, nullptr, 1); }),
              "stage_forward: slot 2 is outside the 2 slot(s) set up for pipeline stage 0");
    EXPECT_EQ(error_of([&] { st[1]->stage_backward(0); }),
              "stage_backward: slot 0 of stage 1 has no stage_forward with a gradient to finish");
    st[1]->stage_forward(0, nullptr, b.targets.data(), nullptr, 1);
    EXPECT_EQ(error_of([&] { st[1]->stage_forward(0, nullptr, b.targets.data(), nullptr, 1); }),
              "stage_forward: slot 0 of stage 1 still waits for its stage_backward");
    EXPECT_EQ(
        error_of([&] { st[0]->forward_backward(b.inputs.data(), b.targets.data(), 1, 5, 1); }),
        "forward_backward runs the whole model, but this is pipeline stage 0 of 2: use "
        "stage_forward/stage_backward");
    ModelParallel bad;
    bad.stage = 1;
    bad.num_stages = 2;
    bad.layer_begin = 0;
    bad.layer_end = 4;
    EXPECT_EQ(error_of([&] { param_specs(c, bad); }),
              "pipeline stage 1 of 2: layers [0, 4) must start at 0 exactly on the first stage "
              "and end at 4 exactly on the last");
    // Which stage holds what: embeddings on stage 0, the head (or a tied copy) on the last.
    ModelConfig tied = testing::tp_llama(2, true);
    ModelParallel last;
    last.stage = 1;
    last.num_stages = 2;
    last.layer_begin = 2;
    std::vector<ParamSpec> specs = param_specs(tied, last);
    EXPECT_EQ(specs.front().name, "model.layers.2.input_layernorm.weight");
    EXPECT_EQ(specs.back().name, "model.embed_tokens.weight");
    EXPECT_TRUE(specs.back().tied_copy);
    EXPECT_FALSE(param_specs(tied).front().tied_copy);
}

// ---------------------------------------------------------------- tp × pp

// One rank of a tp = 2 × pp = 2 run: what the test needs after the fake world ended.
struct MeshRankOut {
    int stage = 0;
    double loss = 0;
    RankGrads grads;
};

struct MeshCase {
    const char* name;
    ModelConfig cfg;
    const char* recompute;
    const char* backend = "cpu";
};

void PrintTo(const MeshCase& c, std::ostream* os) {
    *os << c.name;
}

// World ranks 0, 1 are stage 0 (tp ranks 0, 1), ranks 2, 3 stage 1; activations and their
// gradients travel between the same tp rank of both stages, F0 F1 B0 B1.
MeshRankOut run_mesh_rank(Communicator& w, const MeshCase& mc, const Transformer& whole,
                          const std::vector<Batch>& mbs, float d_scale, int B, int T) {
    omp_set_num_threads(1);
    const int stage = w.rank() / 2, tr = w.rank() % 2,
              peer = stage == 0 ? w.rank() + 2 : w.rank() - 2;
    std::unique_ptr<Communicator> tp = w.split(stage, tr, fmt::format("tp{}", stage));
    const std::vector<int> b = pipeline_layer_bounds(mc.cfg, 2, "2,2");
    ModelParallel mp{tp.get(), tr, 2, stage, 2, b[size_t(stage)], b[size_t(stage) + 1]};
    auto be = make_backend(mc.backend);
    Transformer m(mc.cfg, *be, mp);
    testing::copy_params(whole.params(), m.params());
    m.setup(B, T, recompute_plan(mc.recompute, mc.cfg.num_layers), 2);
    HookChecker hook(m);
    // Stage buffers are backend memory: the pp transfers go through a device-capable group.
    std::unique_ptr<Communicator> pp = device_communicator(w, *be);
    const size_t n = size_t(B) * T * mc.cfg.hidden_size;
    MeshRankOut o;
    o.stage = stage;
    for (int mb = 0; mb < 2; ++mb) {
        const Batch& x = mbs[size_t(mb)];
        if (stage == 1) pp->recv(m.stage_input(mb).data, n, DType::F32, peer, mb);
        o.loss += m.stage_forward(mb, x.inputs.data(), x.targets.data(), nullptr, d_scale);
        if (stage == 0) pp->send(m.stage_output(mb).data, n, DType::F32, peer, mb);
    }
    for (int mb = 0; mb < 2; ++mb) {
        if (stage == 0) pp->recv(m.stage_output_grad(mb).data, n, DType::F32, peer, 10 + mb);
        m.stage_backward(mb);
        hook.expect_complete(fmt::format("world rank {} micro-batch {}", w.rank(), mb));
        if (stage == 1) pp->send(m.stage_input_grad(mb).data, n, DType::F32, peer, 10 + mb);
    }
    o.grads = testing::rank_grads(m.params());
    return o;
}

class TpTimesPp : public ::testing::TestWithParam<MeshCase> {};

// Losses and gradients equal the whole model's (tp sums in parts, as in tp_test: the layout
// tolerance of parallel_util.h), and with the tied gradients summed, each element counted once
// over the 4 ranks gives the whole model's squared gradient norm.
TEST_P(TpTimesPp, MatchesTheWholeModel) {
    const MeshCase& mc = GetParam();
    auto be = make_backend("cpu");
    const int B = 2, T = 11;
    std::vector<Batch> mbs{testing::make_batch(B, T, 61, 0), testing::make_batch(B, T, 61, 1)};
    const float d_scale = 0.01f;
    auto whole = testing::make_reference(mc.cfg, *be);
    whole->setup(B, T);
    double want = 0;
    for (const Batch& x : mbs)
        want += whole->forward_backward(x.inputs.data(), x.targets.data(), B, T, d_scale);

    std::vector<MeshRankOut> out(4);
    run_fake_world(4, [&](Communicator& w) {
        out[size_t(w.rank())] = run_mesh_rank(w, mc, *whole, mbs, d_scale, B, T);
    });

    const testing::LayoutTolerance tol = testing::layout_tolerance(mc.cfg, T, 2 * B * T);
    EXPECT_NEAR(out[2].loss, want, tol.loss * want);
    EXPECT_EQ(out[3].loss, out[2].loss);
    std::vector<float> global(size_t(whole->params().numel()), 0.0f);
    for (const MeshRankOut& o : out) testing::add_to_global(o.grads, whole->params(), global);
    testing::expect_grads_match(whole->params(), global, tol.grad, "tp x pp");

    // The trainer sums a tied copy's gradient into stage 0's embedding (same tp rank, same
    // layout) before clipping; then counts_in_norm counts every element once.
    for (int tr = 0; tr < 2; ++tr) {
        RankGrads& first = out[size_t(tr)].grads;
        const RankGrads& last = out[size_t(2 + tr)].grads;
        for (size_t i = 0; i < last.specs.size(); ++i) {
            if (!last.specs[i].tied_copy) continue;
            ASSERT_EQ(first.specs[0].name, last.specs[i].name);
            for (int64_t k = 0; k < shape_numel(last.specs[i].shape); ++k)
                first.grads[size_t(first.offsets[0] + k)] +=
                    last.grads[size_t(last.offsets[i] + k)];
        }
    }
    double counted = 0, want_sq = 0;
    for (const MeshRankOut& o : out) {
        for (size_t i = 0; i < o.grads.specs.size(); ++i) {
            if (!o.grads.counted[i]) continue;
            const float* g = o.grads.grads.data() + o.grads.offsets[i];
            for (int64_t k = 0; k < shape_numel(o.grads.specs[i].shape); ++k)
                counted += double(g[k]) * g[k];
        }
    }
    for (float g : whole->params().download_grads()) want_sq += double(g) * g;
    EXPECT_NEAR(counted, want_sq, tol.norm_sq * want_sq);
}

INSTANTIATE_TEST_SUITE_P(
    Models, TpTimesPp,
    ::testing::Values(MeshCase{"llama", testing::tp_llama(2, false), "none"},
                      MeshCase{"llama_tied_recompute1", testing::tp_llama(2, true), "1"},
                      MeshCase{"gpt2_recompute", testing::tp_gpt2(), "full"},
                      // MQA: the kv head replicated on both tp ranks, two micro-batches in flight
                      MeshCase{"llama_mqa_recompute", testing::tp_llama(1, false), "full"},
                      MeshCase{"llama_mqa_guarded", testing::tp_llama(1, false), "1", "guarded"},
                      MeshCase{"gpt2_guarded", testing::tp_gpt2(), "none", "guarded"},
                      MeshCase{"qwen2_recompute", testing::tp_family(Arch::Qwen2), "full"},
                      MeshCase{"mistral", testing::tp_family(Arch::Mistral), "none"},
                      MeshCase{"qwen3_recompute1", testing::tp_family(Arch::Qwen3), "1"},
                      MeshCase{"gemma2", testing::tp_family(Arch::Gemma2), "none"},
                      MeshCase{"phi3_recompute1", testing::tp_family(Arch::Phi3), "1"},
                      MeshCase{"gemma3_recompute", testing::tp_family(Arch::Gemma3), "full"}),
    [](const ::testing::TestParamInfo<MeshCase>& i) { return std::string(i.param.name); });

}  // namespace stage_test
}  // namespace ete
