// ete/train/cluster.h — the machines a plan is made for (`ete plan --cluster FILE|local`): a TOML
// description of a cluster that is not here, or this machine measured.
//
// [cluster]
// nodes = 4                        # machines
// devices_per_node = 8             # accelerators (or ranks) per machine
// device_memory_gib = 80           # memory of one device
// device_peak_tflops = 989         # dense bf16 peak of one device (data sheet)
// intra_node_gbytes_per_s = 450    # per device, one direction (NVLink, shared memory)
// inter_node_gbytes_per_s = 50     # per device, one direction (InfiniBand, Ethernet)
// intra_node_latency_us = 3
// inter_node_latency_us = 10
// # optional:
// device_fp32_tflops = 67          # fp32 GEMM rate (layouts in fp32 are planned only with it)
// gemm_efficiency = 0.7            # achieved fraction of the peaks (default 0.7)
// device_memory_gbytes_per_s = 3350  # memory bandwidth: the optimizer step's time (else left out)
// device_reserved_gib = 1          # a device's memory its process holds before the model (the
//                                  # CUDA context, NCCL): not planned on (default 1)
// collectives = "nccl"             # "nccl" (default for a file) or "mpi": how ZeRO-2 reduces
// node_link_gbytes_per_s = [[0, 24, 10, 10], [24, 0, 10, 10], [10, 10, 0, 24], [10, 10, 24, 0]]
//                                  # a node's device pairs, GB/s one direction (symmetric; the
//                                  # diagonal unread): each layout priced on its placement
//
// Every key is checked: a missing required key, a value out of range or an unknown key is one
// error naming it and what was expected.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ete/model/config.h"
#include "ete/parallel/placement.h"

namespace ete {

class Backend;
class Communicator;

struct ClusterSpec {
    int nodes = 1, devices_per_node = 1;
    double device_memory_gib = 0;  // what a rank's model may use (a file's less its reserve)
    double bf16_tflops = 0, fp32_tflops = 0;  // achieved rates (peaks × gemm_efficiency)
    double intra_gbytes_per_s = 0, inter_gbytes_per_s = 0;
    double intra_latency_us = 0, inter_latency_us = 0;
    double memory_gbytes_per_s = 0;
    bool nccl = true;  // collectives with a real reduce (NCCL) or MPI's (stage 2 = stage 1)
    // Causal attention forward + backward, seconds per (score · head dim), measured through the
    // engine's kernels (local); 0: attention counted as FLOPs at the GEMM rate (a cluster file).
    double attention_s = 0;
    // Whether the dp all-reduce progresses while backward computes (NCCL's own streams); MPI on
    // CPU ranks moves data only inside MPI calls, on the cores the ranks compute on: exposed.
    bool overlap = true;
    std::string source;  // the file, or "local (...)"
    // The planned model's own GEMM rate (TFLOP/s, measure_model_gemms), by precision, tp and
    // rows of a replica's micro-batch; empty for a cluster file.
    std::map<std::tuple<std::string, int, int>, double> model_gemm_tflops;
    // node_link_gbytes_per_s: GB/s between the devices of a node (every node alike); empty: all
    // intra_gbytes_per_s. With it, ete plan prices each layout's collectives on the placement
    // `ete launch --placement auto` would make (parallel/placement.h).
    std::vector<std::vector<double>> node_gbps;

    int devices() const { return nodes * devices_per_node; }
    // The compute term's rate for a layout: the model's measured rate at (precision, tp),
    // interpolated in log(rows) between the rows measured (the nearest outside them); else the
    // cluster's one rate of the precision.
    double gemm_tflops(const std::string& precision, int tp, double rows) const;
};

// A point at which to measure the model's GEMMs: precision, tp, rows of a replica micro-batch.
using GemmPoint = std::tuple<std::string, int, int>;

// Parses a cluster file's text; `where` names it in errors.
ClusterSpec parse_cluster(const std::string& toml_text, const std::string& where);
ClusterSpec load_cluster(const std::string& path);
// The cluster's devices and links for placement: nodes' devices in order, a node's pairs from
// node_gbps (else intra_gbytes_per_s), pairs on different nodes inter_gbytes_per_s.
DeviceLinks cluster_links(const ClusterSpec& c);
// This machine as one device: the memory it can still get, the GEMM rates of `backend` in bf16
// and fp32, its memory bandwidth and its attention's speed measured through the engine's own
// kernels (monitor.h), MPI collectives; no links (one device has none to cross).
ClusterSpec local_cluster(Backend& backend);
// This job as a cluster (collective over world): nodes = its hosts (the same number of ranks on
// each), devices = its ranks; every rank's GEMM rates measured while all of them measure (they
// share the cores as they will in training; the slowest rank's rate counts); links: the
// all-reduce bus bandwidth of parallel.bucket_mb-sized messages within a host and over the job
// (what the cost model's rings see, memory copies and reductions included), latencies the median
// of the pairs' 8-byte ping-pongs (parallel/link_probe.h); a host's free memory split over its
// ranks. One rank: local_cluster.
ClusterSpec measure_job(Communicator& world, Backend& backend, double bucket_mb);
// Measures the model's own GEMM rate (train/monitor.h measure_model_gemm_flops) at each point into
// c.model_gemm_tflops, on every rank of `world` at once (null: this process alone; every rank
// passes the same points), the slowest rank's rate counting, as measure_job's rates do.
void measure_model_gemms(ClusterSpec& c, Backend& backend, const ModelConfig& mc, int seq,
                         const std::vector<GemmPoint>& points, Communicator* world);

}  // namespace ete
