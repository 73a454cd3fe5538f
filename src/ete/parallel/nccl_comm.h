// ete/parallel/nccl_comm.h — the NCCL transport (GPU). Buffers are device pointers on `device`;
// all operations run on one CUDA stream owned by the communicator, and blocking calls (and
// wait()) also wait on the host. Built only with ETE_CUDA=ON; otherwise make_nccl_communicator
// throws "[comm] built without CUDA/NCCL".
//
// Where NCCL differs from the contract: it has no tags, so tags are checked but not matched —
// messages between one pair match in posting order (a pipeline schedule posts them in order);
// isend/irecv go out together as one NCCL group when one of them is waited for or tested, so post
// both halves of an exchange before waiting. A timeout aborts the communicator (ncclCommAbort);
// every later call on it throws. One thread at a time may use a communicator.
#pragma once

#include <memory>

#include "ete/parallel/communicator.h"

namespace ete {

// Collective over `bootstrap` (usually the MPI world or a group of it): rank 0 creates the NCCL
// unique id and broadcasts it over bootstrap, then every rank joins on CUDA device `device`. The
// result has bootstrap's name, ranks and world_ranks, and transport "nccl".
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device);

}  // namespace ete
