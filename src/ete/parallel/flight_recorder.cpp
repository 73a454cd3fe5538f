// ete/parallel/flight_recorder.cpp
#include "ete/parallel/flight_recorder.h"

namespace ete {

FlightRecorder& FlightRecorder::instance() {
    static FlightRecorder r;
    return r;
}

uint64_t FlightRecorder::begin(const std::string& op, const std::string& group, bool collective,
                               uint64_t bytes, int peer, const std::vector<int>& members) {
    if (!enabled_) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (!members_.count(group)) members_[group] = members;
    CommOpRecord r;
    r.id = next_id_++;
    r.op = op;
    r.group = group;
    r.seq = ++(collective ? collectives_ : p2p_)[group];
    r.bytes = bytes;
    r.peer = peer;
    r.start = std::chrono::steady_clock::now();
    pending_.emplace(r.id, std::move(r));
    return next_id_ - 1;
}

void FlightRecorder::end(uint64_t id) {
    if (id == 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    it->second.end = std::chrono::steady_clock::now();
    it->second.done = true;
    recent_.push_back(std::move(it->second));
    pending_.erase(it);
    while (recent_.size() > kKeep) recent_.pop_front();
}

std::vector<CommOpRecord> FlightRecorder::pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<CommOpRecord> out;
    for (const auto& [id, r] : pending_) out.push_back(r);  // ids grow: oldest first
    return out;
}

std::vector<CommOpRecord> FlightRecorder::recent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {recent_.begin(), recent_.end()};
}

std::map<std::string, uint64_t> FlightRecorder::issued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return collectives_;
}

std::map<std::string, std::vector<int>> FlightRecorder::members() const {
    std::lock_guard<std::mutex> lock(mu_);
    return members_;
}

void FlightRecorder::set_timeout_hook(std::function<void(const std::string&)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
}

void FlightRecorder::timed_out(const std::string& where) {
    std::function<void(const std::string&)> hook;
    {
        std::lock_guard<std::mutex> lock(mu_);
        hook = hook_;
    }
    if (hook) hook(where);
}

void FlightRecorder::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
    recent_.clear();
    collectives_.clear();
    p2p_.clear();
    members_.clear();
}

}  // namespace ete
