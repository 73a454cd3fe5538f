// ete/train/watchdog.h — hangs that name the stuck rank (docs/operations.md, Hangs).
//
// Every rank of a multi-rank job runs a watchdog thread. It writes a heartbeat to
// RUN/.ete/ranks/rank_<r>.json every second — the step, the pending and last communication
// operations of the flight recorder (parallel/flight_recorder.h), the collective count of each
// group — through the file system, a side channel that does not depend on the transport that
// may be stuck. When one of its rank's operations has waited parallel.hang_warn_s, the watchdog
// asks every rank for the stack of its training thread (RUN/.ete/stack_request), reads every
// heartbeat and reports, while the job is still alive, which members of the group entered that
// collective and which did not, what those were last doing, and their stacks. At
// parallel.timeout_s the transport's timeout hook writes the same report to RUN/hang_report.json
// and stderr before the job ends. Only the lowest rank among those waiting prints reports; every
// rank that times out writes the file (the first one to time out ends the job).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace ete {

struct WatchdogOptions {
    std::string run_dir;
    int rank = 0;
    double warn_s = 60;    // an operation pending this long is reported
    double timeout_s = 0;  // parallel.timeout_s (0 = none), for the report's wording
    double heartbeat_s = 1;
};

class Watchdog {
  public:
    // Starts the thread and becomes the process's timeout hook; the constructing thread is the
    // one whose stack is reported.
    explicit Watchdog(WatchdogOptions o);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    void set_step(int64_t step) { step_ = step; }

    // The report on operation `stuck` of this rank, from every heartbeat (exposed for tests).
    nlohmann::json build_report(const nlohmann::json& stuck, double waited_s) const;
    // Its lines for stderr: "ete: hang: ..." naming each rank that did not enter as `rank N`.
    static std::vector<std::string> report_lines(const nlohmann::json& report);

  private:
    void loop();
    nlohmann::json heartbeat() const;
    void write_heartbeat();
    void check_pending();
    void answer_stack_request();
    void capture_stack();
    bool reporter_for(const nlohmann::json& report) const;
    void on_timeout(const std::string& where);

    WatchdogOptions o_;
    std::string dir_;
    std::atomic<int64_t> step_{0};
    std::chrono::system_clock::time_point started_;
    pthread_t main_thread_;
    std::vector<std::string> stack_;
    double stack_time_ = 0;
    double answered_request_ = 0;
    uint64_t warned_id_ = 0;
    mutable std::mutex mu_;  // stack_, stack_time_ (the timeout hook runs on another thread)
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

// parallel.hang_warn_s as configured, or its default: a fifth of parallel.timeout_s (60 s without
// a timeout).
double hang_warn_seconds(double configured, double timeout_s);

}  // namespace ete
