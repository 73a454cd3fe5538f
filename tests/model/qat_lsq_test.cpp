// tests/model/qat_lsq_test.cpp — QAT's learned scale factors (qat.learnable_scale) inside the
// model: their gradient after one step's backward is LSQ's, computed from the step's gradient of
// fq(W) (checked against the op on the whole model), and tensor parallelism gives every factor
// the gradient the one-process model gives it — sharded with a column-parallel weight's rows,
// summed over tp for a row-parallel channel and for a whole tensor, a kv head held by two ranks
// counted once.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "ete/parallel/fake_comm.h"
#include "parallel_util.h"
#include "test_util.h"

namespace ete {
namespace {

QatSpec lsq_spec(QatGranularity g) {
    QatSpec q;
    q.enabled = true;
    q.points = {QatPoint::Weight};  // weights only: the activations carry no grid noise
    q.weight_bits = 4;
    q.weight_granularity = g;
    q.learnable_scale = true;
    return q;
}

// Two micro-batches' backward, then the QAT step's finish (factor gradients, masks).
testing::RankGrads step_grads(Transformer& m, const std::vector<testing::Batch>& batches, int B,
                              int T) {
    m.setup(B, T);
    m.qat()->begin_step(0);
    for (const auto& b : batches)
        m.forward_backward(b.inputs.data(), b.targets.data(), B, T, 1.0f / float(B * T));
    m.qat()->finish_grads();
    return testing::rank_grads(m.params());
}

std::unique_ptr<Transformer> lsq_model(const ModelConfig& c, Backend& be, const QatSpec& q,
                                       const ModelParallel& mp = {}) {
    auto m = std::make_unique<Transformer>(c, be, mp, DType::F32, LoraSpec{}, q);
    m->enable_qat(q);
    return m;
}

class QatLsq : public ::testing::TestWithParam<std::pair<QatGranularity, int>> {};

TEST_P(QatLsq, FactorGradientsMatchAcrossTensorParallelism) {
    const auto [gran, tp] = GetParam();
    const ModelConfig c = testing::tp_llama(2);  // tp = 4: each kv head on two ranks
    const QatSpec q = lsq_spec(gran);
    const int B = 2, T = 11;
    std::vector<testing::Batch> batches;
    for (int mb = 0; mb < 2; ++mb) batches.push_back(testing::make_batch(B, T, c.vocab_size, mb));
    auto be = make_cpu_backend();
    // The whole model, from the reference's weights, the factors at 1 (their init).
    auto ref = testing::make_reference(c, *be);
    auto whole = lsq_model(c, *be, q);
    ParamStore& ps = whole->params();
    for (int i = 0; i < ps.size(); ++i) {
        const std::string& name = ps.specs()[size_t(i)].name;
        const bool factor = !ref->params().has(name);
        const std::vector<float> v = factor ? std::vector<float>(size_t(ps.numel(i)), 1.0f)
                                            : ref->params().download(ref->params().index(name));
        ps.upload(i, v.data());
    }
    const testing::RankGrads want = step_grads(*whole, batches, B, T);
    // Each factor's gradient on one process: LSQ's slope summed against d(fq(W)), times
    // 1/√(elements · qmax) and the range's scale — nonzero, and the scales' count as expected.
    int factors = 0;
    for (size_t i = 0; i < want.specs.size(); ++i) {
        if (want.specs[i].role != ParamRole::QatScale) continue;
        ++factors;
        const float* g = want.grads.data() + want.offsets[i];
        double sq = 0;
        for (int64_t k = 0; k < shape_numel(want.specs[i].shape); ++k) sq += double(g[k]) * g[k];
        EXPECT_GT(sq, 0.0) << want.specs[i].name;
    }
    EXPECT_EQ(factors, 7 * c.num_layers);

    std::vector<testing::RankGrads> got(static_cast<size_t>(tp));
    run_fake_world(tp, [&](Communicator& w) {
        omp_set_num_threads(1);
        auto rbe = make_cpu_backend();
        auto m = lsq_model(c, *rbe, q, ModelParallel{&w, w.rank(), tp});
        testing::copy_params(whole->params(), m->params());
        got[size_t(w.rank())] = step_grads(*m, batches, B, T);
    });
    std::vector<float> global(size_t(whole->params().numel()), 0.0f);
    for (const testing::RankGrads& r : got) testing::add_to_global(r, whole->params(), global);
    // The weights: the layout tolerance (parallel_util.h, 2.5e-4). A factor's gradient sums
    // LSQ's slopes (of both signs) times the gradients of the M weights it scales, each a sum
    // over the N tokens: M·N terms that cancel to ~1/√(M·N) of their magnitudes, one more
    // reduction of M at the end of the chain: reorder_prob(n + M)·√(M·N), 1.8e-3 for a channel
    // (M = 48) and 1.6e-2 for a whole q_proj (M = 2304). A missed or doubled sum over tp, or a kv
    // head counted twice, is off by the whole gradient.
    const int64_t N = 2 * B * T;
    const testing::LayoutTolerance tol = testing::layout_tolerance(c, T, N);
    const double n = testing::model_chain(c, T, N);
    const ParamStore& wp = whole->params();
    testing::expect_grads_match(wp, global, tol.grad, "lsq tp", [&](const ParamSpec& s) {
        if (s.role != ParamRole::QatScale) return tol.grad;
        const double M =
            double(wp.numel(wp.find(s.lora_base, s.layer))) / double(shape_numel(s.shape));
        return testing::reorder_prob(n + M) * std::sqrt(M * double(N));
    });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, QatLsq,
    ::testing::Values(std::pair{QatGranularity::Channel, 2}, std::pair{QatGranularity::Tensor, 2},
                      std::pair{QatGranularity::Channel, 4}, std::pair{QatGranularity::Tensor, 4}),
    [](const auto& info) {
        return qat_granularity_name(info.param.first) + "_tp" + std::to_string(info.param.second);
    });

}  // namespace
}  // namespace ete
