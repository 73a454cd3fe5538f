// ete/model/nf4_shard.cpp
#include "ete/model/nf4_shard.h"

#include <algorithm>
#include <cstring>

#include "ete/model/shard.h"

namespace ete {

Nf4Tensor nf4_shard(const ParamSpec& s, int tp_rank, int tp_size, const Nf4Tensor& global) {
    ETE_CHECK(global.rows == s.global_shape[0] && global.cols == s.global_shape[1],
              "parameter '{}': NF4 tensor ({}, {}), expected {}", s.name, global.rows, global.cols,
              shape_str(s.global_shape));
    if (tp_size == 1 || s.shard.dim < 0) return global;
    const int64_t bs = global.blocksize;
    const std::vector<ShardRun> runs = shard_runs(s, tp_rank, tp_size);
    for (const ShardRun& r : runs) {
        ETE_CHECK(r.local % bs == 0 && r.len % bs == 0 && (r.global < 0 || r.global % bs == 0),
                  "parameter '{}': NF4 blocks of {} elements would straddle its shards at "
                  "parallel.tp = {} (a shard run of {} elements at element {}); use a "
                  "lora.nf4_blocksize that divides the rows and the shard widths, or another tp",
                  s.name, bs, tp_size, r.len, r.global < 0 ? r.local : r.global);
    }
    const std::vector<float> absmax = global.block_absmax();
    Nf4Tensor t;
    t.rows = s.shape[0];
    t.cols = s.shape[1];
    t.blocksize = global.blocksize;
    t.packed.assign(size_t((t.numel() + 1) / 2), uint8_t(kNf4Zero << 4 | kNf4Zero));
    t.absmax.assign(size_t(t.blocks()), 0.0f);
    for (const ShardRun& r : runs) {
        if (r.global < 0) continue;  // padding: zero codes, absmax 0
        std::memcpy(t.packed.data() + r.local / 2, global.packed.data() + r.global / 2,
                    size_t(r.len / 2));
        std::copy_n(absmax.begin() + r.global / bs, r.len / bs, t.absmax.begin() + r.local / bs);
    }
    return t;
}

}  // namespace ete
