// ete/cli/launch.h — `ete launch -n N [--hostfile F] [--mpirun PATH] -- <ete args...>`: a
// convenience wrapper that execs Open MPI's mpirun on this very ete binary. A multi-process run is
// a plain MPI program; this only picks sensible mpirun flags (DESIGN.md §1).
//
// Flags chosen (mpirun_argv):
//   --allow-run-as-root         when running as root (containers), which Open MPI refuses otherwise
//   without a hostfile (one node), K = cores / N:
//     N <= cores: --map-by slot:PE=K --bind-to core  each rank owns K whole cores, so its OpenMP
//                                                    and BLAS threads never share a core
//     N >  cores: --oversubscribe --bind-to none     more ranks than cores: no binding, K = 1
//     -x OMP_NUM_THREADS=K unless the user set OMP_NUM_THREADS (the user's value wins)
//   with a hostfile (nodes and their slots are the hostfile's): --bind-to none, and a user-set
//     OMP_NUM_THREADS is forwarded to the other nodes with -x OMP_NUM_THREADS.
//   --placement auto (launch_placement.h): --rankfile F (each rank's host and cores) in place of
//     the mapping and binding flags, -x OMP_NUM_THREADS=K (the cores a rank was given) unless the
//     user set it, and with GPUs -x ETE_CUDA_DEVICE_MAP=d0,d1,... (world rank -> GPU).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ete {

struct LaunchArgs {
    int n = 0;                      // ranks (mpirun -np)
    std::string hostfile;           // empty = this node only
    std::string mpirun = "mpirun";  // name (PATH lookup) or path
    std::vector<std::string> args;  // what each rank runs: ete's own arguments, e.g. {"train", ...}
    int max_restarts = 0;           // relaunches after a restartable failure (supervise.cpp)
    int min_ranks = 0;              // > 0: relaunch on fewer ranks (down to this) if slots are gone
    std::string placement = "order";  // order (launch order) | auto (launch_placement.h)
    std::string topo_file;            // --placement auto: `nvidia-smi topo -m` text of a node
    // Set per attempt by --placement auto:
    std::string rankfile;    // the Open MPI rankfile written for the attempt
    std::string device_map;  // ETE_CUDA_DEVICE_MAP's value, "" without GPUs
    int threads = 0;         // OMP_NUM_THREADS of a rank
};

// Facts about this process and machine that the mpirun flags depend on.
struct LaunchHost {
    std::string self_exe;          // this ete binary (absolute path)
    bool is_root = false;          // effective uid 0
    int cores = 1;                 // physical cores this process may run on (Open MPI's slots)
    bool omp_threads_set = false;  // OMP_NUM_THREADS is in the environment
};
LaunchHost launch_host();

// Pure: the full mpirun command line (argv[0] = a.mpirun). Throws ete::Error on n < 1 or no args.
std::vector<std::string> mpirun_argv(const LaunchArgs& a, const LaunchHost& host);

// Runs mpirun as a child and supervises it (launch_supervise.cpp): SIGTERM, SIGINT and SIGHUP
// become SIGUSR2 to the job (every rank checkpoints and stops with exit 4; repeats are ignored, a
// second SIGINT ends the launcher at once), SIGUSR1 is forwarded (checkpoint now); a restartable
// failure (exit 75 or a rank killed by a signal) is relaunched from the newest checkpoint up to
// --max-restarts times. With
// --min-ranks, before every attempt each host of the hostfile is probed (probe_hosts) and the
// attempt runs on the slots of the hosts that answered, when at least --min-ranks remain (the
// hostfile is re-read, so a scheduler may also rewrite it). Returns the job's exit code.
// Throws when mpirun cannot be run (names the Debian package openmpi-bin).
int cmd_launch(const LaunchArgs& a);

// One line of an Open MPI hostfile: "host slots=K ..." (a bare host has 1 slot; # comments).
struct HostfileEntry {
    std::string host;
    int slots = 1;
    std::string line;  // without its comment, as written again for a later attempt
};
std::vector<HostfileEntry> read_hostfile(const std::string& path);
int hostfile_slots(const std::string& path);  // the sum over its lines
// Pure: a one-rank mpirun of this ete binary (--version) on `name` only.
std::vector<std::string> probe_argv(const LaunchArgs& a, const LaunchHost& host,
                                    const std::string& name);
// Runs probe_argv on every host at once; the exit code of each (0 = it answers), -1 for one that
// gave no answer within timeout_s (its probe is killed).
std::vector<int> probe_hosts(const LaunchArgs& a, const LaunchHost& host,
                             const std::vector<HostfileEntry>& hosts, double timeout_s);
// Writes the lines of the hosts whose code is 0 to $TMPDIR/ete-launch-<pid>.hosts; its path.
std::string write_live_hostfile(const std::vector<HostfileEntry>& hosts,
                                const std::vector<int>& codes);
// Whether an exit code of the job is worth a relaunch: 75 (a failed transport) or a rank killed
// by a signal (128 + N, as mpirun reports it).
bool restartable_exit(int code);
// The ete arguments of attempt `attempt`: from the second on, `train` resumes (--resume auto)
// unless it names a checkpoint already.
std::vector<std::string> attempt_args(const std::vector<std::string>& args, int attempt);

// Registers the `launch` subcommand on app; when it is chosen, `run` is set to call cmd_launch(a).
// `a` must outlive the parse and the call.
void add_launch_command(CLI::App& app, LaunchArgs& a, std::function<int()>& run);

}  // namespace ete
