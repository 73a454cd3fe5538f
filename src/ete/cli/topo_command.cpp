// ete/cli/topo_command.cpp — `ete topo [--json] [--nvidia-smi-topo FILE] [--measure]`: the host
// (hwloc), the GPUs' pairwise links (`nvidia-smi topo -m`, run when nvidia-smi is on PATH), and
// under mpirun the links between the ranks measured (parallel/link_probe.h).
#include "ete/cli/topo_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/parallel/launch_env.h"
#include "ete/parallel/link_probe.h"
#include "ete/parallel/topology.h"

namespace ete {

namespace {

using json = nlohmann::json;

json host_json(const HostTopology& h) {
    return {{"cpu_model", h.cpu_model}, {"packages", h.packages}, {"numa_nodes", h.numa_nodes},
            {"cores", h.cores},         {"pus", h.pus},           {"numa_bytes", h.numa_bytes},
            {"l1d_bytes", h.l1d_bytes}, {"l2_bytes", h.l2_bytes}, {"l3_bytes", h.l3_bytes},
            {"l3_count", h.l3_count},   {"nics", h.nics}};
}

json gpu_json(const GpuTopology& g) {
    json gpus = json::array();
    for (size_t i = 0; i < g.gpus.size(); ++i) {
        json links = json::array(), nics = json::array();
        for (const Link& l : g.gpu_gpu[i]) links.push_back(link_name(l));
        for (const Link& l : g.gpu_nic[i]) nics.push_back(link_name(l));
        gpus.push_back(
            {{"name", g.gpus[i]},
             {"links", links},
             {"nic_links", nics},
             {"cpu_affinity", g.cpu_affinity[i]},
             {"numa_affinity", g.numa_affinity[i] < 0 ? json(nullptr) : json(g.numa_affinity[i])}});
    }
    return {{"gpus", gpus}, {"nics", g.nics}};
}

std::string mib(uint64_t b) {
    if (b >= (uint64_t(1) << 30)) return fmt::format("{:.1f} GiB", double(b) / double(1 << 30));
    if (b >= (uint64_t(1) << 20)) return fmt::format("{:.0f} MiB", double(b) / double(1 << 20));
    return fmt::format("{} KiB", b >> 10);
}

void print_text(const HostTopology& h, const GpuTopology* g) {
    std::printf("host: %s | %d package%s, %d NUMA node%s, %d cores, %d hardware threads\n",
                h.cpu_model.empty() ? "CPU" : h.cpu_model.c_str(), h.packages,
                h.packages == 1 ? "" : "s", h.numa_nodes, h.numa_nodes == 1 ? "" : "s", h.cores,
                h.pus);
    for (size_t i = 0; i < h.numa_bytes.size(); ++i)
        std::printf("  NUMA node %zu: %s\n", i, mib(h.numa_bytes[i]).c_str());
    std::printf("  caches: L1d %s, L2 %s, L3 %s x %d\n", mib(h.l1d_bytes).c_str(),
                mib(h.l2_bytes).c_str(), mib(h.l3_bytes).c_str(), h.l3_count);
    std::string nics;
    for (const std::string& n : h.nics) nics += (nics.empty() ? "" : ", ") + n;
    std::printf("  network devices: %s\n", nics.empty() ? "none" : nics.c_str());
    if (!g) {
        std::printf("GPUs: none (no nvidia-smi, or it reports no GPU)\n");
        return;
    }
    std::printf("GPUs: %zu; links (nvidia-smi topo -m):\n     ", g->gpus.size());
    for (const std::string& n : g->gpus) std::printf(" %6s", n.c_str());
    std::printf("  NUMA\n");
    for (size_t i = 0; i < g->gpus.size(); ++i) {
        std::printf("%-5s", g->gpus[i].c_str());
        for (const Link& l : g->gpu_gpu[i]) std::printf(" %6s", link_name(l).c_str());
        std::printf("  %s\n",
                    g->numa_affinity[i] < 0 ? "N/A" : std::to_string(g->numa_affinity[i]).c_str());
    }
}

json measured_json(const LinkMatrix& m) {
    return {{"ranks", m.hosts.size()},
            {"hosts", m.hosts},
            {"gbytes_per_s", m.gbps},
            {"latency_us", m.latency_us},
            {"world_bus_gbytes_per_s", m.world_bus_gbps},
            {"node_names", m.node_names},
            {"node_bus_gbytes_per_s", m.node_bus_gbps}};
}

void print_measured(const LinkMatrix& m) {
    const size_t n = m.hosts.size();
    std::printf("\nlinks measured between %zu ranks (GB/s one direction | latency us):\n     ", n);
    for (size_t j = 0; j < n; ++j) std::printf(" %13zu", j);
    std::printf("  host\n");
    for (size_t i = 0; i < n; ++i) {
        std::printf("%-5zu", i);
        for (size_t j = 0; j < n; ++j) {
            if (i == j)
                std::printf(" %13s", "-");
            else
                std::printf(" %6.2f|%6.1f", m.gbps[i][j], m.latency_us[i][j]);
        }
        std::printf("  %s\n", m.hosts[i].c_str());
    }
    std::printf("all-reduce bus bandwidth: %.2f GB/s over every rank", m.world_bus_gbps);
    for (size_t k = 0; k < m.node_names.size(); ++k)
        std::printf("; %.2f GB/s within %s", m.node_bus_gbps[k], m.node_names[k].c_str());
    std::printf("\n");
}

int cmd_topo(const TopoArgs& a) {
    std::optional<LinkMatrix> measured;
    bool quiet = false;  // ranks other than 0 of a measured job print nothing
    if (a.measure) {
        ETE_CHECK(a.measure_mib > 0 && a.measure_mib <= 1024,
                  "topo --measure-mib {}: expected a size in MiB from 1/1024 to 1024",
                  a.measure_mib);
        std::unique_ptr<Communicator> world = make_world(detect_launch());
        ProbeOptions opt;
        opt.bytes = std::max<uint64_t>(8, uint64_t(a.measure_mib * double(1 << 20)) / 8 * 8);
        measured = probe_links(*world, opt);
        quiet = world->rank() != 0;
    }
    if (quiet) return 0;
    const HostTopology h = discover_host();
    const std::string text =
        a.nvidia_smi_topo.empty() ? nvidia_smi_topo_text() : read_file(a.nvidia_smi_topo);
    std::optional<GpuTopology> g;
    if (!text.empty())
        g = parse_nvidia_smi_topo(
            text, a.nvidia_smi_topo.empty() ? "nvidia-smi topo -m" : a.nvidia_smi_topo);
    if (a.json) {
        json out{{"host", host_json(h)}, {"gpu", g ? gpu_json(*g) : json(nullptr)}};
        if (measured) out["measured"] = measured_json(*measured);
        std::printf("%s\n", out.dump().c_str());
    } else {
        print_text(h, g ? &*g : nullptr);
        if (measured && measured->hosts.size() < 2)
            std::printf(
                "\nlinks: one rank, nothing to measure (run `ete launch -n N -- topo "
                "--measure`)\n");
        else if (measured)
            print_measured(*measured);
    }
    return 0;
}

}  // namespace

void add_topo_command(CLI::App& app, TopoArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "topo", "This machine as the engine sees it: NUMA nodes, cores, caches, NICs, GPU links");
    c->add_flag("--json", a.json, "one JSON object: host, gpu (null without GPUs)");
    c->add_option("--nvidia-smi-topo", a.nvidia_smi_topo,
                  "read a saved `nvidia-smi topo -m` output instead of running nvidia-smi")
        ->check(CLI::ExistingFile);
    c->add_flag("--measure", a.measure,
                "under mpirun / ete launch: measure every pair of ranks' bandwidth and latency "
                "and the all-reduce bus bandwidth (rank 0 prints)");
    c->add_option("--measure-mib", a.measure_mib, "message size of the bandwidth probes")
        ->capture_default_str();
    c->callback([&] { run = [&] { return cmd_topo(a); }; });
}

}  // namespace ete
