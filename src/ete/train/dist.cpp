// ete/train/dist.cpp
#include "ete/train/dist.h"

#include "ete/core/error.h"
#include "ete/core/log.h"

namespace ete {

MeshShape resolve_mesh(const RunConfig& cfg, int world_size) {
    MeshShape s{cfg.parallel_dp, cfg.parallel_tp, cfg.parallel_pp};
    if (s.dp == 0) {
        const int mp = s.tp * s.pp;
        ETE_CHECK(world_size % mp == 0,
                  "parallel.tp * parallel.pp = {} * {} = {} does not divide the job's {} ranks",
                  s.tp, s.pp, mp, world_size);
        s.dp = world_size / mp;
    }
    validate_mesh(s, world_size);
    return s;
}

Dist make_dist_on(std::unique_ptr<Communicator> world, const RunConfig& cfg, bool tied_embeddings) {
    Dist d;
    d.world = std::move(world);
    d.world->set_timeout(cfg.parallel_timeout_s);
    const MeshShape shape = resolve_mesh(cfg, d.world->size());
    d.groups = make_groups(*d.world, shape);
    for (MeshAxis a : {MeshAxis::Dp, MeshAxis::Tp, MeshAxis::Pp})
        d.groups.group(a).set_timeout(cfg.parallel_timeout_s);
    const int rank = d.world->rank();
    d.mp = d.world->split(d.groups.dp_rank, rank, fmt::format("mp[dp={}]", d.groups.dp_rank));
    const bool holds_tied = tied_embeddings && shape.pp > 1 && (d.first_stage() || d.last_stage());
    const int column = d.groups.dp_rank * shape.tp + d.groups.tp_rank;
    d.tied = d.world->split(holds_tied ? column : -1, rank, fmt::format("tied[{}]", column));
    for (Communicator* c : {d.mp.get(), d.tied.get()})
        if (c) c->set_timeout(cfg.parallel_timeout_s);
    return d;
}

Dist make_dist(const RunConfig& cfg, bool tied_embeddings) {
    LaunchInfo info = detect_launch();
    Dist d = make_dist_on(make_world(info), cfg, tied_embeddings);
    d.launch = info;
    log_set_rank(d.world->rank());
    return d;
}

ReplicaRows replica_rows(int micro_batch, int dp, int dp_rank, const std::string& uneven) {
    ETE_ASSERT(dp >= 1 && dp_rank >= 0 && dp_rank < dp);
    ReplicaRows r;
    if (micro_batch % dp == 0 || uneven == "drop") {
        r.rows = r.real = micro_batch / dp;
        ETE_CHECK(r.rows > 0,
                  "train.micro_batch = {} has fewer rows than the {} data-parallel replicas "
                  "(parallel.uneven_batch = drop would leave none)",
                  micro_batch, dp);
        r.first = dp_rank * r.rows;
        r.global_rows = r.rows * dp;
        return r;
    }
    ETE_CHECK(uneven == "pad", "parallel.uneven_batch = '{}': expected pad or drop", uneven);
    r.rows = (micro_batch + dp - 1) / dp;
    r.first = dp_rank * r.rows;
    r.real = std::max(0, std::min(r.rows, micro_batch - r.first));
    r.global_rows = micro_batch;
    return r;
}

}  // namespace ete
