// ete/cli/launch_supervise.cpp — `ete launch` runs mpirun as its child and supervises it:
// signals become a clean stop of every rank, and restartable failures are relaunched from the
// newest checkpoint (docs/operations.md, Restarts).
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "ete/cli/cli.h"
#include "ete/cli/launch.h"
#include "ete/cli/launch_placement.h"
#include "ete/core/error.h"
#include "ete/core/signals.h"
#include "ete/parallel/mpi_comm.h"
#include "ete/train/trainer.h"

namespace ete {

namespace {

std::string join_args(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
    return s;
}

std::string describe_exit(int code) {
    if (code == 0) return "exit 0";
    if (code == kExitCommFailure) return "exit 75 (a timeout or a lost peer)";
    if (code > 128) return fmt::format("exit {} (a rank killed by signal {})", code, code - 128);
    if (code == 3) return "exit 3 (stopped on repeated anomalies)";
    if (code == kExitStopped) return "exit 4 (stopped by a signal, checkpoint saved)";
    return fmt::format("exit {}", code);
}

// Forks and execs mpirun; waits for it while forwarding signals. Returns its exit code (128 + N
// when it died of signal N) and whether a stop was forwarded.
int run_job(std::vector<std::string> argv, bool* stopped) {
    std::vector<char*> c_argv;
    for (auto& s : argv) c_argv.push_back(s.data());
    c_argv.push_back(nullptr);
    std::fflush(nullptr);
    int ready[2];
    // Closed on exec: the child writes to it only when execvp fails.
    ETE_CHECK(::pipe2(ready, O_CLOEXEC) == 0, "ete launch: pipe: {}", std::strerror(errno));
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    ETE_CHECK(pid >= 0, "ete launch: fork: {}", std::strerror(errno));
    if (pid == 0) {
        ::close(ready[0]);
        // mpirun never sees SIGTERM, SIGINT or SIGHUP: it would answer them by killing the ranks
        // a second later (SIGCONT, SIGTERM after odls_base_sigkill_timeout, SIGKILL after twice
        // it), before a checkpoint of a large model is written, and Slurm's scancel signals every
        // process of the job, mpirun too. They stay blocked across exec (mpirun leaves them so;
        // it unblocks everything for the ranks), and the launcher turns them into SIGUSR2, which
        // mpirun forwards. A launcher that dies sends the same clean stop (no job is left
        // behind). mpirun stays in the launcher's process group: it reads the terminal for rank
        // 0's stdin.
        block_termination_signals();
        ::prctl(PR_SET_PDEATHSIG, SIGUSR2);
        if (::getppid() != launcher) _exit(1);  // it died before the death signal was set
        ::execvp(c_argv[0], c_argv.data());
        const int err = errno;
        if (::write(ready[1], &err, sizeof(err)) < 0) _exit(127);
        _exit(127);
    }
    ::close(ready[1]);
    int err = 0;
    const bool exec_failed = ::read(ready[0], &err, sizeof(err)) == ssize_t(sizeof(err));
    ::close(ready[0]);
    if (exec_failed) {
        ::waitpid(pid, nullptr, 0);
        ETE_CHECK(err != ENOENT,
                  "mpirun '{}' not found: install Open MPI (Debian package openmpi-bin) or pass "
                  "--mpirun PATH",
                  argv[0]);
        throw_error(fmt::format("mpirun '{}': cannot run it: {}", argv[0], std::strerror(err)));
    }
    int status = 0;
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (stop_signal() != 0 && !*stopped) {
            // SIGUSR2, which mpirun forwards and every rank answers with a checkpoint (mpirun
            // answers SIGTERM itself, by killing the ranks). Repeats change nothing: Slurm sends
            // SIGTERM twice at a time limit; a second Ctrl-C ends the launcher at once
            // (core/signals.h) and mpirun with it.
            ::kill(pid, SIGUSR2);
            *stopped = true;
        }
        if (take_checkpoint_signal()) ::kill(pid, SIGUSR1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

// A host that does not answer a probe within this long is left out of the attempt.
constexpr double kProbeTimeoutS = 30;

// Re-reads the hostfile and probes its hosts; the slots of those that answered. When some did
// not, *live is the hostfile of the others (else it is left empty).
int answering_slots(const LaunchArgs& a, const LaunchHost& host, std::string* live) {
    const std::vector<HostfileEntry> hosts = read_hostfile(a.hostfile);
    const std::vector<int> codes = probe_hosts(a, host, hosts, kProbeTimeoutS);
    int slots = 0;
    bool all = true;
    for (size_t i = 0; i < hosts.size(); ++i) {
        if (codes[i] == 0) {
            slots += hosts[i].slots;
            continue;
        }
        all = false;
        const std::string why = codes[i] < 0 ? fmt::format("no answer in {:.0f} s", kProbeTimeoutS)
                                             : fmt::format("mpirun exit {}", codes[i]);
        std::fprintf(stderr, "ete launch: host %s does not answer (%s): %d slots left out\n",
                     hosts[i].host.c_str(), why.c_str(), hosts[i].slots);
    }
    if (all) {
        if (!live->empty()) ::unlink(live->c_str());
        live->clear();
    } else {
        *live = write_live_hostfile(hosts, codes);
    }
    return slots;
}

// Open MPI 4 keeps every job's session directory under one shared /tmp/ompi.<host>.<uid>, and a
// job that ends removes it when it looks empty: a second job starting on the node at that moment
// fails in orte_init ("A call to mkdir was unable to create the desired directory", Open MPI
// issue 8510). A job on this node alone therefore gets a private base, removed afterwards,
// unless the user chose one. Jobs over a hostfile keep Open MPI's default (the directory would
// be left behind on every other node).
class PrivateMpiTmpdir {
  public:
    explicit PrivateMpiTmpdir(const LaunchArgs& a) {
        if (!a.hostfile.empty() || std::getenv("OMPI_MCA_orte_tmpdir_base")) return;
        const char* tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/ete-launch-XXXXXX";
        // Open MPI puts Unix sockets below the base (108-byte paths at most): a long TMPDIR keeps
        // Open MPI's default rather than risk that limit.
        if (templ.size() > 64) return;
        if (!::mkdtemp(templ.data())) return;  // Open MPI's default then, as without ete launch
        dir_ = templ;
        ::setenv("OMPI_MCA_orte_tmpdir_base", dir_.c_str(), 1);
    }
    ~PrivateMpiTmpdir() {
        if (dir_.empty()) return;
        ::unsetenv("OMPI_MCA_orte_tmpdir_base");
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    PrivateMpiTmpdir(const PrivateMpiTmpdir&) = delete;
    PrivateMpiTmpdir& operator=(const PrivateMpiTmpdir&) = delete;

  private:
    std::string dir_;
};

}  // namespace

bool restartable_exit(int code) {
    return code == kExitCommFailure || code > 128;
}

std::vector<std::string> attempt_args(const std::vector<std::string>& args, int attempt) {
    if (attempt == 0 || args.empty() || args[0] != "train") return args;
    for (const std::string& a : args)
        if (a == "--resume" || a.rfind("--resume=", 0) == 0) return args;
    std::vector<std::string> out = args;
    out.insert(out.end(), {"--resume", "auto"});
    return out;
}

int cmd_launch(const LaunchArgs& a) {
    ETE_CHECK(a.min_ranks == 0 || !a.hostfile.empty(),
              "launch --min-ranks {}: expected --hostfile too (the slots that remain are read "
              "from it before each attempt)",
              a.min_ranks);
    ETE_CHECK(a.min_ranks <= a.n, "launch --min-ranks {}: expected at most -n {}", a.min_ranks,
              a.n);
    // On this node the job's config is checked before any rank starts (a hostfile's nodes may
    // see files this one does not: there the ranks check it, rank 0 reporting).
    if (a.hostfile.empty()) check_launched_job(a.args, a.n);
    install_signal_handlers(SignalMode::Deferred);  // main did already, unless a test calls this
    const LaunchHost host = launch_host();
    std::vector<std::string> history;
    std::string live_hostfile;  // the answering hosts, when some did not
    struct Remove {
        const std::string& path;
        ~Remove() {
            if (!path.empty()) ::unlink(path.c_str());
        }
    } remove_live{live_hostfile};
    std::string rankfile;  // --placement auto's, rewritten each attempt
    const Remove remove_rankfile{rankfile};
    const PrivateMpiTmpdir session_base(a);
    for (int attempt = 0;; ++attempt) {
        LaunchArgs cur = a;
        if (a.min_ranks > 0) {
            const int slots = answering_slots(a, host, &live_hostfile);
            if (slots < a.min_ranks) {
                std::fprintf(stderr,
                             "ete launch: the hostfile '%s' has %d answering slots, fewer than "
                             "--min-ranks %d: giving up\n",
                             a.hostfile.c_str(), slots, a.min_ranks);
                return kExitCommFailure;
            }
            if (!live_hostfile.empty()) cur.hostfile = live_hostfile;
            cur.n = std::min(a.n, slots);
        }
        cur.args = attempt_args(a.args, attempt);
        if (a.placement == "auto") {
            const std::string report = apply_auto_placement(cur);
            rankfile = cur.rankfile;
            std::fprintf(stderr, "ete launch: %s\n", report.c_str());
        }
        ::setenv("ETE_RESTART_ATTEMPT", std::to_string(attempt).c_str(), 1);
        const std::vector<std::string> argv = mpirun_argv(cur, host);
        std::fprintf(
            stderr, "ete launch%s: %s\n",
            attempt ? fmt::format(" (attempt {} of {})", attempt + 1, a.max_restarts + 1).c_str()
                    : "",
            join_args(argv).c_str());
        const auto t0 = std::chrono::steady_clock::now();
        bool stopped = false;
        const int code = run_job(argv, &stopped);
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        history.push_back(fmt::format("attempt {}: {} ranks, {} after {:.0f} s", attempt + 1, cur.n,
                                      describe_exit(code), took));
        const bool again =
            !stopped && stop_signal() == 0 && restartable_exit(code) && attempt < a.max_restarts;
        if (!again) {
            if (attempt > 0 || (restartable_exit(code) && a.max_restarts > 0)) {
                std::fprintf(stderr, "ete launch: %zu attempt%s:\n", history.size(),
                             history.size() > 1 ? "s" : "");
                for (const std::string& h : history) std::fprintf(stderr, "  %s\n", h.c_str());
            }
            return code;
        }
        std::fprintf(stderr, "ete launch: %s; relaunching from the newest checkpoint\n",
                     describe_exit(code).c_str());
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
}

}  // namespace ete
