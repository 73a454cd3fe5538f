// ete/train/cluster.cpp
#include "ete/train/cluster.h"

#include <algorithm>
#include <cmath>

#include <map>

#include "ete/backend/backend.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/mem_stats.h"
#include "ete/parallel/link_probe.h"
#include "ete/train/monitor.h"
#include "ete/train/toml_util.h"

namespace ete {

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct ClusterKey {
    bool required;
    double min;  // exclusive lower bound, or inclusive where `min_inclusive`
    bool min_inclusive;
    double max;
};

const std::map<std::string, ClusterKey>& cluster_keys() {
    static const std::map<std::string, ClusterKey> keys = {
        {"nodes", {true, 1, true, 1 << 20}},
        {"devices_per_node", {true, 1, true, 4096}},
        {"device_memory_gib", {true, 0, false, 1 << 20}},
        {"device_peak_tflops", {true, 0, false, 1e6}},
        {"intra_node_gbytes_per_s", {true, 0, false, 1e6}},
        {"inter_node_gbytes_per_s", {true, 0, false, 1e6}},
        {"intra_node_latency_us", {true, 0, true, 1e6}},
        {"inter_node_latency_us", {true, 0, true, 1e6}},
        {"device_fp32_tflops", {false, 0, false, 1e6}},
        {"gemm_efficiency", {false, 0, false, 1}},
        {"device_memory_gbytes_per_s", {false, 0, false, 1e6}},
        {"device_reserved_gib", {false, 0, true, 1 << 20}},
    };
    return keys;
}

// node_link_gbytes_per_s: a square, symmetric table of GB/s (one direction) between the devices
// of a node, positive off the diagonal (the diagonal is not read).
std::vector<std::vector<double>> parse_link_matrix(const toml::node& node,
                                                   const std::string& where) {
    const char* what = "cluster.node_link_gbytes_per_s";
    const toml::array* rows = node.as_array();
    ETE_CHECK(rows && !rows->empty(), "{}: {}: expected an array of rows of GB/s", where, what);
    std::vector<std::vector<double>> m;
    for (const toml::node& row : *rows) {
        const toml::array* r = row.as_array();
        ETE_CHECK(r && r->size() == rows->size(),
                  "{}: {}: row {}: expected {} numbers (a square table)", where, what, m.size(),
                  rows->size());
        m.emplace_back();
        for (const toml::node& x : *r) {
            const auto g = x.value<double>();
            ETE_CHECK(g && *g >= 0 && *g <= 1e6, "{}: {}: row {}: expected numbers in [0, 1e6]",
                      where, what, m.size() - 1);
            m.back().push_back(*g);
        }
    }
    for (size_t a = 0; a < m.size(); ++a)
        for (size_t b = 0; b < m.size(); ++b)
            ETE_CHECK(a == b || (m[a][b] > 0 && m[a][b] == m[b][a]),
                      "{}: {}: devices {} and {}: {} and {} GB/s (expected the same positive "
                      "bandwidth both ways)",
                      where, what, a, b, m[a][b], m[b][a]);
    return m;
}

}  // namespace

DeviceLinks cluster_links(const ClusterSpec& c) {
    const int n = c.devices(), per = c.devices_per_node;
    DeviceLinks l;
    l.gbps.assign(size_t(n), std::vector<double>(size_t(n), 0.0));
    for (int a = 0; a < n; ++a) {
        l.node.push_back(a / per);
        for (int b = 0; b < n; ++b)
            if (a != b)
                l.gbps[a][b] = a / per != b / per ? c.inter_gbytes_per_s
                               : c.node_gbps.empty()
                                   ? c.intra_gbytes_per_s
                                   : c.node_gbps[size_t(a % per)][size_t(b % per)];
    }
    return l;
}

ClusterSpec parse_cluster(const std::string& text, const std::string& where) {
    const toml::table root = parse_toml(text, where);
    for (auto&& [section, node] : root)
        ETE_CHECK(section.str() == "cluster" && node.is_table(),
                  "{}: top-level key '{}': expected only a [cluster] table", where, section.str());
    const toml::table* c = root["cluster"].as_table();
    ETE_CHECK(c, "{}: no [cluster] table (nodes, devices_per_node, device_memory_gib, ...)", where);
    std::map<std::string, double> v;
    std::string collectives = "nccl";
    std::vector<std::vector<double>> matrix;
    for (auto&& [key, node] : *c) {
        const std::string k(key.str());
        if (k == "node_link_gbytes_per_s") {
            matrix = parse_link_matrix(node, where);
            continue;
        }
        if (k == "collectives") {
            const auto s = node.value<std::string>();
            ETE_CHECK(s && (*s == "nccl" || *s == "mpi"),
                      "{}: cluster.collectives: expected \"nccl\" or \"mpi\"", where);
            collectives = *s;
            continue;
        }
        auto it = cluster_keys().find(k);
        ETE_CHECK(it != cluster_keys().end(),
                  "{}: cluster.{}: unknown key (expected nodes, devices_per_node, "
                  "device_memory_gib, device_peak_tflops, intra_node_gbytes_per_s, "
                  "inter_node_gbytes_per_s, intra_node_latency_us, inter_node_latency_us, "
                  "device_fp32_tflops, gemm_efficiency, device_memory_gbytes_per_s, "
                  "device_reserved_gib, collectives, node_link_gbytes_per_s)",
                  where, k);
        const auto x = node.value<double>();
        const ClusterKey& r = it->second;
        const bool integer = k == "nodes" || k == "devices_per_node";
        ETE_CHECK(x && (!integer || node.is_integer()) &&
                      (r.min_inclusive ? *x >= r.min : *x > r.min) && *x <= r.max,
                  "{}: cluster.{}: expected {} {} {} and at most {}", where, k,
                  integer ? "an integer" : "a number", r.min_inclusive ? ">=" : ">", r.min, r.max);
        v[k] = *x;
    }
    for (const auto& [k, r] : cluster_keys())
        ETE_CHECK(!r.required || v.count(k), "{}: cluster.{}: missing (a required key)", where, k);
    const double eff = v.count("gemm_efficiency") ? v["gemm_efficiency"] : 0.7;
    ClusterSpec s;
    s.nodes = int(v["nodes"]);
    s.devices_per_node = int(v["devices_per_node"]);
    // What a rank's model may use: the device's memory less what its process holds before the
    // model (the CUDA context, NCCL's buffers), which `ete train` sees as already taken.
    const double reserved = v.count("device_reserved_gib") ? v["device_reserved_gib"] : 1.0;
    ETE_CHECK(reserved < v["device_memory_gib"],
              "{}: cluster.device_reserved_gib = {}: expected less than device_memory_gib = {}",
              where, reserved, v["device_memory_gib"]);
    s.device_memory_gib = v["device_memory_gib"] - reserved;
    s.bf16_tflops = v["device_peak_tflops"] * eff;
    s.fp32_tflops = v.count("device_fp32_tflops") ? v["device_fp32_tflops"] * eff : 0;
    s.intra_gbytes_per_s = v["intra_node_gbytes_per_s"];
    s.inter_gbytes_per_s = v["inter_node_gbytes_per_s"];
    s.intra_latency_us = v["intra_node_latency_us"];
    s.inter_latency_us = v["inter_node_latency_us"];
    s.memory_gbytes_per_s =
        v.count("device_memory_gbytes_per_s") ? v["device_memory_gbytes_per_s"] : 0;
    s.nccl = collectives == "nccl";
    s.source = where;
    ETE_CHECK(matrix.empty() || int(matrix.size()) == s.devices_per_node,
              "{}: cluster.node_link_gbytes_per_s: {} rows, expected devices_per_node = {}", where,
              matrix.size(), s.devices_per_node);
    s.node_gbps = std::move(matrix);
    return s;
}

ClusterSpec load_cluster(const std::string& path) {
    return parse_cluster(read_file(path), path);
}

ClusterSpec local_cluster(Backend& backend) {
    ClusterSpec s;
    s.device_memory_gib = double(available_memory().bytes) / double(1 << 30);
    s.bf16_tflops = measure_peak_flops(backend, DType::BF16) / 1e12;
    s.fp32_tflops = measure_peak_flops(backend, DType::F32) / 1e12;
    s.memory_gbytes_per_s = measure_memory_gbps(backend);
    s.attention_s = measure_attention_s(backend);
    s.nccl = backend.name() == "cuda";
    s.overlap = s.nccl;
    s.source = fmt::format(
        "local ({} backend: {:.2f} GiB available, GEMMs {:.2f} bf16 / {:.2f} "
        "fp32 TFLOP/s, memory {:.1f} GB/s, attention {:.2f} ns a score x head dim; measured)",
        backend.name(), s.device_memory_gib, s.bf16_tflops, s.fp32_tflops, s.memory_gbytes_per_s,
        s.attention_s * 1e9);
    return s;
}

ClusterSpec measure_job(Communicator& world, Backend& backend, double bucket_mb) {
    ClusterSpec c = local_cluster(backend);
    // The slowest rank's: rates and bandwidth by their minimum, attention's time by its maximum.
    double rates[4] = {c.bf16_tflops, c.fp32_tflops, c.memory_gbytes_per_s, -c.attention_s};
    world.all_reduce(rates, 4, DType::F64, ReduceOp::Min);
    c.bf16_tflops = rates[0];
    c.fp32_tflops = rates[1];
    c.memory_gbytes_per_s = rates[2];
    c.attention_s = -rates[3];
    const int n = world.size();
    if (n == 1) return c;
    ProbeOptions opt;
    opt.bytes = std::max<uint64_t>(8, uint64_t(bucket_mb * double(1 << 20)) / 8 * 8);
    opt.latency_reps = 10;
    opt.bandwidth_reps = 2;
    const LinkMatrix m = probe_links(world, opt);
    std::map<std::string, int> per_host;
    for (const std::string& h : m.hosts) ++per_host[h];
    for (const auto& [h, k] : per_host)
        ETE_CHECK(k == per_host.begin()->second,
                  "measuring the job: host {} runs {} ranks but host {} runs {} (expected the "
                  "same number on every host)",
                  h, k, per_host.begin()->first, per_host.begin()->second);
    c.nodes = int(per_host.size());
    c.devices_per_node = n / c.nodes;
    std::vector<double> in_lat, out_lat;
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j)
            (m.hosts[size_t(i)] == m.hosts[size_t(j)] ? in_lat : out_lat)
                .push_back(m.latency_us[i][j]);
    double node_bus = 0;  // the slowest host's
    for (double b : m.node_bus_gbps) node_bus = node_bus == 0 ? b : std::min(node_bus, b);
    c.intra_gbytes_per_s = node_bus > 0 ? node_bus : m.world_bus_gbps;
    c.inter_gbytes_per_s = m.world_bus_gbps;
    c.intra_latency_us = in_lat.empty() ? median(out_lat) : median(in_lat);
    c.inter_latency_us = out_lat.empty() ? c.intra_latency_us : median(out_lat);
    c.device_memory_gib /= c.devices_per_node;  // a host's free memory, shared by its ranks
    c.source = fmt::format(
        "this job ({} ranks on {} host{}: GEMMs {:.3f} bf16 / {:.3f} fp32 TFLOP/s, memory "
        "{:.1f} GB/s, attention {:.2f} ns a score x head dim a rank, all-reduce {:.2f} GB/s "
        "within a host{}, {:.2f} GiB a rank; measured)",
        n, c.nodes, c.nodes > 1 ? "s" : "", c.bf16_tflops, c.fp32_tflops, c.memory_gbytes_per_s,
        c.attention_s * 1e9, c.intra_gbytes_per_s,
        c.nodes > 1 ? fmt::format(", {:.2f} GB/s over the job", c.inter_gbytes_per_s) : "",
        c.device_memory_gib);
    return c;
}

double ClusterSpec::gemm_tflops(const std::string& precision, int tp, double rows) const {
    const double fallback = precision == "fp32" ? fp32_tflops : bf16_tflops;
    auto lo = model_gemm_tflops.end(), hi = model_gemm_tflops.end();
    for (auto it = model_gemm_tflops.begin(); it != model_gemm_tflops.end(); ++it) {
        const auto& [p, t, r] = it->first;
        if (p != precision || t != tp) continue;
        if (r <= rows && (lo == model_gemm_tflops.end() || r > std::get<2>(lo->first))) lo = it;
        if (r >= rows && (hi == model_gemm_tflops.end() || r < std::get<2>(hi->first))) hi = it;
    }
    if (lo == model_gemm_tflops.end() && hi == model_gemm_tflops.end()) return fallback;
    if (lo == model_gemm_tflops.end()) return hi->second;
    if (hi == model_gemm_tflops.end() || lo == hi) return lo->second;
    const double r0 = std::get<2>(lo->first), r1 = std::get<2>(hi->first);
    const double f = std::log(rows / r0) / std::log(r1 / r0);
    return lo->second + f * (hi->second - lo->second);
}

void measure_model_gemms(ClusterSpec& c, Backend& backend, const ModelConfig& mc, int seq,
                         const std::vector<GemmPoint>& points, Communicator* world) {
    std::vector<double> rates;
    for (const auto& [precision, tp, rows] : points)
        rates.push_back(measure_model_gemm_flops(backend,
                                                 precision == "fp32" ? DType::F32 : DType::BF16, mc,
                                                 seq, rows, tp) /
                        1e12);
    if (world && !rates.empty())
        world->all_reduce(rates.data(), rates.size(), DType::F64, ReduceOp::Min);
    std::string seen;
    for (size_t i = 0; i < points.size(); ++i) {
        c.model_gemm_tflops[points[i]] = rates[i];
        const auto& [precision, tp, rows] = points[i];
        seen += fmt::format("{}{} tp {} rows {}: {:.3f}", seen.empty() ? "" : ", ", precision, tp,
                            rows, rates[i]);
    }
    if (!seen.empty()) c.source += fmt::format("; the model's GEMMs (TFLOP/s): {}", seen);
}

}  // namespace ete
