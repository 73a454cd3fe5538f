// ete/parallel/zero.h — ZeRO's shards of a flat buffer over the data-parallel group (DESIGN.md §4,
// docs/parallel.md "ZeRO").
//
// Replica r of dp holds [r·q, (r+1)·q) of n elements, q = n / dp; the last one also holds the
// tail [dp·q, n) (fewer than dp elements). Equal blocks make the gather one in-place all-gather of
// q elements per replica (plus a broadcast of the tail) on any transport — MPI, NCCL and the
// staged device transport alike — with no padding of the buffer and no host copy of it.
#pragma once

#include <cstdint>

#include "ete/core/dtype.h"
#include "ete/parallel/communicator.h"

namespace ete {

struct ShardRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
};

// Replica `rank`'s shard of n elements over `dp` replicas (dp >= 1, 0 <= rank < dp).
ShardRange zero_shard(int64_t n, int dp, int rank);

// buf: n elements of `dtype` in the memory `dp` carries (a device communicator for backend
// memory), this replica's shard current. Afterwards every replica's shard is current on every
// replica (collective over dp).
void zero_all_gather(Communicator& dp, void* buf, int64_t n, DType dtype);

}  // namespace ete
