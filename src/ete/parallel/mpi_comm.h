// ete/parallel/mpi_comm.h — the MPI transport (Open MPI on CPU). A multi-process run is a plain
// MPI program (`mpirun -np N ete ...`); this is its world communicator.
#pragma once

#include <memory>

#include "ete/parallel/communicator.h"

namespace ete {

// The world communicator ("world", transport "mpi", timeout 0). Collective: every process calls
// it, and each call returns a new duplicate of MPI_COMM_WORLD. Initializes MPI on first use with
// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless the program already did; only then is MPI finalized
// at exit (once) — or the job aborted with MPI_Abort if a call failed or timed out, because MPI is
// unusable after that and a peer may never reach MPI_Finalize.
std::unique_ptr<Communicator> mpi_world_communicator();

// This process is ending on an error (the CLI calls it): at exit, abort the job with MPI_Abort
// instead of entering MPI_Finalize, where it would wait for peers blocked in a collective it will
// never join — the job ends now, not when the peers' timeout fires. Only in a job of more than
// one process whose MPI ETE initialized; otherwise nothing changes.
// code: MPI_Abort's error code, which mpirun returns (kExitCommFailure for a failed transport).
void mpi_abort_job_at_exit(int code = 1);
// Whether an MPI call of this process failed or timed out (the transport is unusable).
bool mpi_failed();
// The exit code of a run that failed because the transport did (a timeout, a lost peer): a
// restart from the newest checkpoint can fix it (EX_TEMPFAIL; `ete launch --max-restarts`).
constexpr int kExitCommFailure = 75;

// The thread support level MPI provided (MPI_THREAD_SINGLE..MPI_THREAD_MULTIPLE); initializes MPI
// like mpi_world_communicator() if needed. Below MPI_THREAD_MULTIPLE only one thread at a time
// may call into a communicator.
int mpi_thread_level();

}  // namespace ete
