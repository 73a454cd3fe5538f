// ete/cli/launch_hosts.cpp — the hostfile side of `ete launch --min-ranks`: read the hostfile,
// ask every host whether it still answers (a one-rank mpirun of this ete binary on it), and write
// the hosts that did to a hostfile the next attempt runs on.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "ete/cli/launch.h"
#include "ete/core/error.h"
#include "ete/core/file_util.h"

namespace ete {

namespace {

// Forks `argv` with stdio on /dev/null in its own process group; returns its pid (-1 on failure).
pid_t spawn_quiet(std::vector<std::string> argv) {
    std::vector<char*> c_argv;
    for (auto& s : argv) c_argv.push_back(s.data());
    c_argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    ::execvp(c_argv[0], c_argv.data());
    _exit(127);
}

}  // namespace

std::vector<HostfileEntry> read_hostfile(const std::string& path) {
    std::ifstream in(path);
    ETE_CHECK(in, "--hostfile '{}': cannot read it", path);
    std::vector<HostfileEntry> hosts;
    for (std::string line; std::getline(in, line);) {
        const std::string body = line.substr(0, line.find('#'));
        std::istringstream words(body);
        HostfileEntry e;
        if (!(words >> e.host)) continue;
        for (std::string w; words >> w;)
            if (w.rfind("slots=", 0) == 0) e.slots = std::max(0, std::atoi(w.c_str() + 6));
        e.line = body;
        hosts.push_back(std::move(e));
    }
    return hosts;
}

int hostfile_slots(const std::string& path) {
    int slots = 0;
    for (const HostfileEntry& e : read_hostfile(path)) slots += e.slots;
    return slots;
}

std::vector<std::string> probe_argv(const LaunchArgs& a, const LaunchHost& host,
                                    const std::string& name) {
    std::vector<std::string> argv = {a.mpirun, "-np", "1"};
    if (host.is_root) argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), {"--host", name + ":1", host.self_exe, "--version"});
    return argv;
}

std::vector<int> probe_hosts(const LaunchArgs& a, const LaunchHost& host,
                             const std::vector<HostfileEntry>& hosts, double timeout_s) {
    std::vector<pid_t> pids;
    for (const HostfileEntry& e : hosts) pids.push_back(spawn_quiet(probe_argv(a, host, e.host)));
    std::vector<int> codes(hosts.size(), -1);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (size_t left = hosts.size(); left > 0;) {
        left = 0;
        for (size_t i = 0; i < hosts.size(); ++i) {
            if (pids[i] <= 0 || codes[i] != -1) continue;
            int status = 0;
            if (::waitpid(pids[i], &status, WNOHANG) == pids[i])
                codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            else
                ++left;
        }
        if (left == 0) break;
        if (std::chrono::steady_clock::now() > deadline) {  // a host that never answers
            for (size_t i = 0; i < hosts.size(); ++i)
                if (pids[i] > 0 && codes[i] == -1) {
                    ::kill(-pids[i], SIGKILL);
                    ::waitpid(pids[i], nullptr, 0);
                }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return codes;
}

std::string write_live_hostfile(const std::vector<HostfileEntry>& hosts,
                                const std::vector<int>& codes) {
    std::string body;
    for (size_t i = 0; i < hosts.size(); ++i)
        if (codes[i] == 0) body += hosts[i].line + "\n";
    const char* tmp = std::getenv("TMPDIR");
    const std::string path = fmt::format("{}/ete-launch-{}.hosts", tmp && *tmp ? tmp : "/tmp",
                                         static_cast<long>(::getpid()));
    write_file_atomic(path, body);
    return path;
}

}  // namespace ete
