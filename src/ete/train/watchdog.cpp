// ete/train/watchdog.cpp
#include "ete/train/watchdog.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ete/core/file_util.h"
#include "ete/core/log.h"
#include "ete/parallel/flight_recorder.h"

namespace ete {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The training thread's stack, taken in its own SIGURG handler (backtrace() only walks the
// calling thread) and symbolized afterwards by the watchdog.
constexpr int kMaxFrames = 48;
void* g_frames[kMaxFrames];
std::atomic<int> g_frame_count{-1};

extern "C" void on_stack_signal(int) {
    g_frame_count = backtrace(g_frames, kMaxFrames);
}

double wall_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double seconds_ago(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// "ete::Trainer::step(long)" from "./ete(_ZN3ete7Trainer4stepEl+0x1a) [0x...]".
std::string demangled(const char* symbol) {
    std::string s(symbol);
    const size_t open = s.find('('), plus = s.find('+', open);
    if (open == std::string::npos || plus == std::string::npos || plus == open + 1) return s;
    const std::string mangled = s.substr(open + 1, plus - open - 1);
    int status = 0;
    char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    if (status != 0 || !d) return s;
    std::string out(d);
    std::free(d);
    return out;
}

json op_json(const CommOpRecord& r) {
    json j = {{"op", r.op}, {"group", r.group}, {"seq", r.seq}, {"bytes", r.bytes}};
    if (r.peer >= 0) j["peer"] = r.peer;
    if (r.done) {
        j["ago_s"] = seconds_ago(r.end);
        j["took_s"] = std::chrono::duration<double>(r.end - r.start).count();
    } else {
        j["waiting_s"] = seconds_ago(r.start);
    }
    return j;
}

// Heartbeats are ephemeral: a temporary file renamed over the old one, no fsync.
void write_quick(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << text;
        if (!f) return;
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
}

std::string describe_op(const json& op) {
    std::string s = fmt::format("{} #{} on {}", op.value("op", "?"), op.value("seq", 0),
                                op.value("group", "?"));
    if (op.contains("peer")) s += fmt::format(" with peer {}", op["peer"].get<int>());
    return s;
}

}  // namespace

double hang_warn_seconds(double configured, double timeout_s) {
    if (configured > 0) return configured;
    return timeout_s > 0 ? timeout_s / 5 : 60.0;
}

Watchdog::Watchdog(WatchdogOptions o)
    : o_(std::move(o)),
      dir_(o_.run_dir + "/.ete"),
      started_(std::chrono::system_clock::now()),
      main_thread_(pthread_self()) {
    std::error_code ec;
    fs::create_directories(dir_ + "/ranks", ec);
    struct sigaction sa {};
    sa.sa_handler = on_stack_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGURG, &sa, nullptr);
    void* warm[2];
    backtrace(warm, 2);  // loads the unwinder now, not inside the signal handler
    FlightRecorder::instance().set_timeout_hook([this](const std::string& w) { on_timeout(w); });
    write_heartbeat();
    thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
    FlightRecorder::instance().set_timeout_hook({});
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Watchdog::loop() {
    auto last_beat = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (stop_) break;
        lock.unlock();
        answer_stack_request();
        check_pending();
        if (seconds_ago(last_beat) >= o_.heartbeat_s) {
            write_heartbeat();
            last_beat = std::chrono::steady_clock::now();
        }
        lock.lock();
    }
}

json Watchdog::heartbeat() const {
    const FlightRecorder& fr = FlightRecorder::instance();
    json j = {{"rank", o_.rank}, {"pid", ::getpid()}, {"step", step_.load()}, {"time", wall_now()}};
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) == 0) j["host"] = host;
    j["pending"] = json::array();
    for (const CommOpRecord& r : fr.pending()) j["pending"].push_back(op_json(r));
    const std::vector<CommOpRecord> recent = fr.recent();
    j["recent"] = json::array();
    for (size_t i = recent.size() > 8 ? recent.size() - 8 : 0; i < recent.size(); ++i)
        j["recent"].push_back(op_json(recent[i]));
    j["issued"] = fr.issued();
    j["members"] = fr.members();
    std::lock_guard<std::mutex> lock(mu_);
    if (!stack_.empty()) {
        j["stack"] = stack_;
        j["stack_time"] = stack_time_;
    }
    return j;
}

void Watchdog::write_heartbeat() {
    write_quick(fmt::format("{}/ranks/rank_{}.json", dir_, o_.rank), heartbeat().dump());
}

void Watchdog::capture_stack() {
    g_frame_count = -1;
    if (pthread_kill(main_thread_, SIGURG) != 0) return;
    for (int i = 0; i < 50 && g_frame_count.load() < 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(4));
    const int n = g_frame_count.load();
    std::vector<std::string> frames;
    if (n > 0) {
        char** syms = backtrace_symbols(g_frames, n);
        for (int i = 0; syms && i < n; ++i) {
            const std::string f = demangled(syms[i]);
            // The handler's own frames say nothing about where the thread was.
            if (f.find("on_stack_signal") != std::string::npos ||
                f.find("__restore_rt") != std::string::npos)
                continue;
            frames.push_back(f);
        }
        std::free(syms);
    }
    std::lock_guard<std::mutex> lock(mu_);
    stack_ = std::move(frames);
    stack_time_ = wall_now();
}

// Another rank asked for stacks (a newer request than the last one answered, made while this run
// lives): take this rank's, and publish it at once.
void Watchdog::answer_stack_request() {
    std::ifstream in(dir_ + "/stack_request");
    double t = 0;
    if (!(in >> t) || t <= answered_request_) return;
    if (t < std::chrono::duration<double>(started_.time_since_epoch()).count()) return;
    answered_request_ = t;
    capture_stack();
    write_heartbeat();
}

json Watchdog::build_report(const json& stuck, double waited_s) const {
    const std::string group = stuck.value("group", "");
    const uint64_t seq = stuck.value("seq", uint64_t(0));
    const bool p2p = stuck.contains("peer");
    std::vector<int> members;
    const auto all_members = FlightRecorder::instance().members();
    if (auto it = all_members.find(group); it != all_members.end()) members = it->second;
    json report = {{"detected_by", o_.rank}, {"step", step_.load()}, {"operation", stuck},
                   {"waited_s", waited_s},   {"warn_s", o_.warn_s},  {"timeout_s", o_.timeout_s},
                   {"time", wall_now()}};
    if (p2p && stuck["peer"].get<int>() < int(members.size()))  // this rank and its peer
        members = {o_.rank, members[size_t(stuck["peer"].get<int>())]};
    json entered = json::array(), missing = json::array(), ranks = json::object();
    for (int r : members) {
        json hb;
        try {
            hb = json::parse(read_file(fmt::format("{}/ranks/rank_{}.json", dir_, r)));
        } catch (const std::exception&) {
            hb = json::object();
        }
        json info = {{"heartbeat_age_s",
                      hb.contains("time") ? wall_now() - hb["time"].get<double>() : -1.0}};
        for (const char* k : {"host", "pid", "step", "pending", "recent", "stack"})
            if (hb.contains(k)) info[k] = hb[k];
        // Collectives: a member entered once its count on the group reached seq. Point to point:
        // the peer entered when it has a matching operation pending.
        bool in = r == o_.rank;
        if (!in && !p2p && hb.contains("issued") && hb["issued"].contains(group))
            in = hb["issued"][group].get<uint64_t>() >= seq;
        if (!in && p2p && hb.contains("pending"))
            for (const json& op : hb["pending"]) in = in || op.value("group", "") == group;
        (in ? entered : missing).push_back(r);
        ranks[std::to_string(r)] = std::move(info);
    }
    report["entered"] = entered;
    report["missing"] = missing;
    report["ranks"] = ranks;
    return report;
}

std::vector<std::string> Watchdog::report_lines(const json& rep) {
    std::vector<std::string> out;
    auto names = [](const json& list) {
        std::string s;
        for (const json& r : list)
            s += fmt::format("{}rank {}", s.empty() ? "" : ", ", r.get<int>());
        return s.empty() ? std::string("none") : s;
    };
    out.push_back(fmt::format(
        "ete: hang: rank {} has waited {:.1f} s in {} at step {}; entered: {}; not entered: {}",
        rep["detected_by"].get<int>(), rep["waited_s"].get<double>(), describe_op(rep["operation"]),
        rep["step"].get<int64_t>(), names(rep["entered"]), names(rep["missing"])));
    for (const json& r : rep["missing"]) {
        const json& info = rep["ranks"][std::to_string(r.get<int>())];
        std::string doing;
        if (info.value("heartbeat_age_s", -1.0) < 0) {
            doing = "no heartbeat (it may never have started)";
        } else {
            // Ages in a heartbeat are as of its writing: add the heartbeat's own age.
            const double age = info["heartbeat_age_s"].get<double>();
            doing = fmt::format("at step {}", info.value("step", int64_t(0)));
            if (info.contains("pending") && !info["pending"].empty())
                doing += fmt::format(", waiting {:.1f} s in {}",
                                     info["pending"][0].value("waiting_s", 0.0) + age,
                                     describe_op(info["pending"][0]));
            else
                doing += ", not in a communication operation";
            if (info.contains("recent") && !info["recent"].empty()) {
                const json& last = info["recent"].back();
                doing += fmt::format("; last finished {} {:.1f} s ago", describe_op(last),
                                     last.value("ago_s", 0.0) + age);
            }
            if (age > 3)  // written every second by a live process, even a stuck one
                doing += fmt::format(
                    "; its heartbeat is {:.0f} s old (the process is gone or "
                    "frozen)",
                    age);
        }
        out.push_back(fmt::format("ete: hang: rank {}: {}{}", r.get<int>(), doing,
                                  info.contains("stack") ? "; its stack:" : ""));
        if (info.contains("stack"))
            for (const json& f : info["stack"]) out.push_back("    " + f.get<std::string>());
    }
    return out;
}

// The lowest rank among the ones that entered reports, so a job prints one report.
bool Watchdog::reporter_for(const json& report) const {
    return !report["entered"].empty() && report["entered"][0].get<int>() == o_.rank;
}

void Watchdog::check_pending() {
    const std::vector<CommOpRecord> pending = FlightRecorder::instance().pending();
    if (pending.empty()) return;
    const CommOpRecord& oldest = pending.front();
    const double waited = seconds_ago(oldest.start);
    if (waited < o_.warn_s || oldest.id == warned_id_) return;
    warned_id_ = oldest.id;
    // Ask every rank for its stack, give them half a second to answer, then report.
    const double asked = wall_now();
    write_quick(dir_ + "/stack_request", fmt::format("{:.6f}\n", asked));
    answer_stack_request();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const json report = build_report(op_json(oldest), seconds_ago(oldest.start));
    if (!reporter_for(report)) return;
    for (const std::string& line : report_lines(report)) std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
}

void Watchdog::on_timeout(const std::string& where) {
    const std::vector<CommOpRecord> pending = FlightRecorder::instance().pending();
    if (pending.empty()) return;
    json report = build_report(op_json(pending.front()), seconds_ago(pending.front().start));
    report["timed_out"] = where;
    // Every rank whose operation times out writes the file (atomically, under a name of its own
    // until the rename; each reads the same heartbeats). The first to time out ends the job, and
    // it need not be the reporter (the lowest rank the heartbeats show waiting; a heartbeat lags
    // under load), which mpirun then stops before it writes: a 4-rank hang test beside the
    // heaviest tests once ended with no hang_report.json.
    try {
        write_file_atomic(o_.run_dir + "/hang_report.json", report.dump(2) + "\n");
    } catch (const std::exception& e) {
        log_warn("hang report: {}", e.what());
    }
    if (!reporter_for(report)) return;
    for (const std::string& line : report_lines(report)) std::fprintf(stderr, "%s\n", line.c_str());
    std::fprintf(stderr, "ete: hang: the report is in %s/hang_report.json\n", o_.run_dir.c_str());
    std::fflush(stderr);
}

}  // namespace ete
