// ete — the one binary. Everything lives in ete_cli; main only fixes OpenBLAS and dispatches.
#include "ete/backend/cpu/openblas_util.h"
#include "ete/cli/cli.h"

int main(int argc, char** argv) {
    ete::cpu::openblas_fix_coretype(argv);
    return ete::cli_main(argc, argv);
}
