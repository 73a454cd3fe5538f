// ete/parallel/zero.cpp
#include "ete/parallel/zero.h"

#include "ete/core/error.h"

namespace ete {

ShardRange zero_shard(int64_t n, int dp, int rank) {
    ETE_CHECK(n >= 0 && dp >= 1 && rank >= 0 && rank < dp,
              "zero_shard: {} elements over {} replicas, replica {} (expected n >= 0 and "
              "0 <= replica < replicas)",
              n, dp, rank);
    const int64_t q = n / dp;
    return {rank * q, rank == dp - 1 ? n : (rank + 1) * q};
}

void zero_all_gather(Communicator& dp, void* buf, int64_t n, DType dtype) {
    const int size = dp.size();
    if (size == 1) return;
    const int64_t q = n / size;
    char* bytes = static_cast<char*>(buf);
    const size_t el = dtype_size(dtype);
    dp.all_gather(bytes + size_t(dp.rank() * q) * el, bytes, size_t(q), dtype);
    if (const int64_t tail = n - q * size; tail > 0)
        dp.broadcast(bytes + size_t(q * size) * el, size_t(tail), dtype, size - 1);
}

}  // namespace ete
