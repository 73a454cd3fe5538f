// ete/cli/cli.h — subcommand dispatch. Only here do exceptions become exit codes.
#pragma once

namespace ete {
int cli_main(int argc, char** argv);
}
