// tests/data/loader_test.cpp — window layout, validation split, deterministic shuffles, resume.
//
// The shard holds token i = i, so every id in a batch names its own position in the shard.
#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <numeric>
#include <set>

#include "ete/core/error.h"
#include "ete/data/loader.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("ete_loader_test_" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // A shard of n tokens with token i = i.
    TokenShard make_shard(uint64_t n, const std::string& name = "s.tok") {
        std::vector<int32_t> ids(n);
        for (uint64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
        const std::string path = (dir_ / name).string();
        write_token_shard(path, ids, 0);
        return TokenShard(path);
    }

    fs::path dir_;
};

TEST_F(LoaderTest, TrainingWindowsTileTheShard) {
    TokenShard shard = make_shard(1000);
    const int T = 16;
    BatchSampler s(shard, T, 0.0, 7);
    ASSERT_EQ(s.num_train_windows(), 62u);  // floor((1000 - 1) / 16)
    const int W = 62;
    std::vector<int32_t> in(W * T), tg(W * T);
    s.fill_batch(0, W, in.data(), tg.data());  // exactly one epoch
    std::vector<int32_t> starts;
    for (int r = 0; r < W; ++r) {
        for (int j = 0; j < T; ++j) {
            EXPECT_EQ(in[r * T + j], in[r * T] + j);
            EXPECT_EQ(tg[r * T + j], in[r * T + j] + 1);  // targets are inputs shifted by one
        }
        starts.push_back(in[r * T]);
    }
    std::sort(starts.begin(), starts.end());
    for (int w = 0; w < W; ++w) EXPECT_EQ(starts[w], w * T);  // inputs tile [0, W*T) once each
}

TEST_F(LoaderTest, ValidationNeverTouchesTrainingTokens) {
    TokenShard shard = make_shard(1000);
    const int T = 16;
    BatchSampler s(shard, T, 0.1, 7);
    // W = floor((1000 - 2) / 16) = 62, V = ceil(6.2) = 7, Wt = 55.
    ASSERT_EQ(s.num_val_windows(), 7u);
    ASSERT_EQ(s.num_train_windows(), 55u);
    std::set<int32_t> train_tokens, val_tokens;
    std::vector<int32_t> in(T), tg(T);
    for (uint64_t g = 0; g < 55; ++g) {
        s.fill_batch(g, 1, in.data(), tg.data());
        train_tokens.insert(in.begin(), in.end());
        train_tokens.insert(tg.begin(), tg.end());
    }
    EXPECT_EQ(train_tokens.size(), 55u * T + 1);
    for (int v = 0; v < 7; ++v) {
        s.fill_val_batch(v, 1, in.data(), tg.data());
        EXPECT_EQ(in[0], static_cast<int32_t>(s.val_window_start(v)));
        EXPECT_EQ(tg[T - 1], in[0] + T);
        val_tokens.insert(in.begin(), in.end());
        val_tokens.insert(tg.begin(), tg.end());
    }
    for (int32_t t : val_tokens) EXPECT_EQ(train_tokens.count(t), 0u) << t;
    EXPECT_LT(*val_tokens.rbegin(), 1000);
    // Validation batches cycle: window V-1 is followed by window 0.
    std::vector<int32_t> in2(2 * T), tg2(2 * T);
    s.fill_val_batch(6, 2, in2.data(), tg2.data());
    EXPECT_EQ(in2[0], static_cast<int32_t>(s.val_window_start(6)));
    EXPECT_EQ(in2[T], static_cast<int32_t>(s.val_window_start(0)));
}

TEST_F(LoaderTest, OrderDependsOnlyOnSeedAndEpoch) {
    TokenShard shard = make_shard(5000);
    BatchSampler a(shard, 8, 0.0, 123), b(shard, 8, 0.0, 123), c(shard, 8, 0.0, 124);
    const uint64_t W = a.num_train_windows();
    std::vector<uint64_t> e0 = a.epoch_order(0), e1 = a.epoch_order(1);
    EXPECT_EQ(e0, b.epoch_order(0));
    EXPECT_NE(e0, e1);
    EXPECT_NE(e0, c.epoch_order(0));
    std::vector<uint64_t> sorted = e1;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t w = 0; w < W; ++w) ASSERT_EQ(sorted[w], w);  // a permutation
    std::vector<uint64_t> identity(W);
    std::iota(identity.begin(), identity.end(), uint64_t{0});
    EXPECT_NE(e0, identity);
    for (uint64_t i = 0; i < W; ++i) EXPECT_EQ(a.sample(W + i), e1[i]);  // epoch = g / W
}

TEST_F(LoaderTest, ResumingAtAnyIndexGivesTheSameBatches) {
    TokenShard shard = make_shard(3000);
    const int T = 32, B = 8, steps = 30;  // 93 windows: the run crosses two epoch boundaries
    BatchSampler full(shard, T, 0.05, 99);
    std::vector<std::vector<int32_t>> inputs(steps, std::vector<int32_t>(B * T));
    std::vector<int32_t> tg(B * T);
    for (int st = 0; st < steps; ++st) {
        full.fill_batch(static_cast<uint64_t>(st) * B, B, inputs[st].data(), tg.data());
    }
    const int k = 13;
    BatchSampler resumed(shard, T, 0.05, 99);
    std::vector<int32_t> in(B * T);
    for (int st = k; st < steps; ++st) {
        resumed.fill_batch(static_cast<uint64_t>(st) * B, B, in.data(), tg.data());
        EXPECT_EQ(in, inputs[st]) << "step " << st;
    }
}

TEST_F(LoaderTest, ReplicasTakeDisjointSlicesOfAnEpoch) {
    TokenShard shard = make_shard(2000);
    const int T = 10, R = 2, B = 3;
    BatchSampler r0(shard, T, 0.0, 5), r1(shard, T, 0.0, 5);
    const uint64_t W = r0.num_train_windows();  // 199
    std::set<uint64_t> seen;
    for (uint64_t step = 0; (step + 1) * R * B <= W; ++step) {
        for (int i = 0; i < B; ++i) {
            EXPECT_TRUE(seen.insert(r0.sample((step * R + 0) * B + i)).second);
            EXPECT_TRUE(seen.insert(r1.sample((step * R + 1) * B + i)).second);
        }
    }
    EXPECT_EQ(seen.size(), W / (R * B) * R * B);
}

TEST_F(LoaderTest, ClearErrors) {
    TokenShard shard = make_shard(16, "small.tok");
    std::string e = error_of([&] { BatchSampler s(shard, 0, 0.0, 1); });
    EXPECT_NE(e.find("seq_len is 0"), std::string::npos) << e;
    e = error_of([&] { BatchSampler s(shard, 16, 0.0, 1); });
    EXPECT_NE(e.find("has 16 tokens, expected at least seq_len + 1 = 17"), std::string::npos) << e;
    EXPECT_NE(e.find("small.tok"), std::string::npos) << e;
    BatchSampler ok(shard, 15, 0.0, 1);  // exactly one window
    EXPECT_EQ(ok.num_train_windows(), 1u);
    e = error_of([&] { BatchSampler s(shard, 8, 0.5, 1); });  // 1 window: none left to train
    EXPECT_NE(e.find("leaves no training window"), std::string::npos) << e;
    e = error_of([&] { BatchSampler s(shard, 4, 1.0, 1); });
    EXPECT_NE(e.find("expected in [0, 1)"), std::string::npos) << e;
    e = error_of([&] {
        std::vector<int32_t> in(4), tg(4);
        ok.fill_val_batch(0, 1, in.data(), tg.data());
    });
    EXPECT_NE(e.find("no validation windows"), std::string::npos) << e;
}

}  // namespace
}  // namespace ete
