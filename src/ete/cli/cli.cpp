// ete/cli/cli.cpp — placeholder dispatch (subcommands land with the trainer).
#include "ete/cli/cli.h"

#include <cstdio>

namespace ete {
int cli_main(int argc, char** argv) {
    std::fprintf(stderr, "ete: no subcommands yet\n");
    return 2;
}
}  // namespace ete
