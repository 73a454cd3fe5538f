// ete — the one binary. Everything lives in ete_cli; main only takes the signals over (before
// anything else, so a signal during start-up is recorded: core/signals.h), fixes OpenBLAS and
// dispatches, after setting how freed memory is kept (core/mem_stats.h).
#include "ete/backend/cpu/openblas_util.h"
#include "ete/cli/cli.h"
#include "ete/core/mem_stats.h"
#include "ete/core/signals.h"

int main(int argc, char** argv) {
    ete::install_signal_handlers(ete::signal_mode_for(argc, argv));
    ete::keep_freed_memory();  // before the first large allocation (core/mem_stats.h)
    ete::cpu::openblas_fix_coretype(argv);
    return ete::cli_main(argc, argv);
}
