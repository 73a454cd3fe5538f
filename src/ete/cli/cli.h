// ete/cli/cli.h — subcommand dispatch. Only here do exceptions become exit codes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ete/train/config.h"

namespace ete {

int cli_main(int argc, char** argv);

// `ete launch -n N -- train ...` on this node: the job's config checks (train/job_check.h) for N
// ranks, run by the launcher before any rank starts, so a bad config is one error and no mpirun.
// Throws ConfigError; other commands, and --help, pass.
void check_launched_job(const std::vector<std::string>& args, int ranks);

// The run config of `ete launch`'s `train ...` arguments (config file and --set applied); none for
// another command or --help / --dump-config. Throws ConfigError on arguments train refuses.
std::optional<RunConfig> launched_train_config(const std::vector<std::string>& args);

}  // namespace ete
