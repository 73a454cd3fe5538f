// ete/cli/launch.cpp — `ete launch`: build the mpirun command line and exec it.
#include "ete/cli/launch.h"
#include "ete/cli/cli_checks.h"

#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

#include "ete/core/error.h"

namespace ete {
namespace {

std::string self_exe_path() {
    std::string buf(4096, '\0');
    ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size());
    ETE_CHECK(n > 0 && size_t(n) < buf.size(),
              "/proc/self/exe: cannot resolve the ete binary to run on each rank");
    buf.resize(size_t(n));
    return buf;
}

int read_sys_int(const std::string& path) {
    std::ifstream in(path);
    int v = -1;
    in >> v;
    return in ? v : -1;
}

// Physical cores among the CPUs this process may use (hyperthreads of one core count once), as
// Open MPI counts slots; the CPU count when the topology files are missing.
int physical_cores() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    std::set<std::pair<int, int>> cores;  // (package, core)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        int pkg = read_sys_int(dir + "physical_package_id");
        int core = read_sys_int(dir + "core_id");
        if (pkg < 0 || core < 0) return CPU_COUNT(&set);
        cores.insert({pkg, core});
    }
    return std::max(1, int(cores.size()));
}

}  // namespace

LaunchHost launch_host() {
    LaunchHost h;
    h.self_exe = self_exe_path();
    h.is_root = geteuid() == 0;
    h.cores = physical_cores();
    h.omp_threads_set = std::getenv("OMP_NUM_THREADS") != nullptr;
    return h;
}

std::vector<std::string> mpirun_argv(const LaunchArgs& a, const LaunchHost& host) {
    ETE_CHECK(a.n >= 1, "launch -n {}: expected at least 1 rank", a.n);
    ETE_CHECK(!a.args.empty(),
              "launch: expected the ete arguments after --, e.g. ete launch -n 2 -- train "
              "cfg.toml");
    ETE_ASSERT(host.cores >= 1 && !host.self_exe.empty());
    std::vector<std::string> argv = {a.mpirun, "-np", std::to_string(a.n)};
    if (host.is_root) argv.push_back("--allow-run-as-root");
    if (!a.rankfile.empty()) {
        if (!a.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", a.hostfile});
        argv.insert(argv.end(), {"--rankfile", a.rankfile});
        if (!host.omp_threads_set)
            argv.insert(argv.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(a.threads)});
        else if (!a.hostfile.empty())
            argv.insert(argv.end(), {"-x", "OMP_NUM_THREADS"});
        if (!a.device_map.empty())
            argv.insert(argv.end(), {"-x", "ETE_CUDA_DEVICE_MAP=" + a.device_map});
    } else if (!a.hostfile.empty()) {
        argv.insert(argv.end(), {"--hostfile", a.hostfile, "--bind-to", "none"});
        if (host.omp_threads_set) argv.insert(argv.end(), {"-x", "OMP_NUM_THREADS"});
    } else {
        int threads = std::max(1, host.cores / a.n);
        if (a.n > host.cores) {
            argv.insert(argv.end(), {"--oversubscribe", "--bind-to", "none"});
        } else {
            argv.insert(argv.end(),
                        {"--map-by", "slot:PE=" + std::to_string(threads), "--bind-to", "core"});
        }
        if (!host.omp_threads_set) {
            argv.insert(argv.end(), {"-x", "OMP_NUM_THREADS=" + std::to_string(threads)});
        }
    }
    argv.push_back(host.self_exe);
    argv.insert(argv.end(), a.args.begin(), a.args.end());
    return argv;
}

void add_launch_command(CLI::App& app, LaunchArgs& a, std::function<int()>& run) {
    auto* c = app.add_subcommand(
        "launch", "Run an ete command on N ranks with mpirun: ete launch -n N -- train cfg.toml");
    c->add_option("-n,--np", a.n, "number of ranks")->required()->check(positive());
    c->add_option("--hostfile", a.hostfile, "Open MPI hostfile (one node per line, slots=K)")
        ->check(CLI::ExistingFile);
    c->add_option("--mpirun", a.mpirun, "mpirun to exec (name or path)")->capture_default_str();
    c->add_option("--max-restarts", a.max_restarts,
                  "relaunch from the newest checkpoint after a lost rank or a timeout, this many "
                  "times")
        ->check(non_negative());
    c->add_option("--min-ranks", a.min_ranks,
                  "with --hostfile: probe its hosts before each attempt and run on the slots "
                  "of those that answer, if at least this many")
        ->check(non_negative());
    c->add_option("--placement", a.placement,
                  "order: ranks in launch order; auto: each rank on the device the placement "
                  "search picks for the train config's layout (docs/planner.md)")
        ->check(CLI::IsMember({"order", "auto"}))
        ->capture_default_str();
    c->add_option("--nvidia-smi-topo", a.topo_file,
                  "with --placement auto: the text of `nvidia-smi topo -m` on a node (default: "
                  "run it; no GPUs: this host's cores)")
        ->check(CLI::ExistingFile);
    c->add_option("args", a.args, "the ete command each rank runs, after --")->required();
    c->footer(
        "\nEach rank runs this ete binary with ARGS. Without --hostfile the ranks share this "
        "node's cores\n(OMP_NUM_THREADS = cores / N unless set). SIGTERM/SIGINT/SIGHUP: every "
        "rank checkpoints and stops (exit 4);\nSIGUSR1: checkpoint now. Exit codes: the job's (0, "
        "1, "
        "3, 4, 75 = restartable). See docs/operations.md.");
    c->callback([&] { run = [&] { return cmd_launch(a); }; });
}

}  // namespace ete
