// ete/train/job_limits.cpp
#include "ete/train/job_limits.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "ete/core/file_util.h"
#include "ete/core/log.h"

namespace ete {

namespace {

// A command's standard output (at most 64 KiB), or nullopt when it cannot run or fails.
std::optional<std::string> command_output(const std::string& cmd) {
    FILE* p = ::popen((cmd + " 2>/dev/null").c_str(), "r");
    if (!p) return std::nullopt;
    std::string out;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0 && out.size() < 65536;)
        out.append(buf, n);
    return ::pclose(p) == 0 ? std::optional<std::string>(out) : std::nullopt;
}

std::optional<double> number_after(const std::string& text, const std::regex& re) {
    std::smatch m;
    if (!std::regex_search(text, m, re)) return std::nullopt;
    return std::strtod(m[1].str().c_str(), nullptr);
}

const char* env(const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
}

}  // namespace

std::optional<int64_t> parse_squeue_time(const std::string& text) {
    std::tm tm{};
    char rest = 0;
    if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                    &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &rest) < 6 ||
        (rest != 0 && rest != '\n'))
        return std::nullopt;
    if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
        tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return std::nullopt;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;  // squeue prints local time
    const std::time_t t = std::mktime(&tm);
    if (t == std::time_t(-1)) return std::nullopt;
    return int64_t(t);
}

std::optional<double> parse_kill_wait(const std::string& scontrol_config) {
    static const std::regex re(R"((?:^|\n)\s*KillWait\s*=\s*([0-9]+))");
    return number_after(scontrol_config, re);
}

std::optional<double> parse_grace_time(const std::string& scontrol_partition) {
    static const std::regex re(R"((?:^|\s)GraceTime=([0-9]+))");
    return number_after(scontrol_partition, re);
}

std::optional<int64_t> slurm_job_end_time() {
    if (const char* e = env("SLURM_JOB_END_TIME")) {
        char* end = nullptr;
        const long long t = std::strtoll(e, &end, 10);
        if (end && *end == 0 && t > 0) return int64_t(t);
    }
    const char* id = env("SLURM_JOB_ID");
    if (!id) return std::nullopt;
    for (const char* c = id; *c; ++c)
        if (!std::isdigit(static_cast<unsigned char>(*c)) && *c != '_') return std::nullopt;
    const std::optional<std::string> out = command_output(fmt::format("squeue -h -j {} -o %e", id));
    const std::optional<int64_t> end = out ? parse_squeue_time(*out) : std::nullopt;
    // A job without a limit shows "NONE", or its start plus a year (tests/slurm/FINDINGS.md).
    if (end && *end - int64_t(std::time(nullptr)) > 180 * 86400) return std::nullopt;
    return end;
}

std::optional<StopGrace> tightest_grace(std::optional<double> kill_wait,
                                        std::optional<double> grace_time,
                                        std::optional<std::string> mpirun_timeout) {
    std::optional<StopGrace> g;
    auto consider = [&](double s, std::string why) {
        if (!g || s < g->seconds) g = StopGrace{s, std::move(why)};
    };
    if (kill_wait) consider(*kill_wait, fmt::format("Slurm's KillWait ({:.0f} s)", *kill_wait));
    if (grace_time && *grace_time > 0)  // 0: pre-emption sends no SIGTERM first, nothing to use
        consider(*grace_time,
                 fmt::format("the partition's GraceTime ({:.0f} s, on pre-emption)", *grace_time));
    if (mpirun_timeout) {
        // mpirun answers SIGTERM with SIGCONT, SIGTERM after the timeout, SIGKILL after twice it.
        const double t =
            mpirun_timeout->empty() ? 1.0 : std::strtod(mpirun_timeout->c_str(), nullptr);
        consider(2 * t, fmt::format("mpirun's SIGKILL {:.0f} s after a SIGTERM "
                                    "(--mca odls_base_sigkill_timeout {:.0f})",
                                    2 * t, t));
    }
    return g;
}

std::optional<StopGrace> stop_grace() {
    std::optional<double> kill_wait, grace_time;
    if (env("SLURM_JOB_ID")) {
        if (auto c = command_output("scontrol show config")) kill_wait = parse_kill_wait(*c);
        if (const char* part = env("SLURM_JOB_PARTITION")) {
            const std::string p = part;
            if (p.find_first_of("'\"\\$`;|&<> ") == std::string::npos)
                if (auto c = command_output("scontrol show partition " + p))
                    grace_time = parse_grace_time(*c);
        }
    }
    std::optional<std::string> mpirun;
    if (env("OMPI_COMM_WORLD_SIZE")) {  // set by Open MPI's mpirun, not by srun
        const char* t = env("OMPI_MCA_odls_base_sigkill_timeout");
        mpirun = t ? t : "";
    }
    return tightest_grace(kill_wait, grace_time, mpirun);
}

namespace {
std::string attempts_path(const std::string& run_dir) {
    return run_dir + "/.ete/attempts.json";
}
}  // namespace

std::vector<Attempt> read_attempts(const std::string& run_dir) {
    std::vector<Attempt> out;
    const std::string path = attempts_path(run_dir);
    if (!std::filesystem::exists(path)) return out;
    try {
        const nlohmann::json j = nlohmann::json::parse(read_file(path));
        for (const auto& a : j.at("attempts"))
            out.push_back({a.at("start_step").get<int64_t>(), a.at("end").get<std::string>(),
                           a.value("end_step", int64_t(-1))});
    } catch (const std::exception& e) {
        // A damaged record only disables the guard; it never blocks a run.
        log_warn("{}: unreadable ({}): the attempt record starts anew", path, e.what());
        out.clear();
    }
    return out;
}

void write_attempts(const std::string& run_dir, const std::vector<Attempt>& attempts) {
    nlohmann::json list = nlohmann::json::array();
    const size_t first = attempts.size() > 32 ? attempts.size() - 32 : 0;  // the newest 32
    for (size_t i = first; i < attempts.size(); ++i)
        list.push_back({{"start_step", attempts[i].start_step},
                        {"end", attempts[i].end},
                        {"end_step", attempts[i].end_step}});
    std::filesystem::create_directories(run_dir + "/.ete");
    write_file_atomic(attempts_path(run_dir), nlohmann::json{{"attempts", list}}.dump(1) + "\n");
}

int failed_attempts_at(const std::vector<Attempt>& attempts, int64_t start_step) {
    int n = 0;
    for (auto it = attempts.rbegin(); it != attempts.rend(); ++it) {
        if (it->start_step != start_step || it->end != "running") break;
        ++n;
    }
    return n;
}

}  // namespace ete
