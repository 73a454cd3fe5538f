// ete/nn/tp_regions.h — Megatron's conjugate communication pair for tensor parallelism
// (DESIGN.md §4), as the only places a tensor-parallel layer communicates.
//
//   copy_to_region      forward: identity (every rank already holds the replicated input);
//                       backward: all-reduce of the input gradient (each rank's columns of the
//                       following column-parallel layer contributed a part of it).
//   reduce_from_region  forward: all-reduce of the partial output (each rank multiplied its
//                       input slice); backward: identity.
//
// The functions below are the non-identity halves. tp == null (no tensor parallelism) makes them
// no-ops. Buffers are backend memory, so `tp` must be able to carry it (parallel/device_comm.h);
// views must be contiguous.
#pragma once

#include "ete/core/view.h"
#include "ete/parallel/communicator.h"

namespace ete {

// The backward of copy_to_region: d_x (the gradient of a replicated input) summed over tp.
void copy_to_region_backward(Communicator* tp, Mat d_x);
// The forward of reduce_from_region: y (partial products) summed over tp.
void reduce_from_region_forward(Communicator* tp, Mat y);

}  // namespace ete
