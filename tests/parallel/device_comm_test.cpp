// tests/parallel/device_comm_test.cpp — device_communicator over memory the host cannot touch
// (the guarded backend): every operation stages through host buffers and gives exactly what the
// plain transport gives on host buffers; completion through wait(), test() and destruction all
// upload the result; split groups carry backend memory too. On the CPU backend it forwards.
#include "ete/parallel/device_comm.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "ete/backend/backend.h"
#include "ete/parallel/fake_comm.h"
#include "test_util.h"

namespace ete {
namespace {

using testing::DeviceCopy;

std::vector<float> values(int rank, size_t n, float base) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = base + float(rank * 100 + int(i % 37)) * 0.25f;
    return v;
}

class DeviceComm : public ::testing::TestWithParam<int> {};

TEST_P(DeviceComm, CollectivesMatchTheHostTransport) {
    run_fake_world(GetParam(), [](Communicator& w) {
        auto be = make_guarded_backend();
        std::unique_ptr<Communicator> dev = device_communicator(w, *be);
        EXPECT_EQ(dev->size(), w.size());
        EXPECT_EQ(dev->name(), w.name());
        const int n = w.size(), r = w.rank();
        const size_t count = 53;
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
            std::vector<float> host = values(r, count, 1.0f);
            DeviceCopy d(*be, host);
            w.all_reduce(host.data(), count, DType::F32, op);
            dev->all_reduce(d.vec().data, count, DType::F32, op);
            EXPECT_EQ(d.download<float>(), host);
        }
        {  // reduce_scatter: n blocks in, this rank's block out
            std::vector<float> in = values(r, count * size_t(n), 2.0f), out(count);
            DeviceCopy din(*be, in), dout(*be, out);
            w.reduce_scatter(in.data(), out.data(), count, DType::F32, ReduceOp::Sum);
            dev->reduce_scatter(din.vec().data, dout.vec().data, count, DType::F32, ReduceOp::Sum);
            EXPECT_EQ(dout.download<float>(), out);
            EXPECT_EQ(din.download<float>(), in);  // the input is not written
        }
        {
            std::vector<float> in = values(r, count, 3.0f), out(count * size_t(n));
            DeviceCopy din(*be, in), dout(*be, out);
            w.all_gather(in.data(), out.data(), count, DType::F32);
            dev->all_gather(din.vec().data, dout.vec().data, count, DType::F32);
            EXPECT_EQ(dout.download<float>(), out);
        }
        for (int root = 0; root < n; ++root) {
            std::vector<int32_t> host(count);
            std::iota(host.begin(), host.end(), r * 1000);
            DeviceCopy d(*be, host);
            w.broadcast(host.data(), count, DType::I32, root);
            dev->broadcast(d.vec().data, count, DType::I32, root);
            EXPECT_EQ(d.download<int32_t>(), host);
            EXPECT_EQ(host.front(), root * 1000);
        }
    });
}

TEST_P(DeviceComm, PointToPointAndNonBlockingCompletion) {
    run_fake_world(GetParam(), [](Communicator& w) {
        auto be = make_guarded_backend();
        std::unique_ptr<Communicator> dev = device_communicator(w, *be);
        const int n = w.size(), r = w.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
        const size_t count = 17;
        // A ring of isend/irecv on backend buffers, completed by polling test().
        DeviceCopy send(*be, values(r, count, 5.0f)), recv(*be, std::vector<float>(count));
        Request rq = dev->irecv(recv.vec().data, count, DType::F32, prev, 3);
        Request sq = dev->isend(send.vec().data, count, DType::F32, next, 3);
        while (!rq->test()) {
        }
        EXPECT_TRUE(rq->test());  // stays done
        sq->wait();
        EXPECT_EQ(recv.download<float>(), values(prev, count, 5.0f));
        // An iall_reduce that is only destroyed still completes and uploads its result.
        DeviceCopy acc(*be, std::vector<float>(count, float(r + 1)));
        { Request q = dev->iall_reduce(acc.vec().data, count, DType::F32, ReduceOp::Sum); }
        EXPECT_EQ(acc.download<float>(), std::vector<float>(count, float(n * (n + 1) / 2)));
    });
}

TEST_P(DeviceComm, SplitGroupsCarryBackendMemory) {
    run_fake_world(GetParam(), [](Communicator& w) {
        auto be = make_guarded_backend();
        std::unique_ptr<Communicator> dev = device_communicator(w, *be);
        const int color = w.rank() % 2;
        std::unique_ptr<Communicator> half = dev->split(color, w.rank(), "half");
        ASSERT_TRUE(half);
        DeviceCopy d(*be, std::vector<float>(4, float(w.rank())));
        half->all_reduce(d.vec().data, 4, DType::F32, ReduceOp::Sum);
        float want = 0;
        for (int k = color; k < w.size(); k += 2) want += float(k);
        EXPECT_EQ(d.download<float>(), std::vector<float>(4, want));
    });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceComm, ::testing::Values(1, 2, 3, 4));

// On host-addressable memory the wrapper forwards: the transport sees the caller's pointer.
TEST(DeviceCommDirect, HostMemoryIsForwardedAsIs) {
    run_fake_world(2, [](Communicator& w) {
        auto be = make_cpu_backend();
        std::unique_ptr<Communicator> dev = device_communicator(w, *be);
        std::vector<float> v(8, float(w.rank() + 1));
        dev->all_reduce(v.data(), v.size(), DType::F32, ReduceOp::Sum);
        EXPECT_EQ(v, std::vector<float>(8, 3.0f));
    });
}

}  // namespace
}  // namespace ete
