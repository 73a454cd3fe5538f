// tests/cli/plan_test.cpp — `ete plan`'s pieces (train/cluster.h, train/plan.h): the cluster
// file's keys and errors, --layout pins, the cost model's terms against the formulas of plan.h
// written out here, memory rejections, placement, and the CLI's JSON.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/train/cluster.h"
#include "ete/train/memory_estimate.h"
#include "ete/train/monitor.h"
#include "ete/train/plan.h"
#include "ete/train/run_setup.h"
#include "shell.h"

namespace ete {
namespace {

namespace fs = std::filesystem;

const char* const kCluster = R"([cluster]
nodes = 2
devices_per_node = 4
device_memory_gib = 1.5
device_peak_tflops = 100
intra_node_gbytes_per_s = 200
inter_node_gbytes_per_s = 10
intra_node_latency_us = 2
inter_node_latency_us = 20
)";

std::string without(const std::string& key) {
    std::string s = kCluster;
    const size_t at = s.find(key);
    return s.erase(at, s.find('\n', at) + 1 - at);
}

TEST(Cluster, ReadsEveryKeyAndTheAchievedRate) {
    const ClusterSpec c = parse_cluster(std::string(kCluster) +
                                            "gemm_efficiency = 0.5\n"
                                            "device_fp32_tflops = 20\n"
                                            "collectives = \"mpi\"\n",
                                        "c.toml");
    EXPECT_EQ(c.nodes, 2);
    EXPECT_EQ(c.devices(), 8);
    EXPECT_DOUBLE_EQ(c.device_memory_gib, 0.5);  // 1.5 less the default 1 GiB reserved
    EXPECT_DOUBLE_EQ(c.bf16_tflops, 50);
    EXPECT_DOUBLE_EQ(c.fp32_tflops, 10);
    EXPECT_DOUBLE_EQ(c.inter_gbytes_per_s, 10);
    EXPECT_DOUBLE_EQ(c.intra_latency_us, 2);
    EXPECT_FALSE(c.nccl);
    EXPECT_DOUBLE_EQ(parse_cluster(kCluster, "c.toml").bf16_tflops, 70);  // default 0.7
    EXPECT_DOUBLE_EQ(parse_cluster(std::string(kCluster) + "device_reserved_gib = 0.25\n", "c")
                         .device_memory_gib,
                     1.25);
}

// The model's measured GEMM rate by (precision, tp, rows): exact at a measured point, linear in
// log(rows) between two (rows 2 between 1 and 4: half way), the nearest outside them, the
// cluster's one rate where nothing was measured for that precision and tp. Bounds: a few
// roundings of log and one multiply-add (≤ 1e-15 relative), far below a wrong point (≥ 1).
TEST(Cluster, TheModelGemmRateIsInterpolatedInLogRows) {
    ClusterSpec c = parse_cluster(kCluster, "c.toml");
    c.model_gemm_tflops[{"bf16", 1, 1}] = 10;
    c.model_gemm_tflops[{"bf16", 1, 4}] = 30;
    c.model_gemm_tflops[{"bf16", 2, 4}] = 7;
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 1, 1), 10);
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 1, 4), 30);
    EXPECT_NEAR(c.gemm_tflops("bf16", 1, 2), 20, 1e-12);
    EXPECT_NEAR(c.gemm_tflops("bf16", 1, std::sqrt(2.0)), 15, 1e-12);
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 1, 64), 30);
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 1, 0.5), 10);
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 2, 1), 7);
    EXPECT_DOUBLE_EQ(c.gemm_tflops("bf16", 4, 1), 70);  // not measured: peak x 0.7
    EXPECT_DOUBLE_EQ(c.gemm_tflops("fp32", 1, 1), 0);   // a file without an fp32 rate
}

TEST(Cluster, BadFilesNameTheKey) {
    auto error = [](const std::string& text) {
        try {
            parse_cluster(text, "c.toml");
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(error(without("device_memory_gib")).find("cluster.device_memory_gib: missing"),
              std::string::npos);
    EXPECT_NE(error(std::string(kCluster) + "gpus = 3\n").find("cluster.gpus: unknown key"),
              std::string::npos);
    std::string zero = kCluster;
    zero.replace(zero.find("nodes = 2"), 9, "nodes = 0");
    EXPECT_NE(error(zero).find("cluster.nodes: expected an integer >= 1"), std::string::npos);
    std::string half = kCluster;
    half.replace(half.find("nodes = 2"), 9, "nodes = 1.5");
    EXPECT_NE(error(half).find("cluster.nodes: expected an integer"), std::string::npos);
    EXPECT_NE(error("[cluster\n").find("c.toml:1:"), std::string::npos);
    EXPECT_NE(error("[nodes]\n").find("expected only a [cluster] table"), std::string::npos);
    EXPECT_NE(error(std::string(kCluster) + "device_reserved_gib = 1.5\n")
                  .find("cluster.device_reserved_gib = 1.5: expected less than device_memory_gib"),
              std::string::npos);
    const std::string m = std::string(kCluster) + "node_link_gbytes_per_s = ";
    EXPECT_NE(error(m + "[[0, 1], [1, 0]]\n").find("2 rows, expected devices_per_node = 4"),
              std::string::npos);
    EXPECT_NE(error(m + "[[0, 1, 1, 1], [1, 0, 1], [1, 1, 0, 1], [1, 1, 1, 0]]\n")
                  .find("row 1: expected 4 numbers"),
              std::string::npos);
    EXPECT_NE(error(m + "[[0, 2, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]\n")
                  .find("devices 0 and 1: 2 and 1 GB/s"),
              std::string::npos);
    EXPECT_NE(error(m + "[[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]\n")
                  .find("devices 0 and 1: 0 and 0 GB/s"),
              std::string::npos);
    EXPECT_NE(error(m + "7\n").find("node_link_gbytes_per_s: expected an array"),
              std::string::npos);
}

TEST(PlanLayoutPins, ParseAndRefuseByName) {
    const auto p = parse_layout_pins("dp=2,tp=4,recompute=full,method=qlora");
    EXPECT_EQ(p.at("dp"), "2");
    EXPECT_EQ(p.at("method"), "qlora");
    EXPECT_THROW(parse_layout_pins("cp=2"), Error);
    EXPECT_THROW(parse_layout_pins("dp=0"), Error);
    EXPECT_THROW(parse_layout_pins("recompute=some"), Error);
    EXPECT_EQ(parse_layout_pins("zero_stage=3").at("zero_stage"), "3");
    try {
        parse_layout_pins("zero_stage=4");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("zero_stage=4: expected 0, 1, 2 or 3"),
                  std::string::npos);
    }
}

// A small Llama (4 layers) the plans size for real.
PlanRequest request(const std::string& goal) {
    PlanRequest r;
    r.base = default_run_config();
    for (const char* w :
         {"model.vocab_size=8192", "model.hidden_size=256", "model.num_layers=4",
          "model.num_heads=8", "model.num_kv_heads=4", "model.intermediate_size=704",
          "model.max_position_embeddings=512", "data.tokenizer=\"\""})
        apply_override(r.base, w);
    r.model = resolve_model(r.base, std::nullopt);
    r.seq = 512;
    r.global_batch = 32;
    r.goal = goal;
    return r;
}

// One pinned layout's cost, term by term, against plan.h's formulas written out again.
TEST(Plan, TheCostModelIsTheDocumentedOne) {
    PlanRequest req = request("pretrain");
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,recompute=full,zero_stage=1");
    ClusterSpec c =
        parse_cluster(std::string(kCluster) + "device_memory_gbytes_per_s = 1000\n", "c.toml");
    c.device_memory_gib = 100;
    const Plan p = make_plan(req, c);
    ASSERT_EQ(p.ranked.size(), 1u);  // bf16 only (no fp32 rate), full only (pretrain)
    const PlanCandidate& x = p.ranked[0];
    EXPECT_EQ(x.layout.grad_accum, 4);
    // Bounds: the plan evaluates these expressions in double, in an order that may differ from
    // the test's by a few roundings (≤ ~10 · 2^-53 relative). Every term is below 1 s, so 1e-9 s
    // (1e-12 relative for compute and the optimizer) is far above that and far below any
    // mistake in a term (a missing all-reduce, a wrong link: ≥ 1e-6 s here). No CPU kernel is
    // involved: the same on every CPU and kernel choice.
    const double n = 8, tokens = 32.0 * 512, rate = 70e12;
    const double compute =
        model_flops_per_token(req.model, 512, 0, false) * tokens / n / rate * (1 + 1.0 / 3);
    EXPECT_NEAR(x.cost.compute, compute, 1e-12 * compute);
    EXPECT_EQ(x.cost.bubble, 0);
    // tp = 2 inside a node: 6 all-reduces per layer (recompute) of 2 rows x 512 x 256 bf16.
    const double act = 2.0 * 512 * 256 * 2;
    const double ar = 2.0 * 1 / 2 * act / 200e9 + 2.0 * 1 * 2e-6;
    EXPECT_NEAR(x.cost.tp, 4 * 4 * 6 * ar, 1e-9);
    // dp = 4 over ranks 0, 2, 4, 6: across the two nodes. The rank's trainable elements, as its
    // memory estimate counts them.
    const double rank_elems = double(plan_memory(req.model, layout_config(req.base, 512, x.layout),
                                                 MeshShape{4, 2, 1}, 0, 0, 0, 1)
                                         .gradients) /
                              4;
    const double grad = rank_elems * 4;
    const double dp = 2.0 * 3 / 4 * grad / 10e9 + 2.0 * 3 * 20e-6;
    EXPECT_NEAR(x.cost.dp, dp, 1e-9);
    // The ops between the GEMMs at 1000 GB/s: 8 rows a replica x 512 tokens, per token 4 layers
    // x (24 C + 8 F / tp + 4 (H + KV) D / tp) + 3 V / tp + 2 C fp32 elements, with recompute's
    // forward again.
    const double elems =
        4 * (24.0 * 256 + 8.0 * 704 / 2 + 4.0 * 12 * 32 / 2) + 3.0 * 8192 / 2 + 2.0 * 256;
    const double elementwise = 8.0 * 512 * elems * 4 / 1000e9 * (1 + 1.0 / 3);
    EXPECT_NEAR(x.cost.elementwise, elementwise, 1e-12);
    EXPECT_EQ(x.cost.attention, 0);  // a cluster file: attention is FLOPs at the GEMM rate
    EXPECT_NEAR(x.cost.dp_exposed, std::max(dp - (compute + elementwise) / 4 * 2 / 3, dp), 1e-9);
    EXPECT_NEAR(x.cost.zero, 3.0 / 4 * grad / 10e9, 1e-9);
    EXPECT_NEAR(x.cost.optimizer, (rank_elems / 4 * 30 + rank_elems * 16) / 1000e9, 1e-12);
    EXPECT_NEAR(x.tokens_per_s, tokens / x.cost.total(), 1e-6);
    // A measured attention (seconds per score x head dim, as --cluster local measures it) takes
    // attention out of the FLOPs; without overlap (MPI on CPU ranks) the dp all-reduce is exposed.
    ClusterSpec m = c;
    m.attention_s = 1e-12;
    m.overlap = false;
    const PlanCandidate y = make_plan(req, m).ranked.at(0);
    const double gemm_only = (model_flops_per_token(req.model, 512, 0, false) -
                              attention_flops_per_token(req.model, 512)) *
                             tokens / n / rate * (1 + 1.0 / 3);
    EXPECT_NEAR(y.cost.compute, gemm_only, 1e-12 * gemm_only);
    EXPECT_NEAR(y.cost.attention, 8.0 * 4 * 4 * 512 * 513 / 2 * 32 * 1e-12 * (1 + 1.0 / 3), 1e-12);
    EXPECT_NEAR(y.cost.dp_exposed, y.cost.dp, 1e-12);
    // The engine's own switches: parallel.overlap = false reduces after backward (all of it
    // exposed); parallel.grad_bf16 = true all-reduces bf16 gradients (half the bytes, the same
    // latencies), and placement weighs the same.
    PlanRequest no_overlap = req;
    no_overlap.base.parallel_overlap = false;
    const PlanCandidate z = make_plan(no_overlap, c).ranked.at(0);
    EXPECT_NEAR(z.cost.dp_exposed, dp, 1e-9);
    EXPECT_NEAR(z.cost.total() - x.cost.total(), dp - x.cost.dp_exposed, 1e-9);
    PlanRequest bf16_grads = req;
    bf16_grads.base.parallel_grad_bf16 = true;
    const PlanCandidate h = make_plan(bf16_grads, c).ranked.at(0);
    EXPECT_NEAR(h.cost.dp, 2.0 * 3 / 4 * rank_elems * 2 / 10e9 + 2.0 * 3 * 20e-6, 1e-9);
    // What placement weighs (comm_bytes) is the same model without the links: the tp term less
    // its latencies, times the bandwidth; dp's ring share of the fp32 gradients of total/(tp·pp).
    const RunConfig lc = layout_config(req.base, 512, x.layout);
    const int64_t total = trainable_elements(req.model, lc);
    const AxisBytes b = comm_bytes(lc, req.model, total);
    EXPECT_NEAR(b.tp / 200e9, x.cost.tp - 4 * 4 * 6 * (2.0 * 1 * 2e-6), 1e-9);
    EXPECT_NEAR(b.dp, 2.0 * 3 / 4 * double(total) / 2 * 4, 1e-6);
    EXPECT_EQ(b.pp, 0);
    const RunConfig hc = layout_config(bf16_grads.base, 512, x.layout);
    EXPECT_NEAR(comm_bytes(hc, req.model, total).dp, b.dp / 2, 1e-6);
}

// ZeRO-3 (plan.h): no all-reduce after backward and no gather after the step; instead, every
// micro-batch, each group's gradient reduced to its owners (not overlapped) and its parameters
// gathered for forward and again for backward, prefetched behind the work where the cluster
// overlaps. The layout of TheCostModelIsTheDocumentedOne at stage 3: 4 micro-batches, 4 layers +
// embeddings + head = 6 groups, dp = 4 across the nodes (10 GB/s, 20 µs). Same bounds as there.
TEST(Plan, ZeroStage3CostsItsGathersAndReductions) {
    PlanRequest req = request("pretrain");
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,recompute=full,zero_stage=1");
    ClusterSpec c =
        parse_cluster(std::string(kCluster) + "device_memory_gbytes_per_s = 1000\n", "c.toml");
    c.device_memory_gib = 100;
    const PlanCandidate one = make_plan(req, c).ranked.at(0);
    const double n = double(plan_memory(req.model, layout_config(req.base, 512, one.layout),
                                        MeshShape{4, 2, 1}, 0, 0, 0, 1)
                                .gradients) /
                     4;
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,recompute=full,zero_stage=3");
    double full_reduce = 0;
    for (const bool nccl : {false, true}) {
        for (const bool overlap : {true, false}) {
            c.nccl = nccl, c.overlap = overlap;
            const PlanCandidate x = make_plan(req, c).ranked.at(0);
            EXPECT_EQ(x.layout.zero_stage, 3);
            EXPECT_NEAR(x.cost.compute, one.cost.compute, 1e-12 * one.cost.compute);
            const double move = nccl ? 3.0 / 4 * n * 4 / 10e9 : 2.0 * 3 / 4 * n * 4 / 10e9;
            const double reduce = 4 * (move + 6 * 20e-6);
            EXPECT_NEAR(x.cost.dp, reduce, 1e-9);
            EXPECT_NEAR(x.cost.dp_exposed, reduce, 1e-9);
            full_reduce = x.cost.dp;
            const double gathers = 4 * 2 * (3.0 / 4 * n * 4 / 10e9 + 6 * 2 * 20e-6);
            const double exposed =
                overlap ? std::max(gathers - x.cost.work(), gathers / 6) : gathers;
            EXPECT_NEAR(x.cost.zero, exposed, 1e-9);
            EXPECT_NEAR(x.cost.optimizer, (n / 4 * 30 + n * 16) / 1000e9, 1e-12);
        }
    }
    // Without resharding, one gather a forward.
    req.base.parallel_zero_reshard_after_forward = false;
    c.overlap = false;
    EXPECT_NEAR(make_plan(req, c).ranked.at(0).cost.zero,
                4 * (3.0 / 4 * n * 4 / 10e9 + 6 * 2 * 20e-6), 1e-9);
    // A fine-tune plans stage 3 for LoRA and QLoRA too (their base sharded): the reductions move
    // the adapters' gradients only (the same latencies, a fraction of the bytes).
    req = request("finetune");
    req.pins = parse_layout_pins("dp=8,tp=1,pp=1,micro_batch=8,zero_stage=3,method=qlora");
    c.device_memory_gib = 100;
    const PlanCandidate q = make_plan(req, c).ranked.at(0);
    EXPECT_EQ(q.layout.method, "qlora");
    EXPECT_LT(q.cost.dp, 0.5 * full_reduce);
}

// Where the model's GEMMs are measured: every precision and tp of the request's layouts at their
// fewest and most rows a replica micro-batch (one point when pinned), and the compute term then
// runs at the measured rate of the layout's point.
TEST(Plan, TheModelGemmRateIsMeasuredWhereTheLayoutsAre) {
    PlanRequest req = request("pretrain");
    ClusterSpec c = parse_cluster(kCluster, "c.toml");
    c.device_memory_gib = 100;
    c.fp32_tflops = 5;
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,precision=bf16");
    EXPECT_EQ(gemm_points(req, c), (std::vector<GemmPoint>{{"bf16", 2, 2}}));
    req.pins = parse_layout_pins("pp=1,dp=4");  // tp 2 inside a node; rows 1..8 of 32
    const std::vector<GemmPoint> all = gemm_points(req, c);
    EXPECT_EQ(all, (std::vector<GemmPoint>{
                       {"bf16", 2, 1}, {"bf16", 2, 8}, {"fp32", 2, 1}, {"fp32", 2, 8}}));
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,precision=bf16,recompute=none");
    const double before = make_plan(req, c).ranked.at(0).cost.compute;
    // Half the file's 70: the compute term doubles. Bound: one division by the rate in double
    // either way (≤ ~1e-16 relative); a wrong rate or point is off by ≥ 10%. No kernel involved.
    c.model_gemm_tflops[{"bf16", 2, 2}] = 35;
    EXPECT_NEAR(make_plan(req, c).ranked.at(0).cost.compute, 2 * before, 1e-12 * before);
}

// A node whose fast pairs are (0, 2) and (1, 3): launch order would put each tp pair on a 10
// GB/s link; with node_link_gbytes_per_s the plan prices the layout on the placement `ete launch
// --placement auto` makes, tp on the 24 GB/s pairs, and says so; dp still crosses the nodes.
TEST(Plan, NodeLinksPriceTheLayoutOnItsPlacement) {
    PlanRequest req = request("pretrain");
    req.pins = parse_layout_pins("dp=4,tp=2,pp=1,micro_batch=8,recompute=full,zero_stage=1");
    ClusterSpec c = parse_cluster(std::string(kCluster) +
                                      "node_link_gbytes_per_s = [[0, 10, 24, 10], [10, 0, 10, 24], "
                                      "[24, 10, 0, 10], [10, 24, 10, 0]]\n",
                                  "c.toml");
    c.device_memory_gib = 100;
    EXPECT_EQ(cluster_links(c).gbps[0][2], 24);
    EXPECT_EQ(cluster_links(c).gbps[0][1], 10);
    EXPECT_EQ(cluster_links(c).gbps[3][4], 10);  // across nodes: inter_node_gbytes_per_s
    const PlanCandidate x = make_plan(req, c).ranked.at(0);
    // As in TheCostModelIsTheDocumentedOne, at 24 GB/s: 6 all-reduces a layer of 4, 4 micro-
    // batches, each 2 · 1/2 of 2 rows x 512 x 256 bf16 plus 2 latencies. Bound: a sum of 96
    // like terms in double (≤ ~1e-16 s of rounding on ~5 ms); 1e-9 s is far below the 2.4x of a
    // wrong link. Pure arithmetic: the same on every CPU.
    const double act = 2.0 * 512 * 256 * 2;
    EXPECT_NEAR(x.cost.tp, 4 * 4 * 6 * (act / 24e9 + 2 * 2e-6), 1e-9);
    EXPECT_EQ(x.placement, "tp: 4 groups on 24 GB/s; dp: 2 groups on 10 GB/s");
    ClusterSpec launch_order = c;
    launch_order.node_gbps.clear();
    launch_order.intra_gbytes_per_s = 10;
    const PlanCandidate y = make_plan(req, launch_order).ranked.at(0);
    EXPECT_NEAR(y.cost.tp, 4 * 4 * 6 * (act / 10e9 + 2 * 2e-6), 1e-9);
    EXPECT_NEAR(y.cost.dp, x.cost.dp, 1e-12);  // the same formula on the same link: rounding only
    EXPECT_TRUE(y.placement.empty());
}

// Full training's smallest layout needs more a device than the adapters' (its fp32 masters,
// gradients and moments of every weight): with the device's memory between the two, only LoRA
// and QLoRA layouts fit. The figures come from a first plan on large devices, since the estimate's
// GEMM workspace depends on the engine this CPU's kernels pick (a bf16 GEMM through the sgemm
// fallback stages fp32 copies).
TEST(Plan, WhatDoesNotFitIsRejectedWithItsNeed) {
    PlanRequest req = request("finetune");
    ClusterSpec c = parse_cluster(kCluster, "c.toml");
    c.device_memory_gib = 100;
    double full = 1e9, adapters = 1e9;
    for (const PlanCandidate& x : make_plan(req, c).ranked) {
        double& least = x.layout.method == "full" ? full : adapters;
        least = std::min(least, x.peak_gib);
    }
    ASSERT_LT(adapters, full);
    const double limit = (adapters + full) / 2;
    c.device_memory_gib = limit;
    const Plan p = make_plan(req, c);
    ASSERT_FALSE(p.ranked.empty());
    for (const PlanCandidate& x : p.ranked) {
        EXPECT_LE(x.peak_gib, limit);
        EXPECT_NE(x.layout.method, "full");
    }
    bool full_named = false;
    for (const auto& [l, why] : p.rejected)
        full_named =
            full_named || (l.method == "full" && why.find("GiB on stage") != std::string::npos &&
                           why.find("| optimizer ") != std::string::npos);  // and by term
    EXPECT_TRUE(full_named);
    // Ranked fastest first (ties within 0.2% by simplicity).
    for (size_t i = 1; i < p.ranked.size(); ++i)
        EXPECT_LE(p.ranked[i - 1].cost.total(), p.ranked[i].cost.total() * 1.002 + 1e-12);
}

TEST(Plan, TensorParallelismStaysInANodeUnlessPinned) {
    PlanRequest req = request("pretrain");
    ClusterSpec c = parse_cluster(kCluster, "c.toml");
    c.device_memory_gib = 100;
    Plan p = make_plan(req, c);
    ASSERT_FALSE(p.ranked.empty());
    for (const PlanCandidate& x : p.ranked) EXPECT_LE(x.layout.tp, 4);
    req.pins = parse_layout_pins("tp=8,pp=1");  // heads 8, kv 4: tp 8 replicates kv heads
    p = make_plan(req, c);
    ASSERT_FALSE(p.ranked.empty());
    // Across nodes, its all-reduces run at the inter-node link's rate and latency: per
    // micro-batch (32 of one row) and layer (4), 4 of (1, 512, 256) bf16 activations.
    req.pins = parse_layout_pins("tp=8,pp=1,micro_batch=1,recompute=none");
    const Plan p8 = make_plan(req, c);
    ASSERT_FALSE(p8.ranked.empty());
    const double act = 512.0 * 256 * 2, ar = 2.0 * 7 / 8 * act / 10e9 + 2.0 * 7 * 20e-6;
    EXPECT_NEAR(p8.ranked[0].cost.tp, 32 * 4 * 4 * ar, 1e-9);
}

// What `ete train` would refuse before starting (train/job_check.h) is rejected with its error:
// QLoRA quantizing a 64-wide model at tp = 4 (o_proj's shards of 16 columns cut its blocks).
TEST(Plan, WhatTrainRefusesIsRejectedWithItsError) {
    PlanRequest req = request("finetune");
    for (const char* w : {"model.hidden_size=64", "model.num_heads=4", "model.num_kv_heads=2",
                          "model.intermediate_size=96"})
        apply_override(req.base, w);
    req.model = resolve_model(req.base, std::nullopt);
    req.pins = parse_layout_pins("tp=4,pp=1");
    ClusterSpec c = parse_cluster(kCluster, "c.toml");
    c.device_memory_gib = 100;
    const Plan p = make_plan(req, c);
    ASSERT_FALSE(p.ranked.empty());
    for (const PlanCandidate& x : p.ranked) EXPECT_NE(x.layout.method, "qlora");
    size_t refused = 0;
    for (const auto& [l, why] : p.rejected) {
        EXPECT_EQ(l.method, "qlora");
        refused += why.find("NF4 blocks of 64 elements would straddle") != std::string::npos;
    }
    EXPECT_GT(refused, 0u);
    EXPECT_EQ(refused, p.rejected.size());
}

// The article's virtualised-PCIe case: every link slow (0.5 GB/s, 200 µs). Tensor and pipeline
// parallelism then cost more than they split, and a fine-tune's winner is pure data parallelism
// with adapters (LoRA's, or QLoRA's where memory needs it), whose all-reduce is the adapters only.
TEST(Plan, WeakLinksPickDataParallelAdapters) {
    PlanRequest req = request("finetune");
    const ClusterSpec c = parse_cluster(
        "[cluster]\nnodes = 1\ndevices_per_node = 4\ndevice_memory_gib = 16\n"
        "device_peak_tflops = 100\nintra_node_gbytes_per_s = 0.5\ninter_node_gbytes_per_s = 0.5\n"
        "intra_node_latency_us = 200\ninter_node_latency_us = 200\n",
        "vgpu.toml");
    const Plan p = make_plan(req, c);
    ASSERT_FALSE(p.ranked.empty());
    const PlanLayout& w = p.ranked[0].layout;
    EXPECT_EQ(w.dp, 4);
    EXPECT_EQ(w.tp, 1);
    EXPECT_EQ(w.pp, 1);
    EXPECT_NE(w.method, "full");
    // Full training would all-reduce every weight's gradient over the slow link instead.
    for (const PlanCandidate& x : p.ranked) {
        if (x.layout.method == "full" && x.layout.dp == 4) {
            EXPECT_GT(x.cost.dp, 10 * p.ranked[0].cost.dp);
        }
    }
}

TEST(PlanCli, JsonHasTheBestAndEveryCandidate) {
    const fs::path dir = fs::temp_directory_path() / ("ete_plan_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    write_file_atomic((dir / "c.toml").string(), std::string(kCluster));
    write_file_atomic((dir / "m.toml").string(),
                      "[model]\nvocab_size = 8192\nhidden_size = 256\nnum_layers = 4\n"
                      "num_heads = 8\nnum_kv_heads = 4\nintermediate_size = 704\n"
                      "max_position_embeddings = 512\n[data]\ntokenizer = \"\"\n");
    const std::string base = "plan --model " + (dir / "m.toml").string() + " --cluster " +
                             (dir / "c.toml").string() + " --seq 512 --global-batch 32";
    ShellResult r = run_shell(ete_cmd(base + " --goal finetune --json") + " 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    for (const char* k :
         {"dp", "tp", "pp", "micro_batch", "grad_accum", "recompute", "zero_stage", "precision",
          "method", "predicted_step_s", "predicted_tokens_per_s", "predicted_peak_gib"})
        EXPECT_TRUE(j["best"].contains(k)) << k;
    ASSERT_GT(j["candidates"].size(), 1u);
    EXPECT_EQ(j["candidates"][0], j["best"]);
    EXPECT_NE(j["command"].get<std::string>().find("ete launch -n 8 --hostfile HOSTS -- train"),
              std::string::npos);
    r = run_shell(ete_cmd(base + " --layout tp=3") + " 2>&1");  // 3 does not divide 8 devices
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find("ete: error: plan: no layout of 8 devices matches --layout 'tp=3'"),
              std::string::npos)
        << r.out;
    // Devices too small for any layout: the first rejections with their need, then the error.
    std::string small = kCluster;
    small.replace(small.find("device_memory_gib = 1.5"), 23,
                  "device_memory_gib = 0.001\ndevice_reserved_gib = 0");
    write_file_atomic((dir / "small.toml").string(), small);
    r = run_shell(ete_cmd("plan --model " + (dir / "m.toml").string() + " --cluster " +
                          (dir / "small.toml").string() + " --seq 512 --global-batch 32") +
                  " 2>&1");
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.out.find(" GiB on stage "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("ete: error: plan: no layout fits"), std::string::npos) << r.out;
    r = run_shell(ete_cmd(base + " --layout cp=2") + " 2>&1");
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.out.find("unknown field 'cp'"), std::string::npos) << r.out;
    fs::remove_all(dir);
}

}  // namespace
}  // namespace ete
