// tests/parallel/comm_util_test.cpp — the pieces every transport shares: the reference reduction
// (bf16 rounding, integer wrap-around), wait_all, and the NCCL entry point of a build without it.
#include "ete/parallel/comm_util.h"

#include <gtest/gtest.h>

#include <climits>

#include "ete/parallel/nccl_comm.h"
#include "ete/parallel/self_comm.h"
#include "test_util.h"

namespace ete {
namespace {

uint16_t bf(float f) {
    return f32_to_bf16(f);
}

TEST(ReduceInto, Bf16SumRoundsEachStepToNearestEven) {
    // Near 256 bf16 steps by 2: 257 ties to 256 (even), 259 ties to 260 (even).
    uint16_t acc[2] = {bf(256), bf(256)};
    const uint16_t in[2] = {bf(1), bf(3)};
    comm::reduce_into(acc, in, 2, DType::BF16, ReduceOp::Sum);
    EXPECT_EQ(bf16_to_f32(acc[0]), 256.0f);
    EXPECT_EQ(bf16_to_f32(acc[1]), 260.0f);
}

TEST(ReduceInto, Bf16MaxMinPickAnOperand) {
    uint16_t acc[2] = {bf(-3), bf(-3)};
    const uint16_t in[2] = {bf(1.5f), bf(1.5f)};
    comm::reduce_into(acc, in, 1, DType::BF16, ReduceOp::Max);
    comm::reduce_into(acc + 1, in + 1, 1, DType::BF16, ReduceOp::Min);
    EXPECT_EQ(bf16_to_f32(acc[0]), 1.5f);
    EXPECT_EQ(bf16_to_f32(acc[1]), -3.0f);
}

TEST(ReduceInto, IntegerSumsWrapAround) {
    int32_t a = INT32_MAX;
    const int32_t one = 1;
    comm::reduce_into(&a, &one, 1, DType::I32, ReduceOp::Sum);
    EXPECT_EQ(a, INT32_MIN);
    uint8_t u = 250;
    const uint8_t ten = 10;
    comm::reduce_into(&u, &ten, 1, DType::U8, ReduceOp::Sum);
    EXPECT_EQ(u, 4);
    int64_t m[2] = {-5, 9};
    const int64_t n[2] = {3, -2};
    comm::reduce_into(m, n, 2, DType::I64, ReduceOp::Min);
    EXPECT_EQ(m[0], -5);
    EXPECT_EQ(m[1], -2);
}

TEST(ReduceInto, WhichDtypesReduce) {
    EXPECT_TRUE(comm::dtype_reducible(DType::BF16));
    EXPECT_TRUE(comm::dtype_reducible(DType::U64));
    EXPECT_FALSE(comm::dtype_reducible(DType::F16));
    EXPECT_FALSE(comm::dtype_reducible(DType::BOOL));
}

struct ScriptedRequest final : CommRequest {
    ScriptedRequest(int* waits, bool fails) : waits_(waits), fails_(fails) {}
    void wait() override {
        ++*waits_;
        if (fails_) throw Error("request failed");
    }
    bool test() override { return true; }
    int* waits_;
    bool fails_;
};

TEST(WaitAll, WaitsInOrderAndClears) {
    int waits = 0;
    std::vector<Request> reqs;
    for (int i = 0; i < 3; ++i) reqs.push_back(std::make_unique<ScriptedRequest>(&waits, false));
    wait_all(reqs);
    EXPECT_EQ(waits, 3);
    EXPECT_TRUE(reqs.empty());
}

TEST(WaitAll, FirstErrorPropagatesAndTheListIsCleared) {
    int waits = 0;
    std::vector<Request> reqs;
    reqs.push_back(std::make_unique<ScriptedRequest>(&waits, false));
    reqs.push_back(std::make_unique<ScriptedRequest>(&waits, true));
    reqs.push_back(std::make_unique<ScriptedRequest>(&waits, false));
    EXPECT_EQ(error_of([&] { wait_all(reqs); }), "request failed");
    EXPECT_EQ(waits, 2);  // the third was not waited for by wait_all
    EXPECT_TRUE(reqs.empty());
}

TEST(NcclCommunicator, NeedsCudaAndAGpu) {
    // Without CUDA the stub throws; a CUDA build on a machine without a GPU fails in setup.
    auto self = make_self_communicator();
    const std::string err = error_of([&] { make_nccl_communicator(*self, 0); });
    const bool stub = err == "[comm] built without CUDA/NCCL";
    const bool no_gpu =
        err.rfind("[comm] make_nccl_communicator on group world (world ranks 0)", 0) == 0;
    EXPECT_TRUE(stub || no_gpu) << err;
}

}  // namespace
}  // namespace ete
