// tests/model/param_store_test.cpp — the two parameter groups: trainable parameters in one flat
// F32 master + gradient (+ a compute-dtype copy that AdamW keeps equal to the rounded masters),
// frozen ones each in its own buffer with no gradient; and nn::Linear over a frozen weight
// (input gradient, no weight gradient); ZeRO-3's shard, windows and spread frozen base. On the
// guarded backend, so no host access slips in.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "ete/core/rng.h"
#include "ete/model/param_store.h"
#include "ete/nn/linear.h"
#include "ete/optim/adamw.h"
#include "test_util.h"

namespace ete {
namespace {

// A linear layer's table: weight (out, in) and bias, then a norm weight.
std::vector<ParamSpec> linear_table(bool freeze_weight) {
    std::vector<ParamSpec> t(3);
    t[0].name = "w";
    t[0].shape = {5, 7};
    t[0].role = ParamRole::Q;
    t[0].trainable = !freeze_weight;
    t[1].name = "b";
    t[1].shape = {5};
    t[1].kind = ParamKind::Bias;
    t[1].role = ParamRole::QBias;
    t[2].name = "n";
    t[2].shape = {7};
    t[2].kind = ParamKind::Norm;
    t[2].role = ParamRole::AttnNorm;
    return t;
}

std::vector<float> ramp(size_t n, float scale) {
    std::vector<float> v(n);
    CounterRng rng(3, "ramp");
    for (size_t i = 0; i < n; ++i) v[i] = scale * rng.normal(i);
    return v;
}

TEST(ParamGroups, FrozenParametersLiveOutsideTheFlatBuffers) {
    auto be = make_guarded_backend();
    ParamStore ps(linear_table(true), *be, 0, 1, DType::BF16);
    EXPECT_EQ(ps.numel(), 5 + 7);  // bias and norm only
    EXPECT_EQ(ps.offset(0), -1);
    EXPECT_EQ(ps.offset(1), 0);
    EXPECT_EQ(ps.offset(2), 5);
    EXPECT_TRUE(ps.grad(0).empty());  // a frozen weight has no gradient buffer
    EXPECT_FALSE(ps.grad(1).empty());
    EXPECT_FALSE(ps.counts_in_norm(0));
    // A frozen matrix is stored in the compute dtype: reading it back gives the rounded values.
    std::vector<float> w = ramp(35, 0.3f);
    ps.upload(0, w.data());
    EXPECT_EQ(ps.weight(0).dtype, DType::BF16);
    std::vector<float> back = ps.download(0);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(back[i], bf16_to_f32(f32_to_bf16(w[i])));
    // Its norm and bias neighbours stay F32.
    EXPECT_EQ(ps.value(2).dtype, DType::F32);
    EXPECT_EQ(ps.find(ParamRole::AttnNorm), 2);
    EXPECT_EQ(ps.find(ParamRole::Q, 3), -1);
}

TEST(ParamGroups, ComputeCopyFollowsTheMastersThroughAdamW) {
    auto be = make_guarded_backend();
    ParamStore ps(linear_table(false), *be, 0, 1, DType::BF16);
    ps.init(1);
    std::vector<float> w = ramp(35, 0.3f);
    ps.upload(0, w.data());
    std::vector<float> g = ramp(size_t(ps.numel()), 0.01f);
    ps.upload_grads(g.data());
    AdamW opt(ps, *be, AdamWConfig{1e-2, 0.9, 0.95, 1e-8, 0.1});
    opt.step(1e-2);
    std::vector<float> master = ps.download(0);
    EXPECT_NE(master, w);  // it moved
    std::vector<uint16_t> copy(35);
    be->download(copy.data(), ps.weight(0).data, copy.size() * 2);
    for (size_t i = 0; i < copy.size(); ++i)
        ASSERT_EQ(copy[i], f32_to_bf16(master[i])) << "the compute copy is round(master)";
}

// Forward through a frozen weight equals forward through the same trainable weight; backward
// gives the same input gradient and the same bias gradient, and no weight gradient.
TEST(ParamGroups, LinearOverAFrozenWeightPassesGradientsToItsInput) {
    auto be = make_guarded_backend();
    ParamStore frozen(linear_table(true), *be), train(linear_table(false), *be);
    std::vector<float> w = ramp(35, 0.3f), b = ramp(5, 0.1f);
    for (ParamStore* ps : {&frozen, &train}) {
        ps->upload(0, w.data());
        ps->upload(1, b.data());
    }
    const int N = 4;
    testing::DeviceCopy x(*be, ramp(N * 7, 1.0f)), d_y(*be, ramp(N * 5, 0.5f));
    std::vector<std::vector<float>> y_out, dx_out;
    for (ParamStore* ps : {&frozen, &train}) {
        Linear lin({ps->weight(0), {}, ps->grad(0), ps->value(1).flat(), ps->grad(1).flat()});
        testing::DeviceCopy y(*be, std::vector<float>(N * 5)), d_x(*be, std::vector<float>(N * 7));
        lin.forward(*be, y.mat(N, 5), x.mat(N, 7));
        lin.backward(*be, d_x.mat(N, 7), d_y.mat(N, 5), x.mat(N, 7));
        y_out.push_back(y.download<float>());
        dx_out.push_back(d_x.download<float>());
    }
    EXPECT_EQ(y_out[0], y_out[1]);
    EXPECT_EQ(dx_out[0], dx_out[1]);
    EXPECT_EQ(frozen.download_grad(1), train.download_grad(1));  // the bias still learns
    std::vector<float> dw = train.download_grad(0);
    EXPECT_TRUE(std::any_of(dw.begin(), dw.end(), [](float v) { return v != 0.0f; }));
}

// ZeRO-3 (ParamStore::shard): two groups of a bias, a norm and a frozen F32 matrix each, over two
// replicas. Each replica's flat buffers hold its contiguous shard only; every frozen matrix lives
// on exactly one replica (the one with the fewest frozen bytes so far: w on 0, then w2 on 1); the
// layers' views point into the groups' windows; uploads keep only what a replica holds, and a
// download of what it does not hold is refused.
TEST(ParamGroups, ZeroThreeShardsTheFlatBuffersAndSpreadsTheFrozenBase) {
    std::vector<ParamSpec> table = linear_table(true);
    for (ParamSpec s : linear_table(true)) {
        s.name += "2";
        if (s.shape.size() == 2) s.shape[0] = 4;
        if (s.kind == ParamKind::Bias) s.shape = {4};
        table.push_back(s);
    }
    using G = ParamStore::ShardGroup;
    const std::vector<G> groups = {{0, 12, 0, 0, 3}, {12, 11, 1, 3, 6}};  // b n | b2 n2
    const std::vector<float> w = ramp(35, 0.3f), w2 = ramp(28, 0.2f), b = ramp(5, 0.1f);
    size_t frozen_total = 0;
    for (int r = 0; r < 2; ++r) {
        auto be = make_guarded_backend();
        ParamStore ps(table, *be, 0, 1, DType::F32, true, ParamStore::Deferred::All);
        ps.shard(groups, 2, r);
        EXPECT_EQ(ps.flat_begin(), r == 0 ? 0 : 11);
        EXPECT_EQ(ps.flat_end(), r == 0 ? 11 : 23);
        EXPECT_EQ(ps.masters().n, r == 0 ? 11 : 12);
        EXPECT_EQ(ps.master(1).data, ps.window(0).master.data);  // b: first in window 0
        EXPECT_EQ(ps.master(4).data, ps.window(1).master.data);  // b2: first in window 1
        ps.upload(0, w.data());
        ps.upload(3, w2.data());
        ps.upload(1, b.data());
        const std::vector<ParamStore::FrozenPiece> p0 = ps.frozen_pieces(0),
                                                   p1 = ps.frozen_pieces(1);
        ASSERT_EQ(p0.size(), 1u);
        ASSERT_EQ(p1.size(), 1u);
        EXPECT_EQ(p0[0].owner, 0);
        EXPECT_EQ(p1[0].owner, 1);
        EXPECT_EQ(p0[0].bytes, 35 * sizeof(float));
        EXPECT_EQ(p0[0].window, ps.weight(0).data);  // the layer reads the window
        const ParamStore::FrozenPiece& mine = r == 0 ? p0[0] : p1[0];
        const ParamStore::FrozenPiece& other = r == 0 ? p1[0] : p0[0];
        EXPECT_EQ(other.home, nullptr);
        ASSERT_NE(mine.home, nullptr);
        std::vector<float> home(mine.bytes / sizeof(float));
        be->download(home.data(), mine.home, mine.bytes);
        EXPECT_EQ(home, r == 0 ? w : w2);
        frozen_total += mine.bytes;
        EXPECT_THROW(ps.download(0), Error);  // a frozen weight: read through its window only
        if (r == 0) {  // b lies in replica 0's shard: it keeps it; replica 1 holds none of it
            EXPECT_EQ(ps.download(1), b);
        } else {
            EXPECT_THROW(ps.download(1), Error);
        }
    }
    EXPECT_EQ(frozen_total, (35 + 28) * sizeof(float));  // each frozen weight on one replica
    auto be = make_guarded_backend();
    ParamStore ps(table, *be, 0, 1, DType::F32, true, ParamStore::Deferred::All);
    const std::string e = error_of([&] { ps.shard({{0, 12, 0, 0, 3}}, 2, 0); });
    EXPECT_NE(e.find("ZeRO-3: the groups cover 12 of 23 elements, 3 of 6 parameters"),
              std::string::npos)
        << e;
}

// ZeRO-3 gathers in a 16-bit run: the matrices (w, w2) as their bf16 copy, the bias and the norm
// between them as one F32 run; the matrices' F32 masters are not in the window and asking for
// one is refused by name. An F32 run gathers the group as one run.
TEST(ParamGroups, ZeroThreeGathersMatricesInTheComputeDtype) {
    std::vector<ParamSpec> table = linear_table(false);
    table.push_back(table[0]);
    table.back().name = "w2";
    table.back().role = ParamRole::K;
    using R = ParamStore::GatherRun;
    auto runs = [&](DType dt) {
        auto be = make_guarded_backend();
        ParamStore ps(table, *be, 0, 1, dt, true, ParamStore::Deferred::All);
        ps.shard({{0, 82, 0, 0, 4}}, 2, 0);
        std::vector<std::tuple<int64_t, int64_t, bool>> out;
        for (const R& r : ps.gather_runs(0)) out.emplace_back(r.offset, r.count, r.compute);
        if (dt != DType::F32) {
            EXPECT_EQ(ps.master(1).data, ps.window(0).master.slice(35, 5).data);  // the bias
            const std::string e = error_of([&] { ps.master(3); });
            EXPECT_NE(e.find("parameter 'w2': ZeRO-3 gathers its BF16 copy"), std::string::npos)
                << e;
        }
        return out;
    };
    using T = std::tuple<int64_t, int64_t, bool>;
    EXPECT_EQ(runs(DType::BF16), (std::vector<T>{{0, 35, true}, {35, 12, false}, {47, 35, true}}));
    EXPECT_EQ(runs(DType::F32), (std::vector<T>{{0, 82, false}}));
}

}  // namespace
}  // namespace ete
