// ete/cli/cli.h — subcommand dispatch. Only here do exceptions become exit codes.
#pragma once

#include <string>
#include <vector>

namespace ete {

int cli_main(int argc, char** argv);

// `ete launch -n N -- train ...` on this node: the job's config checks (train/job_check.h) for N
// ranks, run by the launcher before any rank starts, so a bad config is one error and no mpirun.
// Throws ConfigError; other commands, and --help, pass.
void check_launched_job(const std::vector<std::string>& args, int ranks);

}  // namespace ete
