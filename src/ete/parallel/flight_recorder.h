// ete/parallel/flight_recorder.h — the last communication operations of this process, for hang
// reports (train/watchdog.h, docs/operations.md, Hangs).
//
// The MPI transport records every operation it starts (op, group, the group's sequence number,
// bytes, peer) and when it completes. A group's collectives carry the same sequence number on
// every member, so comparing the records of all ranks tells which ranks entered a stuck
// collective and which did not. Thread-safe (the data-parallel bucket thread records too); one
// mutex, taken twice per operation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ete {

struct CommOpRecord {
    uint64_t id = 0;
    std::string op;     // all_reduce, all_gather, broadcast, barrier, send, recv, ...
    std::string group;  // the communicator's name (mesh groups name their world ranks)
    uint64_t seq = 0;   // the group's collective count at this op (p2p: the group's p2p count)
    uint64_t bytes = 0;
    int peer = -1;  // p2p: the peer's rank in the group
    std::chrono::steady_clock::time_point start, end;
    bool done = false;
};

class FlightRecorder {
  public:
    static constexpr size_t kKeep = 64;  // completed operations kept

    static FlightRecorder& instance();

    // A started operation; collective: counted in the group's collective sequence.
    // members: the group's world ranks (remembered once per group).
    uint64_t begin(const std::string& op, const std::string& group, bool collective, uint64_t bytes,
                   int peer, const std::vector<int>& members);
    void end(uint64_t id);
    // The pending operations (oldest first) and the last completed ones (newest last).
    std::vector<CommOpRecord> pending() const;
    std::vector<CommOpRecord> recent() const;
    // Collectives started so far on each group (what a member's sequence numbers reached).
    std::map<std::string, uint64_t> issued() const;
    std::map<std::string, std::vector<int>> members() const;
    void clear();  // tests
    // Off: begin() records nothing and returns 0 (monitor.watchdog = false; benchmarks).
    void set_enabled(bool on) { enabled_ = on; }

    // Called by a transport when an operation passes parallel.timeout_s, before it throws (the
    // watchdog writes its hang report there). One hook per process; empty = none.
    void set_timeout_hook(std::function<void(const std::string& where)> hook);
    void timed_out(const std::string& where);

  private:
    std::atomic<bool> enabled_{true};
    mutable std::mutex mu_;
    uint64_t next_id_ = 1;
    std::map<uint64_t, CommOpRecord> pending_;
    std::deque<CommOpRecord> recent_;
    std::map<std::string, uint64_t> collectives_, p2p_;
    std::map<std::string, std::vector<int>> members_;
    std::function<void(const std::string&)> hook_;
};

}  // namespace ete
