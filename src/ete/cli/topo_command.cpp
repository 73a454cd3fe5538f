// ete/cli/topo_command.cpp — `ete topo [--json] [--nvidia-smi-topo FILE]`: the host (hwloc) and
// the GPUs' pairwise links (`nvidia-smi topo -m`, run when nvidia-smi is on PATH).
#include "ete/cli/topo_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
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

int cmd_topo(const TopoArgs& a) {
    const HostTopology h = discover_host();
    const std::string text =
        a.nvidia_smi_topo.empty() ? nvidia_smi_topo_text() : read_file(a.nvidia_smi_topo);
    std::optional<GpuTopology> g;
    if (!text.empty())
        g = parse_nvidia_smi_topo(
            text, a.nvidia_smi_topo.empty() ? "nvidia-smi topo -m" : a.nvidia_smi_topo);
    if (a.json) {
        std::printf(
            "%s\n",
            json{{"host", host_json(h)}, {"gpu", g ? gpu_json(*g) : json(nullptr)}}.dump().c_str());
    } else {
        print_text(h, g ? &*g : nullptr);
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
    c->callback([&] { run = [&] { return cmd_topo(a); }; });
}

}  // namespace ete
