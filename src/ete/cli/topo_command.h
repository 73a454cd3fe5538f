// ete/cli/topo_command.h — `ete topo`: this machine as the engine sees it (parallel/topology.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace ete {

struct TopoArgs {
    bool json = false;
    // A saved `nvidia-smi topo -m` output to read instead of running nvidia-smi.
    std::string nvidia_smi_topo;
};
void add_topo_command(CLI::App& app, TopoArgs& a, std::function<int()>& run);

}  // namespace ete
