// ete/train/dist.h — this process's place in a training job: the world, the dp x tp x pp mesh,
// the groups the trainer communicates over, and which rows of each global micro-batch this
// data-parallel replica runs.
//
// A job launched without MPI (or with one rank) gets the trivial layout: a self communicator,
// every group of size 1, no communication at all.
#pragma once

#include <memory>
#include <string>

#include "ete/parallel/launch_env.h"
#include "ete/parallel/mesh.h"
#include "ete/train/config.h"

namespace ete {

struct Dist {
    LaunchInfo launch;
    std::unique_ptr<Communicator> world;
    ParallelGroups groups;             // dp, tp, pp (groups.world points at world)
    std::unique_ptr<Communicator> mp;  // the tp x pp ranks of this replica (grad norm, loss)
    // First and last pipeline stage of this (dp, tp) column, which both hold the tied
    // embedding when pp > 1 and the model ties it; null elsewhere.
    std::unique_ptr<Communicator> tied;

    const MeshShape& shape() const { return groups.shape; }
    bool main() const { return world->rank() == 0; }  // logs, metrics, checkpoints
    bool first_stage() const { return groups.pp_rank == 0; }
    bool last_stage() const { return groups.pp_rank == groups.shape.pp - 1; }
};

// The mesh of cfg on world_size ranks: parallel.dp = 0 becomes world / (tp * pp); errors name
// the parallel.* keys.
MeshShape resolve_mesh(const RunConfig& cfg, int world_size);

// Detects the launcher, creates the world (MPI only when launched with more than one rank),
// builds the groups and sets every communicator's timeout to parallel.timeout_s.
Dist make_dist(const RunConfig& cfg, bool tied_embeddings);
// The same on a given world (tests run it on the in-process fake world).
Dist make_dist_on(std::unique_ptr<Communicator> world, const RunConfig& cfg, bool tied_embeddings);

// Which rows of a global micro-batch of `micro_batch` rows replica `dp_rank` of `dp` runs.
// When dp divides micro_batch every replica takes micro_batch / dp consecutive rows. Otherwise
// "pad" gives every replica ceil(micro_batch / dp) rows and fills the rows past the end with
// ignored targets (no loss, no gradient: the same update as one process), and "drop" uses only
// floor(micro_batch / dp) * dp rows of each micro-batch.
struct ReplicaRows {
    int rows = 0;         // rows this replica runs per micro-batch (its micro-batch size)
    int first = 0;        // index of its first row in the global micro-batch
    int real = 0;         // rows that hold samples (the rest are padding)
    int global_rows = 0;  // samples per global micro-batch actually used
};
ReplicaRows replica_rows(int micro_batch, int dp, int dp_rank, const std::string& uneven);

}  // namespace ete
