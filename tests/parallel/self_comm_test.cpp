// tests/parallel/self_comm_test.cpp — the single-rank communicator: the shared contract checks
// at size 1, buffered messages to self, a send from another thread, and the receive timeout.
#include "ete/parallel/self_comm.h"

#include <thread>

#include "comm_checks.h"

namespace ete {
namespace {

TEST(SelfComm, Identity) {
    auto c = make_self_communicator();
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->name(), "world");
    EXPECT_EQ(c->world_ranks(), std::vector<int>{0});
    EXPECT_EQ(c->transport(), "self");
    EXPECT_EQ(c->timeout(), 0.0);
}

TEST(SelfComm, Contract) {
    auto c = make_self_communicator();
    testing::run_all_checks(*c);
}

TEST(SelfComm, SplitNamesTheGroupAndOptsOut) {
    auto c = make_self_communicator();
    c->set_timeout(3);
    EXPECT_EQ(c->split(-1, 0, "none"), nullptr);
    auto g = c->split(5, 0, "tp[0]");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->name(), "tp[0]");
    EXPECT_EQ(g->timeout(), 3.0);
    // A message on the parent is not seen by the split group.
    const int32_t v = 7;
    c->send(&v, 1, DType::I32, 0, 1);
    g->set_timeout(0.05);
    int32_t x = -1;
    EXPECT_EQ(error_of([&] { g->recv(&x, 1, DType::I32, 0, 1); }),
              "[comm] recv on group tp[0] (world ranks 0) timed out after 0.05 s");
    c->recv(&x, 1, DType::I32, 0, 1);
    EXPECT_EQ(x, 7);
}

TEST(SelfComm, SendFromAnotherThreadCompletesAWaitingRecv) {
    auto c = make_self_communicator();
    c->set_timeout(30);
    double x = 0;
    Request r = c->irecv(&x, 1, DType::F64, 0, 2);
    std::thread sender([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const double v = 2.5;
        c->send(&v, 1, DType::F64, 0, 2);
    });
    r->wait();
    sender.join();
    EXPECT_EQ(x, 2.5);
}

TEST(SelfComm, RecvOfAnotherSizeThrows) {
    auto c = make_self_communicator();
    const uint8_t b[2] = {1, 2};
    c->send(b, 2, DType::U8, 0, 0);
    uint8_t x[3];
    EXPECT_EQ(error_of([&] { c->recv(x, 3, DType::U8, 0, 0); }),
              "[comm] recv on group world (world ranks 0): expected 3 x U8 from rank 0 tag 0, the "
              "message has 2 x U8");
}

}  // namespace
}  // namespace ete
