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
    // 1e-3: a factor's gradient sums slopes of both signs (|slope| <= 1/2) against weight
    // gradients that tp sums in other orders, so its error relative to the largest factor
    // gradient is the weight gradients' (1e-5) times that cancellation (measured 2e-4 at most,
    // the others 1e-5). A missed or doubled sum over tp is off by the whole gradient.
    testing::expect_grads_match(whole->params(), global, 1e-3, "lsq tp");
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
