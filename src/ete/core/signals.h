// ete/core/signals.h — the process's stop and checkpoint signals, handled from the first
// instruction of main (cli/main.cpp), so a signal that lands while a rank is still starting up
// (loading a model, MPI_Init) is recorded, never the default action that kills it.
//
// Deferred handling (`ete train`, `ete launch`): the handlers only record.
//   SIGTERM, SIGHUP, SIGUSR2  a stop request. Repeats are counted and ignored: Slurm sends SIGTERM
//                             twice within milliseconds at a time limit, and mpirun sends its own
//                             after Slurm's, and neither may interrupt the checkpoint.
//   SIGINT                    a stop request; a second SIGINT (Ctrl-C twice at a terminal) ends
//                             the process at once, by the default action.
//   SIGUSR1                   a checkpoint request (Slurm's `--signal=USR1@T` warning).
// Every other command keeps the default actions.
#pragma once

#include <csignal>
#include <string>

namespace ete {

enum class SignalMode { Default, Deferred };

// The mode of `ete ARGS...`: Deferred for the train and launch commands. Pure (tested).
SignalMode signal_mode_for(int argc, char** argv);

// Installs the recording handlers of SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 (Deferred), or
// keeps the default actions (Default); either way the five are unblocked afterwards, also when
// the parent or a re-exec left them blocked. Idempotent; returns whether this call installed them.
bool install_signal_handlers(SignalMode mode);
// Before this binary re-execs itself: blocks the five (a blocked signal stays pending across
// exec, and the new image's install_signal_handlers delivers it). Returns the mask to restore
// when the exec fails.
sigset_t block_signals_for_exec();
// Blocks SIGTERM, SIGINT and SIGHUP only (before `ete launch` execs mpirun: launch_supervise.cpp).
void block_termination_signals();
// Restores the default actions (for a scope that installed the handlers itself: tests).
void uninstall_signal_handlers();

// The first stop signal's number since the last reset, or 0.
int stop_signal();
// How many stop signals arrived (SIGTERM, SIGINT, SIGHUP, SIGUSR2 together).
int stop_signal_count();
// Seconds since the first stop signal arrived (monotonic clock), or -1 without one.
double seconds_since_stop_signal();
// Whether SIGUSR1 arrived since the last call (the request is consumed).
bool take_checkpoint_signal();
// Forgets every request (a new run in the same process).
void reset_signal_requests();

// "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", or "signal N".
std::string signal_name(int sig);

}  // namespace ete
