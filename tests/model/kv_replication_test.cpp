// tests/model/kv_replication_test.cpp — GQA key/value heads replicated over tensor-parallel
// ranks when tp > num_kv_heads: which slice each rank holds and who owns it (by hand), and that
// the grad-ready hook only reports k|v gradients already summed over their holders. Parity with
// the tp = 1 model lives in tp_test.cpp (KvReplicated cases) and stage_test.cpp (tp × pp, MQA).
#include <gtest/gtest.h>
#include <omp.h>

#include "ete/parallel/fake_comm.h"
#include "parallel_util.h"
#include "test_util.h"

namespace ete {
namespace {

const ParamSpec& spec_named(const std::vector<ParamSpec>& specs, const std::string& name) {
    for (const ParamSpec& s : specs)
        if (s.name == name) return s;
    throw Error("no parameter " + name);
}

// Global values 1..n, so a local element names the global element it came from.
std::vector<float> local_of(const ParamSpec& s, int rank, int tp) {
    std::vector<float> g(size_t(shape_numel(s.global_shape)));
    for (size_t k = 0; k < g.size(); ++k) g[k] = float(k + 1);
    std::vector<float> l(size_t(shape_numel(s.shape)), -1.0f);
    shard_from_global(s, rank, tp, g.data(), l.data());
    return l;
}

// H 8, KV 2, D 6, C 48. At tp 4 ranks 0-1 hold kv head 0 (k rows 0-5), ranks 2-3 kv head 1
// (rows 6-11), and own them on ranks 0 and 2; at tp 8 four ranks share each head. Query heads
// stay split (two per rank at tp 4), and at tp 2 the kv heads split as before.
TEST(KvReplication, SlicesAndOwnersByHand) {
    const ModelConfig c = testing::tp_llama(2);
    const int64_t D = 6, C = 48;
    const std::string k = "model.layers.1.self_attn.k_proj.",
                      q = "model.layers.1.self_attn.q_proj.";
    for (int tp : {2, 4, 8}) {
        const int holders = tp > 2 ? tp / 2 : 1;
        for (int r = 0; r < tp; ++r) {
            std::vector<ParamSpec> specs = param_specs(c, ModelParallel{nullptr, r, tp});
            const ParamSpec& kw = spec_named(specs, k + "weight");
            const ParamSpec& kb = spec_named(specs, k + "bias");
            const int64_t head = tp == 2 ? r : r / holders;
            EXPECT_EQ(kw.shape, (Shape{D, C})) << "tp " << tp;
            std::vector<float> w = local_of(kw, r, tp), b = local_of(kb, r, tp);
            EXPECT_EQ(w.front(), float(head * D * C + 1)) << "tp " << tp << " rank " << r;
            EXPECT_EQ(w.back(), float((head + 1) * D * C)) << "tp " << tp << " rank " << r;
            for (int64_t i = 0; i < D; ++i) EXPECT_EQ(b[size_t(i)], float(head * D + i + 1));
            EXPECT_EQ(spec_named(specs, q + "weight").shape, (Shape{8 / tp * D, C}));
            ParamTable store(specs, r, tp);
            EXPECT_EQ(store.counts_in_norm(store.index(k + "weight")), r % holders == 0)
                << "tp " << tp << " rank " << r;
            EXPECT_TRUE(store.counts_in_norm(store.index(q + "weight")));
        }
    }
}

// Every range the hook reports is final for the micro-batch: in particular the k|v rows, which
// are summed over the kv group inside the layer's backward, do not change after the report. Two
// micro-batches, so the second one sums only its own contribution into the accumulated value.
class KvReplication : public ::testing::TestWithParam<const char*> {};

std::vector<float> grads_at(const ParamStore& ps, int64_t offset, int64_t count) {
    std::vector<float> h(static_cast<size_t>(count));
    ps.backend().download(h.data(), ps.grads().slice(offset, count).data, h.size() * 4);
    return h;
}

TEST_P(KvReplication, GradReadyHookReportsSummedKvGradients) {
    ModelConfig c = testing::tp_llama(2);
    c.num_heads = 4;  // tp 4: one query head per rank, each kv head on 2 ranks
    auto be = make_backend("cpu");
    auto whole = testing::make_reference(c, *be);
    const int B = 2, T = 7;
    std::vector<testing::Batch> mbs{testing::make_batch(B, T, c.vocab_size, 0),
                                    testing::make_batch(B, T, c.vocab_size, 1)};
    std::vector<std::vector<float>> kv(4);  // each rank's final layer-0 k_proj gradient
    run_fake_world(4, [&](Communicator& w) {
        omp_set_num_threads(1);
        auto rb = make_backend(GetParam());
        Transformer m(c, *rb, ModelParallel{&w, w.rank(), 4});
        testing::copy_params(whole->params(), m.params());
        m.setup(B, T);
        std::vector<std::pair<int64_t, std::vector<float>>> seen;
        m.set_grad_ready_hook([&](int64_t offset, int64_t count) {
            seen.push_back({offset, grads_at(m.params(), offset, count)});
        });
        for (const testing::Batch& x : mbs) {
            seen.clear();
            m.forward_backward(x.inputs.data(), x.targets.data(), B, T, 0.01f);
            ASSERT_FALSE(seen.empty());
            for (const auto& [offset, values] : seen) {
                EXPECT_EQ(values, grads_at(m.params(), offset, int64_t(values.size())))
                    << "rank " << w.rank() << ": the range at " << offset << " changed later";
            }
        }
        const int i = m.params().index("model.layers.0.self_attn.k_proj.weight");
        kv[size_t(w.rank())] = m.params().download_grad(i);
    });
    EXPECT_EQ(kv[0], kv[1]);
    EXPECT_EQ(kv[2], kv[3]);
    EXPECT_NE(kv[0], kv[2]);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvReplication, ::testing::Values("cpu", "guarded"));

}  // namespace
}  // namespace ete
