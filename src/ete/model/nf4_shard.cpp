// ete/model/nf4_shard.cpp
#include "ete/model/nf4_shard.h"

#include <algorithm>
#include <cstring>

#include "ete/model/shard.h"

namespace ete {

namespace {

// The largest valid NF4 block size whose blocks every run holds whole, or 0.
int64_t fitting_blocksize(const std::vector<ShardRun>& runs) {
    for (int64_t b = kNf4MaxBlock; b >= kNf4MinBlock; b /= 2) {
        const bool fits = std::all_of(runs.begin(), runs.end(), [&](const ShardRun& r) {
            return r.local % b == 0 && r.len % b == 0 && (r.global < 0 || r.global % b == 0);
        });
        if (fits) return b;
    }
    return 0;
}

std::string straddle_remedy(Nf4Origin origin, int64_t bs, int64_t fit) {
    if (fit == 0) return "no NF4 block size fits these shards: use another tp";
    const std::string smaller = fit > kNf4MinBlock ? " (or a smaller power of two)" : "";
    if (origin == Nf4Origin::Stored)
        return fmt::format(
            "the base dir stores blocks of {} (lora.nf4_blocksize cannot change them): "
            "re-quantize its full-precision weights with `ete quantize --blocksize {}`{}, or use "
            "another tp",
            bs, fit, smaller);
    return fmt::format("use lora.nf4_blocksize = {}{}, or another tp", fit, smaller);
}

}  // namespace

void check_nf4_shard(const ParamSpec& s, int tp_rank, int tp_size, int64_t bs, Nf4Origin origin) {
    if (tp_size == 1 || s.shard.dim < 0) return;
    const std::vector<ShardRun> runs = shard_runs(s, tp_rank, tp_size);
    for (const ShardRun& r : runs) {
        ETE_CHECK(r.local % bs == 0 && r.len % bs == 0 && (r.global < 0 || r.global % bs == 0),
                  "parameter '{}': NF4 blocks of {} elements would straddle its shards at "
                  "parallel.tp = {} (a shard run of {} elements at element {}); {}",
                  s.name, bs, tp_size, r.len, r.global < 0 ? r.local : r.global,
                  straddle_remedy(origin, bs, fitting_blocksize(runs)));
    }
}

Nf4Tensor nf4_shard(const ParamSpec& s, int tp_rank, int tp_size, const Nf4Tensor& global,
                    Nf4Origin origin) {
    ETE_CHECK(global.rows == s.global_shape[0] && global.cols == s.global_shape[1],
              "parameter '{}': NF4 tensor ({}, {}), expected {}", s.name, global.rows, global.cols,
              shape_str(s.global_shape));
    if (tp_size == 1 || s.shard.dim < 0) return global;
    const int64_t bs = global.blocksize;
    check_nf4_shard(s, tp_rank, tp_size, bs, origin);
    const std::vector<ShardRun> runs = shard_runs(s, tp_rank, tp_size);
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
