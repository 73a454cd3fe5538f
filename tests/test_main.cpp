// tests/test_main.cpp — gtest main that applies the OpenBLAS core-type fix like the ete binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ete/backend/cpu/kernel_use.h"
#include "ete/backend/cpu/openblas_util.h"
#include "test_build.h"

namespace ete::testing {

const std::string& binary_dir() {
    static const std::string dir = ETE_BINARY_DIR;
    return dir;
}

// This file compiles with the test flags of its own build (ASan in a sanitizer build), unlike the
// test objects, which a sanitizer build may take from the Release build.
bool under_sanitizers() {
#if defined(__SANITIZE_ADDRESS__)
    return true;
#else
    return false;
#endif
}

}  // namespace ete::testing

namespace {

// Names the running test in ETE_TEST_NAME for this process and those its test starts, so that
// ete::cpu::note_profiled_kernel() can list the tests that reach a GEMM whose kernels the
// environment chooses (run.sh reruns only those under the other CPUs' kernel choices). Only when
// ETE_KERNEL_USE_LOG asks for the list: run.sh's first pass runs each test in a process of its
// own (ctest), before the test starts a thread that could read the environment meanwhile.
class NameTheTest : public ::testing::EmptyTestEventListener {
    void OnTestStart(const ::testing::TestInfo& t) override {
        setenv("ETE_TEST_NAME", (std::string(t.test_suite_name()) + "." + t.name()).c_str(), 1);
        ete::cpu::reset_profiled_kernel_note();
    }
};

}  // namespace

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    // The MPI jobs the tests start (every `ete launch` and mpirun below) run on this one node:
    // Open MPI's ob1 messaging layer (shared memory, TCP), the one it ends up with here, without
    // probing its cm layer and the PSM/PSM2 transports under it first, which made MPI_Init 0.30 s
    // instead of 0.08 s (a 2-rank tiny training job 0.72 -> 0.46 s; several hundred such jobs a
    // pass). A value the caller set is kept.
    setenv("OMPI_MCA_pml", "ob1", 0);
    ::testing::InitGoogleTest(&argc, argv);
    if (std::getenv("ETE_KERNEL_USE_LOG"))
        ::testing::UnitTest::GetInstance()->listeners().Append(new NameTheTest);
    return RUN_ALL_TESTS();
}
