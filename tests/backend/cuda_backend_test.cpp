// tests/backend/cuda_backend_test.cpp — the CUDA backend where there is no GPU (CI): asking for
// it is one line naming why not, in a build without CUDA and in a CUDA build on a machine
// without a device alike. Its ops are checked on a GPU by the conformance suite
// (conformance_test.cpp, the "cuda" cases) through tools/gpu_check.sh.
#include <gtest/gtest.h>

#include <string>

#include "ete/backend/backend.h"
#include "test_util.h"

namespace ete {
namespace {

TEST(CudaBackend, UnavailableSaysWhyInOneLine) {
    const std::string why = cuda_unavailable_reason();
    if (why.empty()) GTEST_SKIP() << "a CUDA device is present: the conformance suite runs instead";
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    EXPECT_EQ(error_of([] { make_backend("cuda"); }), "[cuda] backend 'cuda': " + why);
    EXPECT_EQ(cuda_device_count(), 0);
    // `ete --version` ends with the same reason.
    EXPECT_EQ(cuda_summary(), "CUDA: " + why);
}

// Each rank's GPU: ETE_CUDA_DEVICE when set, else its local rank modulo the visible GPUs.
TEST(CudaBackend, PicksTheDeviceOfTheLocalRank) {
    EXPECT_EQ(pick_cuda_device(nullptr, 0, 8), 0);
    EXPECT_EQ(pick_cuda_device(nullptr, 5, 8), 5);
    EXPECT_EQ(pick_cuda_device("", 3, 2), 1);  // 4 ranks on 2 GPUs: 0 1 0 1
    EXPECT_EQ(pick_cuda_device(nullptr, 2, 1), 0);
    EXPECT_EQ(pick_cuda_device("3", 0, 4), 3);
    EXPECT_EQ(error_of([] { pick_cuda_device("4", 0, 4); }),
              "ETE_CUDA_DEVICE='4': expected a device number from 0 to 3 (4 visible)");
    EXPECT_EQ(error_of([] { pick_cuda_device("1x", 0, 4); }),
              "ETE_CUDA_DEVICE='1x': expected a device number from 0 to 3 (4 visible)");
    EXPECT_EQ(error_of([] { pick_cuda_device(nullptr, 0, 0); }), "[cuda] no CUDA device visible");
}

// `ete launch --placement auto`'s map: world rank -> GPU.
TEST(CudaBackend, TheDeviceMapGivesEachRankItsGpu) {
    EXPECT_EQ(mapped_cuda_device(nullptr, 3), "");
    EXPECT_EQ(mapped_cuda_device("", 0), "");
    EXPECT_EQ(mapped_cuda_device("0,2,1,3", 0), "0");
    EXPECT_EQ(mapped_cuda_device("0,2,1,3", 1), "2");
    EXPECT_EQ(mapped_cuda_device("0,2,1,3", 3), "3");
    EXPECT_EQ(error_of([] { mapped_cuda_device("0,2", 2); }),
              "ETE_CUDA_DEVICE_MAP='0,2': has 2 entries, none for world rank 2");
    EXPECT_EQ(error_of([] { mapped_cuda_device("0,,1", 0); }),
              "ETE_CUDA_DEVICE_MAP='0,,1': expected device numbers separated by commas, one per "
              "world rank");
    EXPECT_EQ(error_of([] { mapped_cuda_device("0,x", 0); }),
              "ETE_CUDA_DEVICE_MAP='0,x': expected device numbers separated by commas, one per "
              "world rank");
}

TEST(CudaBackend, DescribesTheDevice) {
    if (!cuda_unavailable_reason().empty()) GTEST_SKIP() << cuda_unavailable_reason();
    auto be = make_backend("cuda");
    EXPECT_EQ(be->name(), "cuda");
    EXPECT_NE(be->describe().find("sm_"), std::string::npos) << be->describe();
    EXPECT_FALSE(be->host_addressable());
}

}  // namespace
}  // namespace ete
