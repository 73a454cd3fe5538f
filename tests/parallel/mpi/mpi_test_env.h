// tests/parallel/mpi/mpi_test_env.h — what the MPI test binary's tests share with its main.
#pragma once

#include "ete/parallel/communicator.h"

namespace ete::testing {

// The world communicator of this process (created on first use; every rank uses it in the same
// tests, so the collective creation lines up).
Communicator& mpi_world();

// Set by the failure tests: MPI is unusable afterwards, so main ends the job with MPI_Abort.
extern bool g_mpi_left_unusable;

}  // namespace ete::testing
