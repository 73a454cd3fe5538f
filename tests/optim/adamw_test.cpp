// tests/optim/adamw_test.cpp — ZeRO-1 sharding of AdamW: optimizers that each own one slice of
// the flat parameter buffer (cutting through parameters) update exactly like one optimizer over
// the whole buffer, weight-decay groups included.
#include <gtest/gtest.h>

#include "ete/backend/backend.h"
#include "ete/optim/adamw.h"

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
    for (int64_t i = 0; i < s.numel(); ++i) s.grads()[i] = float((i * 7919) % 97 - 48) * 1e-3f;
}

TEST(AdamWShard, SlicesTogetherEqualTheWholeUpdate) {
    auto be = make_cpu_backend();
    ParamStore whole(param_specs(tiny())), sharded(param_specs(tiny()));
    whole.init(3);
    sharded.init(3);
    const int64_t n = whole.numel();
    AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
    AdamW full(whole, *be, cfg);
    // Three uneven slices whose boundaries fall inside parameters.
    const int64_t cut1 = n / 3 + 5, cut2 = 2 * n / 3 - 3;
    AdamW a(sharded, *be, cfg, 0, cut1), b(sharded, *be, cfg, cut1, cut2),
        c(sharded, *be, cfg, cut2, n);
    EXPECT_EQ(b.exp_avg().numel(), cut2 - cut1);
    for (int step = 0; step < 3; ++step) {
        fill_grads(whole);
        fill_grads(sharded);
        full.step(1e-2);
        for (AdamW* o : {&a, &b, &c}) o->step(1e-2);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sharded.params()[i], whole.params()[i]) << i;
    for (int64_t i = cut1; i < cut2; ++i)
        ASSERT_EQ(b.exp_avg_sq().f32()[i - cut1], full.exp_avg_sq().f32()[i]) << i;
}

TEST(AdamWShard, AnEmptySliceUpdatesNothing) {
    auto be = make_cpu_backend();
    ParamStore s(param_specs(tiny()));
    s.init(1);
    std::vector<float> before(s.params(), s.params() + s.numel());
    fill_grads(s);
    AdamW none(s, *be, AdamWConfig{}, 10, 10);
    none.step(1.0);
    for (int64_t i = 0; i < s.numel(); ++i) ASSERT_EQ(s.params()[i], before[size_t(i)]);
}

}  // namespace
}  // namespace ete
