// tests/parallel/mpi/mpi_main.cpp — main of the MPI test binary (run under mpirun, np 2..4).
// Only rank 0 prints the usual gtest report; other ranks print just their failures, tagged with
// their rank. Any rank's failure makes its exit code, and so mpirun's, non-zero.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "ete/parallel/mpi_comm.h"
#include "mpi_test_env.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  public:
    explicit RankFailurePrinter(int rank) : rank_(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (!r.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                     r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
    }

  private:
    int rank_;
};

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    const int rank = ete::testing::mpi_world().rank();
    if (rank != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new RankFailurePrinter(rank));
    }
    const int rc = RUN_ALL_TESTS();
    if (ete::testing::g_mpi_left_unusable) {
        // MPI_Finalize could wait forever on the abandoned collective, so the job ends with
        // MPI_Abort; the last failure test shared the verdict, so every rank aborts with one code.
        std::fflush(nullptr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    return rc;
}
