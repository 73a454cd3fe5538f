// ete/cli/topo_command.h — `ete topo`: this machine as the engine sees it (parallel/topology.h),
// and with --measure the job's links between its ranks (parallel/link_probe.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace ete {

struct TopoArgs {
    bool json = false;
    // A saved `nvidia-smi topo -m` output to read instead of running nvidia-smi.
    std::string nvidia_smi_topo;
    // Under mpirun / ete launch: the links between the ranks measured (parallel/link_probe.h).
    bool measure = false;
    double measure_mib = 8;
};
void add_topo_command(CLI::App& app, TopoArgs& a, std::function<int()>& run);

}  // namespace ete
