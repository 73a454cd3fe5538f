// tests/parallel/mpi/mpi_comm_test.cpp — the Communicator contract over real MPI processes (run
// under mpirun with np 2, 3 and 4), on the world and on a split group; the thread level; that
// world communicators are independent; and, in its own mpirun, a timeout naming op/group/ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include "../comm_checks.h"
#include "ete/parallel/mpi_comm.h"
#include "mpi_test_env.h"

namespace ete::testing {

bool g_mpi_left_unusable = false;

Communicator& mpi_world() {
    static std::unique_ptr<Communicator> world = mpi_world_communicator();
    return *world;
}

namespace {

TEST(MpiComm, Identity) {
    Communicator& w = mpi_world();
    int rank = -1, size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    EXPECT_EQ(w.rank(), rank);
    EXPECT_EQ(w.size(), size);
    EXPECT_GE(size, 2) << "run under mpirun -np 2..4";
    EXPECT_EQ(w.name(), "world");
    EXPECT_EQ(w.transport(), "mpi");
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    EXPECT_EQ(w.world_ranks(), ranks);
    EXPECT_EQ(w.timeout(), 0.0);
    // The data-parallel comm thread calls MPI beside the main thread.
    EXPECT_EQ(mpi_thread_level(), MPI_THREAD_MULTIPLE);
}

TEST(MpiComm, ArgumentErrors) {
    check_argument_errors(mpi_world());
}
TEST(MpiComm, AllReduce) {
    check_all_reduce(mpi_world());
}
TEST(MpiComm, AllReduceIdenticalOnRanks) {
    check_all_reduce_identical_on_ranks(mpi_world());
}
TEST(MpiComm, ReduceScatter) {
    check_reduce_scatter(mpi_world());
}
TEST(MpiComm, AllGather) {
    check_all_gather(mpi_world());
}
TEST(MpiComm, AllGatherInPlace) {
    check_all_gather_in_place(mpi_world());
}
TEST(MpiComm, ReduceEveryRoot) {
    check_reduce_every_root(mpi_world());
}
TEST(MpiComm, BroadcastEveryRoot) {
    check_broadcast_every_root(mpi_world());
}
TEST(MpiComm, SendRecvRing) {
    check_send_recv_ring(mpi_world());
}
TEST(MpiComm, TagsOutOfOrder) {
    check_tags_out_of_order(mpi_world());
}
TEST(MpiComm, IsendIrecvAllToAll) {
    check_isend_irecv_all_to_all(mpi_world());
}
TEST(MpiComm, NonblockingCollectives) {
    check_nonblocking_collectives(mpi_world());
}
TEST(MpiComm, Split) {
    check_split(mpi_world());
}
TEST(MpiComm, Barrier) {
    check_barrier(mpi_world());
}
TEST(MpiComm, CommThreadBesideMainThread) {
    check_comm_thread_beside_main_thread(mpi_world());
}

// Every check again on a group made by split: ranks reversed, so group rank != world rank.
TEST(MpiComm, ContractOnReversedSubgroup) {
    Communicator& w = mpi_world();
    auto g = w.split(0, -w.rank(), "reversed");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->rank(), w.size() - 1 - w.rank());
    run_all_checks(*g);
}

TEST(MpiComm, WorldCommunicatorsAreIndependent) {
    Communicator& w = mpi_world();
    auto other = mpi_world_communicator();
    if (w.rank() == 0) {
        const int32_t a = 1, b = 2;
        Request ra = w.isend(&a, 1, DType::I32, 1, 1);
        Request rb = other->isend(&b, 1, DType::I32, 1, 1);
        ra->wait();
        rb->wait();
    } else if (w.rank() == 1) {
        int32_t a = 0, b = 0;
        other->recv(&b, 1, DType::I32, 0, 1);  // same (source, tag): only the communicator differs
        w.recv(&a, 1, DType::I32, 0, 1);
        EXPECT_EQ(b, 2);
        EXPECT_EQ(a, 1);
    }
    other->barrier();
}

// A receive of another length than the message is an ete::Error naming both; MPI stays usable.
TEST(MpiComm, RecvOfAnotherSizeThrows) {
    Communicator& w = mpi_world();
    float x[4] = {1, 2, 3, 4};
    if (w.rank() == 0) w.send(x, 3, DType::F32, 1, 0);
    if (w.rank() == 1) {
        EXPECT_EQ(error_of([&] { w.recv(x, 4, DType::F32, 0, 0); }),
                  expected_where(w, "recv") +
                      ": expected 4 x F32 from rank 0 tag 0, the message has 3 x F32");
    }
    w.barrier();
}

// The failure tests run alone (their own mpirun, np 2): MPI is unusable after them, so main ends
// the job with MPI_Abort. A message longer than the receive is MPI's own error, passed on.
TEST(MpiFailure, TruncatedReceiveNamesTheMpiError) {
    Communicator& w = mpi_world();
    ASSERT_EQ(w.size(), 2);
    int32_t x[5] = {1, 2, 3, 4, 5};
    if (w.rank() == 0) w.send(x, 5, DType::I32, 1, 0);
    if (w.rank() == 1) {
        const std::string err = error_of([&] { w.recv(x, 4, DType::I32, 0, 0); });
        EXPECT_EQ(err.rfind("[comm] recv on group world (world ranks 0,1): MPI_Test failed: ", 0),
                  0u)
            << err;
        EXPECT_NE(err.find("MPI_ERR_TRUNCATE"), std::string::npos) << err;
    }
    w.barrier();
    g_mpi_left_unusable = true;
}

// Rank 1 skips a collective; rank 0 must time out naming op, group and world ranks.
TEST(MpiFailure, RankThatSkipsACollective) {
    Communicator& w = mpi_world();
    ASSERT_EQ(w.size(), 2);
    auto g = w.split(0, w.rank(), "dp[0,1]");  // times out; the world stays usable for the verdict
    g->set_timeout(0.5);
    w.set_timeout(60);
    if (w.rank() == 0) {
        float x = 1;
        EXPECT_EQ(error_of([&] { g->all_reduce(&x, 1, DType::F32, ReduceOp::Sum); }),
                  "[comm] all_reduce on group dp[0,1] (world ranks 0,1) timed out after 0.5 s");
    }
    w.barrier();  // rank 1 waits here until rank 0 gave up
    // Every rank's verdict on every test so far, so all ranks end with the same exit code.
    const bool failed_here = ::testing::Test::HasFailure() ||
                             ::testing::UnitTest::GetInstance()->failed_test_count() > 0;
    int32_t failed = failed_here ? 1 : 0;
    w.all_reduce(&failed, 1, DType::I32, ReduceOp::Max);
    EXPECT_EQ(failed, 0) << "a rank failed";
    g_mpi_left_unusable = true;
}

}  // namespace
}  // namespace ete::testing
