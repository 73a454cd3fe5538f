// ete/cli/plan_command.h — `ete plan`: the layouts a job could run with on a cluster, ranked
// (train/plan.h).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ete {

struct PlanArgs {
    std::string model;    // an HF model dir or an `ete train` TOML config
    std::string cluster;  // a cluster TOML file, or "local"
    int seq = 0;
    int64_t global_batch = 0;
    std::string goal = "pretrain";
    std::string layout;
    std::vector<std::string> overrides;
    bool json = false;
    int top = 10;
};
void add_plan_command(CLI::App& app, PlanArgs& a, std::function<int()>& run);

}  // namespace ete
