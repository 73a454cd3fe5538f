// tests/parallel/zero_test.cpp — ZeRO's shards (parallel/zero.h) on the in-process fake world:
// the shards partition the buffer; the in-place gather restores every element on every replica,
// on host memory and through the staged device transport over memory the host cannot touch; and
// GradSync's ZeRO-2 mode leaves each owner exactly what the all-reduce gives, f32 and bf16.
#include "ete/parallel/zero.h"

#include <gtest/gtest.h>

#include <vector>

#include "ete/backend/backend.h"
#include "ete/parallel/device_comm.h"
#include "ete/parallel/fake_comm.h"
#include "ete/parallel/grad_sync.h"
#include "test_util.h"

namespace ete {
namespace zero_test {

const int64_t kSizes[] = {0, 1, 3, 7, 64, 1031};

TEST(ZeroShard, ShardsPartitionTheBufferInEqualBlocksAndATail) {
    for (int64_t n : kSizes)
        for (int dp = 1; dp <= 5; ++dp) {
            int64_t next = 0;
            for (int r = 0; r < dp; ++r) {
                const ShardRange s = zero_shard(n, dp, r);
                EXPECT_EQ(s.begin, next) << n << " over " << dp << ", replica " << r;
                EXPECT_EQ(s.size(), r == dp - 1 ? n - (dp - 1) * (n / dp) : n / dp);
                next = s.end;
            }
            EXPECT_EQ(next, n) << n << " over " << dp;
        }
    EXPECT_NE(error_of([] { zero_shard(10, 2, 2); }).find("replica 2"), std::string::npos);
}

float value(size_t i) {
    return 0.5f + float(i % 101);
}

class ZeroFake : public ::testing::TestWithParam<int> {};

// Each replica holds only its own shard (the rest a sentinel); the gather restores the whole.
TEST_P(ZeroFake, AllGatherRestoresEveryShardOnEveryReplica) {
    run_fake_world(GetParam(), [](Communicator& w) {
        for (int64_t n : kSizes) {
            const ShardRange s = zero_shard(n, w.size(), w.rank());
            std::vector<float> buf(size_t(n), -7.0f);
            for (int64_t i = s.begin; i < s.end; ++i) buf[size_t(i)] = value(size_t(i));
            zero_all_gather(w, buf.data(), n, DType::F32);
            for (size_t i = 0; i < buf.size(); ++i)
                ASSERT_EQ(buf[i], value(i)) << "n " << n << " element " << i;
        }
    });
}

TEST_P(ZeroFake, AllGatherThroughTheStagedDeviceTransport) {
    run_fake_world(GetParam(), [](Communicator& w) {
        auto be = make_guarded_backend();
        std::unique_ptr<Communicator> dev = device_communicator(w, *be);
        const int64_t n = 1031;
        const ShardRange s = zero_shard(n, w.size(), w.rank());
        std::vector<float> host(size_t(n), -7.0f);
        for (int64_t i = s.begin; i < s.end; ++i) host[size_t(i)] = value(size_t(i));
        DeviceBuffer buf(*be, size_t(n) * sizeof(float));
        be->upload(buf.data(), host.data(), host.size() * sizeof(float));
        zero_all_gather(*dev, buf.data(), n, DType::F32);
        be->download(host.data(), buf.data(), host.size() * sizeof(float));
        for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], value(i)) << "element " << i;
    });
}

// Rank r's gradient with a full mantissa: sums round, so equality means the same operations.
float grad(int rank, size_t i) {
    uint64_t x = uint64_t(rank) * 0x9E3779B97F4A7C15ULL + i + 1;
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ULL;
    return float(x >> 40) / float(1 << 24) - 0.5f;
}

// Buckets of 32 that straddle the shard boundaries and a "whole" range in the middle: each
// replica's shard, and the whole range on every replica, equal the all-reduce's result bit for
// bit (f32 and the bf16 transport).
TEST_P(ZeroFake, Zero2GradSyncLeavesEachOwnerTheAllReducedShard) {
    run_fake_world(GetParam(), [](Communicator& w) {
        const size_t n = 1031, whole0 = 500, whole1 = 590;
        for (bool bf16 : {false, true}) {
            GradSyncOptions opt;
            opt.bucket_bytes = 32 * sizeof(float);
            opt.bf16 = bf16;
            GradOwners own;
            for (int r = 0; r < w.size(); ++r)
                own.owners.push_back(size_t(zero_shard(int64_t(n), w.size(), r).begin));
            own.owners.push_back(n);
            own.whole_offset = whole0;
            own.whole_count = whole1 - whole0;
            std::vector<float> a(n), b(n);
            for (size_t i = 0; i < n; ++i) a[i] = b[i] = grad(w.rank(), i);
            GradSync sa(w, nullptr, a.data(), n, opt), sb(w, nullptr, b.data(), n, opt);
            sb.set_owners(own);
            for (GradSync* s : {&sa, &sb}) {
                s->begin();
                s->finish();
            }
            const ShardRange mine = zero_shard(int64_t(n), w.size(), w.rank());
            for (size_t i = 0; i < n; ++i) {
                const bool own_i = int64_t(i) >= mine.begin && int64_t(i) < mine.end;
                if (!own_i && (i < whole0 || i >= whole1)) continue;
                ASSERT_EQ(a[i], b[i]) << "bf16 " << bf16 << " element " << i;
            }
        }
    });
}

TEST(ZeroGradSync, OwnersMustCoverTheBuffer) {
    run_fake_world(2, [](Communicator& w) {
        std::vector<float> g(10);
        GradSync s(w, nullptr, g.data(), g.size());
        GradOwners o;
        o.owners = {0, 5};
        EXPECT_NE(error_of([&] {
                      s.set_owners(o);
                  }).find("2 owner offsets (expected none, or 3 increasing from 0 to 10)"),
                  std::string::npos);
        o.owners = {0, 6, 10};
        o.whole_offset = 8;
        o.whole_count = 3;
        EXPECT_NE(
            error_of([&] { s.set_owners(o); }).find("whole range [8, 11) past the 10 gradients"),
            std::string::npos);
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroFake, ::testing::Range(1, 5));

}  // namespace zero_test
}  // namespace ete
