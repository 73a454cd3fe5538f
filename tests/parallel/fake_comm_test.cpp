// tests/parallel/fake_comm_test.cpp — the Communicator contract on the in-process fake world for
// n = 1..4, and what the fake itself promises: reductions in rank order, a failing rank aborts
// the others, timeouts and missing ranks name op/group/ranks, mismatched collectives are caught.
#include "ete/parallel/fake_comm.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "comm_checks.h"

namespace ete {
namespace {

using CheckFn = void (*)(Communicator&);

class FakeWorldContract : public ::testing::TestWithParam<int> {
  protected:
    static void run(CheckFn check) { run_fake_world(GetParam(), check); }
};

TEST_P(FakeWorldContract, Identity) {
    const int n = GetParam();
    run_fake_world(n, [n](Communicator& w) {
        EXPECT_EQ(w.size(), n);
        EXPECT_EQ(w.name(), "world");
        EXPECT_EQ(w.transport(), "fake");
        EXPECT_EQ(w.timeout(), 60.0);  // a deadlocked test fails instead of hanging
        ASSERT_EQ(int(w.world_ranks().size()), n);
        for (int r = 0; r < n; ++r) EXPECT_EQ(w.world_ranks()[size_t(r)], r);
        // Every rank has a distinct rank: the gathered ranks are 0..n-1 in order.
        std::vector<int32_t> ranks(static_cast<size_t>(n), -1);
        const int32_t mine = w.rank();
        w.all_gather(&mine, ranks.data(), 1, DType::I32);
        for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[size_t(r)], r);
    });
}
TEST_P(FakeWorldContract, ArgumentErrors) {
    run(testing::check_argument_errors);
}
TEST_P(FakeWorldContract, AllReduce) {
    run(testing::check_all_reduce);
}
TEST_P(FakeWorldContract, AllReduceIdenticalOnRanks) {
    run(testing::check_all_reduce_identical_on_ranks);
}
TEST_P(FakeWorldContract, ReduceScatter) {
    run(testing::check_reduce_scatter);
}
TEST_P(FakeWorldContract, AllGather) {
    run(testing::check_all_gather);
}
TEST_P(FakeWorldContract, BroadcastEveryRoot) {
    run(testing::check_broadcast_every_root);
}
TEST_P(FakeWorldContract, SendRecvRing) {
    run(testing::check_send_recv_ring);
}
TEST_P(FakeWorldContract, TagsOutOfOrder) {
    run(testing::check_tags_out_of_order);
}
TEST_P(FakeWorldContract, IsendIrecvAllToAll) {
    run(testing::check_isend_irecv_all_to_all);
}
TEST_P(FakeWorldContract, NonblockingCollectives) {
    run(testing::check_nonblocking_collectives);
}
TEST_P(FakeWorldContract, Split) {
    run(testing::check_split);
}
TEST_P(FakeWorldContract, Barrier) {
    run(testing::check_barrier);
}
TEST_P(FakeWorldContract, CommThreadBesideMainThread) {
    run(testing::check_comm_thread_beside_main_thread);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FakeWorldContract, ::testing::Values(1, 2, 3, 4));

// The documented order: ((x0 + x1) + x2), each step rounded. Any other order gives another answer.
TEST(FakeWorld, ReducesInRankOrder) {
    run_fake_world(3, [](Communicator& w) {
        const float f32_in[3] = {1e8f, -1e8f, 1.0f};
        float f = f32_in[w.rank()];
        w.all_reduce(&f, 1, DType::F32, ReduceOp::Sum);
        EXPECT_EQ(f, 1.0f);  // (1e8 - 1e8) + 1; 1e8 + 1 would round away the 1
        // bf16(256 + 1) ties to even = 256, twice; a single f32 sum would give 258.
        const float bf16_in[3] = {256, 1, 1};
        uint16_t h = f32_to_bf16(bf16_in[w.rank()]);
        w.all_reduce(&h, 1, DType::BF16, ReduceOp::Sum);
        EXPECT_EQ(bf16_to_f32(h), 256.0f);
    });
}

TEST(FakeWorld, TimeoutNamesOpGroupAndRanks) {
    std::atomic<bool> timed_out{false};
    const std::string err = error_of([&] {
        run_fake_world(2, [&](Communicator& w) {
            w.set_timeout(0.5);
            if (w.rank() == 1) {  // never joins, but stays alive until rank 0 gave up
                while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                return;
            }
            float x = 1;
            try {
                w.all_reduce(&x, 1, DType::F32, ReduceOp::Sum);
            } catch (...) {
                timed_out = true;
                throw;
            }
        });
    });
    EXPECT_EQ(err, "[comm] all_reduce on group world (world ranks 0,1) timed out after 0.5 s");
}

TEST(FakeWorld, TimeoutInSubgroupNamesItsWorldRanks) {
    std::atomic<bool> timed_out{false};
    const std::string err = error_of([&] {
        run_fake_world(3, [&](Communicator& w) {
            auto g = w.split(w.rank() == 0 ? -1 : 0, 0, "tp[1,2]");
            if (!g) return;
            g->set_timeout(0.25);
            if (g->rank() == 1) {
                while (!timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(5));
                return;
            }
            int32_t x = 0;
            try {
                g->recv(&x, 1, DType::I32, 1, 7);
            } catch (...) {
                timed_out = true;
                throw;
            }
        });
    });
    EXPECT_EQ(err, "[comm] recv on group tp[1,2] (world ranks 1,2) timed out after 0.25 s");
}

TEST(FakeWorld, FailingRankAbortsBlockedRanks) {
    std::mutex mu;
    std::vector<std::string> others;
    const std::string err = error_of([&] {
        run_fake_world(3, [&](Communicator& w) {
            if (w.rank() == 1) throw Error("rank 1 failed");
            w.set_timeout(30);  // only if the abort did not wake it
            float x = 1;
            const std::string e = error_of([&] { w.all_reduce(&x, 1, DType::F32, ReduceOp::Sum); });
            std::lock_guard lock(mu);
            others.push_back(e);
        });
    });
    EXPECT_EQ(err, "rank 1 failed");
    ASSERT_EQ(others.size(), 2u);
    for (const std::string& e : others) {
        EXPECT_EQ(e,
                  "[comm] all_reduce on group world (world ranks 0,1,2): aborted because "
                  "another rank failed");
    }
}

TEST(FakeWorld, RankThatFinishedWithoutJoiningIsNamed) {
    const std::string coll = error_of([] {
        run_fake_world(2, [](Communicator& w) {
            if (w.rank() == 1) return;
            w.barrier();
        });
    });
    EXPECT_EQ(coll,
              "[comm] barrier on group world (world ranks 0,1): world rank 1 finished "
              "without joining");
    const std::string p2p = error_of([] {
        run_fake_world(2, [](Communicator& w) {
            if (w.rank() == 0) return;
            double x;
            w.recv(&x, 1, DType::F64, 0, 4);
        });
    });
    EXPECT_EQ(p2p,
              "[comm] recv on group world (world ranks 0,1): world rank 0 finished without "
              "sending the message (tag 4)");
}

TEST(FakeWorld, MismatchedCollectivesThrow) {
    const std::string kind = error_of([] {
        run_fake_world(2, [](Communicator& w) {
            float x[7] = {};
            if (w.rank() == 0) w.all_reduce(x, 7, DType::F32, ReduceOp::Sum);
            if (w.rank() == 1) w.broadcast(x, 7, DType::F32, 0);
        });
    });
    EXPECT_NE(kind.find("every rank must call the same collectives in the same order"),
              std::string::npos)
        << kind;
    EXPECT_NE(kind.find("all_reduce(7 x F32, sum)"), std::string::npos) << kind;
    EXPECT_NE(kind.find("broadcast(7 x F32, root 0)"), std::string::npos) << kind;
    const std::string count = error_of([] {
        run_fake_world(2, [](Communicator& w) {
            int64_t x[8] = {};
            w.all_reduce(x, size_t(7 + w.rank()), DType::I64, ReduceOp::Max);
        });
    });
    EXPECT_NE(count.find("all_reduce(7 x I64, max)"), std::string::npos) << count;
    EXPECT_NE(count.find("all_reduce(8 x I64, max)"), std::string::npos) << count;
}

TEST(FakeWorld, RecvOfAnotherSizeThrows) {
    const std::string err = error_of([] {
        run_fake_world(2, [](Communicator& w) {
            float x[4] = {1, 2, 3, 4};
            if (w.rank() == 0) w.send(x, 3, DType::F32, 1, 0);
            if (w.rank() == 1) w.recv(x, 4, DType::F32, 0, 0);
        });
    });
    EXPECT_EQ(err,
              "[comm] recv on group world (world ranks 0,1): expected 4 x F32 from rank 0 tag "
              "0, the message has 3 x F32");
}

TEST(FakeWorld, IrecvCompletesInWaitNotAtTheCall) {
    run_fake_world(2, [](Communicator& w) {
        int32_t x = -1;
        if (w.rank() == 0) {
            const int32_t v = 42;
            w.send(&v, 1, DType::I32, 1, 0);
        }
        w.barrier();  // the message is queued at rank 1 now
        if (w.rank() == 1) {
            Request r = w.irecv(&x, 1, DType::I32, 0, 0);
            EXPECT_EQ(x, -1);
            EXPECT_TRUE(r->test());
            EXPECT_EQ(x, 42);
        }
    });
}

TEST(FakeWorld, BadRankCount) {
    EXPECT_EQ(error_of([] { run_fake_world(0, [](Communicator&) {}); }),
              "run_fake_world: 0 ranks (expected 1..256)");
}

}  // namespace
}  // namespace ete
