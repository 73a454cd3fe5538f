// ete/cli/launch_placement.cpp — `ete launch --placement auto` (launch_placement.h).
#include "ete/cli/launch_placement.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "ete/cli/cli.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/parallel/device_links.h"
#include "ete/train/dist.h"
#include "ete/train/plan.h"
#include "ete/train/run_setup.h"

namespace ete {

namespace {

std::vector<int> all_cores(const std::vector<HostCore>& cores) {
    std::vector<int> v(cores.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = int(i);
    return v;
}

}  // namespace

PlacementHost placement_host(const std::string& topo_file) {
    PlacementHost h;
    h.cores = host_cores();
    const std::string text = topo_file.empty() ? nvidia_smi_topo_text() : read_file(topo_file);
    if (!text.empty())
        h.gpus = parse_nvidia_smi_topo(text, topo_file.empty() ? "nvidia-smi topo -m" : topo_file);
    return h;
}

AutoPlacement auto_placement(const MeshShape& mesh, const AxisBytes& bytes,
                             const std::vector<HostfileEntry>& hosts, int n,
                             const PlacementHost& ph) {
    ETE_CHECK(!ph.cores.empty(), "launch --placement auto: hwloc found no cores on this host");
    const int gpus = ph.gpus ? int(ph.gpus->gpus.size()) : 0;
    std::vector<int> per_node;  // devices of each host used
    int total = 0;
    for (size_t k = 0; k < hosts.size() && total < n; ++k) {
        const int d =
            std::min(gpus > 0 ? std::min(hosts[k].slots, gpus) : hosts[k].slots, n - total);
        per_node.push_back(d);
        total += d;
    }
    ETE_CHECK(total == n,
              "launch --placement auto: -n {} but the hosts give {} devices ({} slots{})", n, total,
              hosts.size() == 1 ? "its" : "their",
              gpus > 0 ? fmt::format(", at most {} GPUs a host", gpus) : "");
    std::vector<std::vector<int>> block_cores;
    const DeviceLinks links =
        gpus > 0 ? gpu_links(*ph.gpus, per_node) : core_links(ph.cores, per_node, &block_cores);
    AutoPlacement out;
    out.placement = place_ranks(mesh, links, bytes);
    const Placement& p = out.placement;
    // Each device's host, slot list and (GPUs) index on its host.
    std::vector<std::string> host_of, slots_of;
    std::vector<int> gpu_of;
    for (size_t k = 0; k < per_node.size(); ++k)
        for (int i = 0; i < per_node[k]; ++i) {
            host_of.push_back(hosts[k].host);
            gpu_of.push_back(i);
            std::vector<int> which;
            if (gpus > 0) {
                const int numa = ph.gpus->numa_affinity[size_t(i)];
                for (size_t c = 0; c < ph.cores.size(); ++c)
                    if (numa >= 0 && ph.cores[c].numa == numa) which.push_back(int(c));
                if (which.empty()) which = all_cores(ph.cores);
            } else {
                which = block_cores[slots_of.size()];
            }
            slots_of.push_back(rankfile_slots(ph.cores, which));
        }
    const int busiest = *std::max_element(per_node.begin(), per_node.end());
    out.threads = gpus > 0 ? std::max(1, int(ph.cores.size()) / busiest)
                           : int(block_cores.empty() ? 1 : block_cores[0].size());
    for (int r = 0; r < n; ++r) {
        const int d = p.device_of_rank[size_t(r)];
        out.rankfile +=
            fmt::format("rank {}={} slot={}\n", r, host_of[size_t(d)], slots_of[size_t(d)]);
        if (gpus > 0) out.device_map += fmt::format("{}{}", r ? "," : "", gpu_of[size_t(d)]);
    }
    const MeshAxis launch[3] = {MeshAxis::Tp, MeshAxis::Dp, MeshAxis::Pp};
    const double in_order =
        placement_cost(mesh, links, bytes, linear_placement(mesh, launch)).cost_s;
    out.report = fmt::format(
        "placement auto: dp {} x tp {} x pp {} on {} {} of {} node{}: {}\n"
        "  communication {:.3g} s a step if none of it overlapped (launch order: {:.3g} s); {} ({} "
        "search steps, lower bound {:.3g} s)",
        mesh.dp, mesh.tp, mesh.pp, n, gpus > 0 ? "GPUs" : "core blocks", per_node.size(),
        per_node.size() > 1 ? "s" : "", describe_placement(mesh, links, p.device_of_rank),
        p.cost.cost_s, in_order, p.optimal ? "optimal" : "the best found, not proven optimal",
        p.steps, p.lower_bound_s);
    return out;
}

std::string apply_auto_placement(LaunchArgs& a) {
    std::optional<RunConfig> cfg = launched_train_config(a.args);
    ETE_CHECK(cfg.has_value(),
              "launch --placement auto: expected `-- train [CONFIG] [--set ...]` after the "
              "options (the layout to place is the train config's parallel.dp/tp/pp)");
    ETE_CHECK(!cfg->parallel_auto,
              "launch --placement auto: the train config sets parallel.auto = true, whose layout "
              "is chosen after launch (use one of the two)");
    const MeshShape mesh = resolve_mesh(*cfg, a.n);  // parallel.dp = 0: the ranks left
    cfg->parallel_dp = mesh.dp;
    const ModelConfig mc = resolve_model(*cfg, load_tokenizer(*cfg));
    const AxisBytes bytes = comm_bytes(*cfg, mc, trainable_elements(mc, *cfg));
    const std::vector<HostfileEntry> hosts =
        a.hostfile.empty() ? std::vector<HostfileEntry>{{"localhost", a.n, "localhost"}}
                           : read_hostfile(a.hostfile);
    const AutoPlacement p = auto_placement(mesh, bytes, hosts, a.n, placement_host(a.topo_file));
    const char* tmp = std::getenv("TMPDIR");
    a.rankfile = fmt::format("{}/ete-launch-{}.rankfile", tmp && *tmp ? tmp : "/tmp", getpid());
    write_file_atomic(a.rankfile, p.rankfile);
    a.device_map = p.device_map;
    a.threads = p.threads;
    return p.report;
}

}  // namespace ete
