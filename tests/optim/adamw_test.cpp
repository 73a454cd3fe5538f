// tests/optim/adamw_test.cpp — ZeRO-1 sharding of AdamW: optimizers that each own one slice of
// the flat parameter buffer (cutting through parameters) update exactly like one optimizer over
// the whole buffer, weight-decay groups included.
#include <gtest/gtest.h>

#include "ete/backend/backend.h"
#include "ete/optim/adamw.h"
#include "test_util.h"

namespace ete {
namespace {

ModelConfig tiny() {
    ModelConfig c;
    c.vocab_size = 13;
    c.hidden_size = 8;
    c.intermediate_size = 12;
    c.num_layers = 2;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.max_position_embeddings = 8;
    return c;
}

void fill_grads(ParamStore& s) {
    std::vector<float> g(size_t(s.numel()));
    for (int64_t i = 0; i < s.numel(); ++i) g[size_t(i)] = float((i * 7919) % 97 - 48) * 1e-3f;
    s.upload_grads(g.data());
}

class AdamWShard : public ::testing::TestWithParam<const char*> {};

TEST_P(AdamWShard, SlicesTogetherEqualTheWholeUpdate) {
    auto be = make_backend(GetParam());
    ParamStore whole(param_specs(tiny()), *be), sharded(param_specs(tiny()), *be);
    whole.init(3);
    sharded.init(3);
    const int64_t n = whole.numel();
    AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
    AdamW full(whole, *be, cfg);
    // Three uneven slices whose boundaries fall inside parameters.
    const int64_t cut1 = n / 3 + 5, cut2 = 2 * n / 3 - 3;
    AdamW a(sharded, *be, cfg, 0, cut1), b(sharded, *be, cfg, cut1, cut2),
        c(sharded, *be, cfg, cut2, n);
    EXPECT_EQ(b.exp_avg().n, cut2 - cut1);
    for (int step = 0; step < 3; ++step) {
        fill_grads(whole);
        fill_grads(sharded);
        full.step(1e-2);
        for (AdamW* o : {&a, &b, &c}) o->step(1e-2);
    }
    EXPECT_EQ(sharded.to_host().data_vector(), whole.to_host().data_vector());
    std::vector<float> part = b.download_state(1), all = full.download_state(1);
    for (int64_t i = cut1; i < cut2; ++i) ASSERT_EQ(part[size_t(i - cut1)], all[size_t(i)]) << i;
}

TEST_P(AdamWShard, AnEmptySliceUpdatesNothing) {
    auto be = make_backend(GetParam());
    ParamStore s(param_specs(tiny()), *be);
    s.init(1);
    std::vector<float> before = s.to_host().data_vector();
    fill_grads(s);
    AdamW none(s, *be, AdamWConfig{}, 10, 10);
    none.step(1.0);
    EXPECT_EQ(s.to_host().data_vector(), before);
}

// Clipping folded into the update (AdamW reads g · c) is bit-identical to scaling the gradients
// first and then stepping, as torch's clip_grad_norm_ + AdamW do.
TEST_P(AdamWShard, FoldedGradScaleEqualsAScalingPass) {
    auto be = make_backend(GetParam());
    ParamStore a(param_specs(tiny()), *be), b(param_specs(tiny()), *be);
    a.init(2);
    b.init(2);
    AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
    AdamW oa(a, *be, cfg), ob(b, *be, cfg);
    const float c = 0.3137f;
    for (int step = 0; step < 3; ++step) {
        fill_grads(a);
        fill_grads(b);
        be->scale(a.grads(), c);
        oa.step(1e-2);
        ob.step(1e-2, c);
    }
    EXPECT_EQ(a.to_host().data_vector(), b.to_host().data_vector());
    EXPECT_EQ(oa.download_state(1), ob.download_state(1));
}

// The end of training frees the moments and the gradients (the final save needs the memory);
// anything that would read them afterwards is an error, not a read of freed memory.
TEST(AdamWRelease, ReleasedStateRefusesToBeUsed) {
    auto be = make_cpu_backend();
    ParamStore s(param_specs(tiny()), *be);
    s.init(1);
    fill_grads(s);
    AdamW opt(s, *be, AdamWConfig{});
    opt.step(1e-3);
    opt.release_state();
    s.release_grads();
    EXPECT_TRUE(s.grads_released());
    EXPECT_EQ(error_of([&] { opt.step(1e-3); }),
              "AdamW: the optimizer state was released (training is over)");
    EXPECT_EQ(error_of([&] { opt.download_state(0); }),
              "AdamW: the optimizer state was released (training is over)");
    EXPECT_EQ(error_of([&] { s.zero_grads(); }),
              "zero_grads: the gradients were released (training is over)");
    EXPECT_FALSE(s.to_host().data_vector().empty());  // the weights themselves stay
}

INSTANTIATE_TEST_SUITE_P(Backends, AdamWShard, ::testing::Values("cpu", "guarded", "ref"));

}  // namespace
}  // namespace ete
