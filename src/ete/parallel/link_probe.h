// ete/parallel/link_probe.h — `ete topo --measure`: the links between the ranks of a job measured
// over the communicator the trainer uses (one short, bounded run; every rank calls it).
//
// Pairs: a round-robin tournament (the circle method) — n − 1 rounds (n rounds for odd n, one
// rank resting), each pairing every rank with another, all pairs of a round measured at once (as
// they share links when a collective runs): per pair, `latency_reps` ping-pongs of 8 bytes
// (latency = half a round trip, the median) and `bandwidth_reps` ping-pongs of `bytes` (one
// direction's bandwidth = bytes / half a round trip, the best). Collectives: an all-reduce of
// `bytes` of fp32 over the whole job and over each host's ranks, reported as bus bandwidth,
// 2(n − 1)/n · bytes / time (what each rank's link carries in a ring), the best of the reps.
// Time: about (n − 1) · (latency_reps · latency + 2 · bandwidth_reps · bytes / bandwidth).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ete/parallel/communicator.h"

namespace ete {

struct ProbeOptions {
    uint64_t bytes = 8u << 20;
    int latency_reps = 20;
    int bandwidth_reps = 3;
};

struct LinkMatrix {
    std::vector<std::string> hosts;         // per rank
    std::vector<std::vector<double>> gbps;  // [i][j] one direction, 0 on the diagonal
    std::vector<std::vector<double>> latency_us;
    double world_bus_gbps = 0;            // all-reduce over every rank (0 for one rank)
    std::vector<std::string> node_names;  // hosts with more than one rank
    std::vector<double> node_bus_gbps;    // all-reduce over each such host's ranks
};

// Collective over `world`: every rank returns the whole matrix.
LinkMatrix probe_links(Communicator& world, const ProbeOptions& opt = {});

// The partner of `rank` in round `round` of the circle method over n ranks (-1: it rests).
int tournament_partner(int n, int round, int rank);
int tournament_rounds(int n);

}  // namespace ete
