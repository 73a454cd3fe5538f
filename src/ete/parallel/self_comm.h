// ete/parallel/self_comm.h — the trivial single-rank communicator (no MPI): collectives are copies
// or no-ops, send/recv to rank 0 are buffered and matched by tag.
#pragma once

#include <memory>

#include "ete/parallel/communicator.h"

namespace ete {

// A group of one ("self", world ranks {0}, transport "self").
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace ete
