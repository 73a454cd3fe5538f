// ete/parallel/launch_env.h — who started this process: the rank, world size and node-local
// placement a launcher put in the environment, and the world communicator that matches it.
//
// Launchers are tried in this order; the first whose rank variable is set wins (so `mpirun` inside
// a Slurm allocation is Open MPI, not Slurm):
//
//   openmpi   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//             OMPI_COMM_WORLD_LOCAL_SIZE                                    (mpirun, Open MPI)
//   pmi       PMI_RANK, PMI_SIZE, MPI_LOCALRANKID or PMI_LOCAL_RANK,
//             MPI_LOCALNRANKS or PMI_LOCAL_SIZE                (MPICH/Hydra, srun --mpi=pmi2)
//   slurm     SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_LOCALID,
//             SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE  (srun)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE   (only when RANK and WORLD_SIZE
//             are both set: the names are generic)
//   none      one process
//
// The Slurm per-node counts may be "4", "4,2" or "2(x3),1" (one entry per node, "(xN)" repeats
// it); the entry of this node (SLURM_NODEID, default 0) is the local size. A missing local size
// means "all ranks on one node"; a missing local rank is rank % local_size (block placement).
//
// Values must be plain decimal integers; a malformed one, a size < 1 or a rank >= its size is an
// ete::Error naming the variable.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ete/parallel/communicator.h"

namespace ete {

struct LaunchInfo {
    int rank = 0, world_size = 1, local_rank = 0, local_size = 1;
    std::string launcher = "none";  // "openmpi", "pmi", "slurm", "torchrun", "none"
};

// Returns the variable's value or nullptr when unset (std::getenv's contract).
using GetenvFn = std::function<const char*(const char*)>;

LaunchInfo detect_launch(const GetenvFn& getenv_fn);
LaunchInfo detect_launch();  // from the process environment

// The world communicator for `info`: a self communicator (no MPI initialization) when no MPI
// launcher started this process and it is alone (launcher "none", or torchrun with one rank);
// otherwise the MPI world, whose rank and size must agree with `info`. A torchrun launch of more
// than one rank is an error: ETE's processes talk through MPI, so start them with mpirun or srun.
std::unique_ptr<Communicator> make_world(const LaunchInfo& info);

}  // namespace ete
