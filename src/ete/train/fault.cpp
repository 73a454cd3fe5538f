// ete/train/fault.cpp
#include "ete/train/fault.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <new>
#include <set>
#include <thread>

#include "ete/core/error.h"
#include "ete/core/log.h"

namespace ete {

namespace {

constexpr const char* kForm =
    "expected kind@key=value,... with kind nan_grad, nan_loss, spike, hang, kill, kill_gather, "
    "error, oom or slow and keys step, rank, ms, always, attempt, each at most once";

int64_t parse_int(const std::string& fault, const std::string& key, const std::string& v) {
    int64_t x = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    ETE_CHECK(ec == std::errc() && p == v.data() + v.size() && !v.empty() && x >= 0,
              "ETE_FAULT '{}': {} = '{}': expected a non-negative integer", fault, key, v);
    return x;
}

Fault parse_one(const std::string& text) {
    const size_t at = text.find('@');
    std::set<std::string> seen;
    Fault f;
    f.kind = text.substr(0, at);
    ETE_CHECK(f.kind == "nan_grad" || f.kind == "nan_loss" || f.kind == "spike" ||
                  f.kind == "hang" || f.kind == "kill" || f.kind == "kill_gather" ||
                  f.kind == "error" || f.kind == "slow" || f.kind == "oom",
              "ETE_FAULT '{}': unknown fault '{}' ({})", text, f.kind, kForm);
    const std::string args = at == std::string::npos ? "" : text.substr(at + 1);
    for (size_t pos = 0; pos < args.size();) {
        const size_t end = std::min(args.find(',', pos), args.size());
        const std::string kv = args.substr(pos, end - pos);
        const size_t eq = kv.find('=');
        ETE_CHECK(eq != std::string::npos, "ETE_FAULT '{}': '{}': {}", text, kv, kForm);
        const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
        ETE_CHECK(seen.insert(key).second, "ETE_FAULT '{}': '{}' given twice ({})", text, key,
                  kForm);
        const int64_t x = parse_int(text, key, value);
        if (key == "step") {
            ETE_CHECK(x >= 1, "ETE_FAULT '{}': step = {}: expected >= 1", text, x);
            f.step = x;
        } else if (key == "rank") {
            f.rank = int(x);
        } else if (key == "ms") {
            f.ms = x;
        } else if (key == "always") {
            f.always = x != 0;
        } else if (key == "attempt") {
            f.attempt = int(x);
        } else {
            throw_error(fmt::format("ETE_FAULT '{}': unknown key '{}' ({})", text, key, kForm));
        }
        pos = end + 1;
    }
    ETE_CHECK(f.kind == "slow" || f.step >= 1, "ETE_FAULT '{}': {} needs step=S", text, f.kind);
    ETE_CHECK(f.kind != "slow" || f.ms > 0, "ETE_FAULT '{}': slow needs ms=M > 0", text);
    return f;
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& spec) {
    // Errors quote the spec: a drill's is a few dozen characters, never a 100 KB echo.
    ETE_CHECK(spec.size() <= 4096, "ETE_FAULT: {} characters, expected at most 4096", spec.size());
    std::vector<Fault> out;
    for (size_t pos = 0; pos < spec.size();) {
        const size_t end = std::min(spec.find(';', pos), spec.size());
        std::string one = spec.substr(pos, end - pos);
        one.erase(0, one.find_first_not_of(' '));
        one.erase(one.find_last_not_of(' ') + 1);
        if (!one.empty()) out.push_back(parse_one(one));
        pos = end + 1;
    }
    return out;
}

FaultPlan FaultPlan::from_env() {
    const char* spec = std::getenv("ETE_FAULT");
    if (!spec || !*spec) return {};
    const char* attempt = std::getenv("ETE_RESTART_ATTEMPT");
    return FaultPlan(parse_faults(spec), attempt ? std::atoi(attempt) : 0);
}

bool FaultPlan::fires(const std::string& kind, int64_t step, int rank) const {
    for (const Fault& f : faults_) {
        if (f.kind != kind || (f.rank >= 0 && f.rank != rank) || (f.step >= 0 && f.step != step))
            continue;
        if ((kind == "kill" || kind == "kill_gather" || kind == "hang") && !f.always &&
            attempt_ != std::max(f.attempt, 0))
            continue;
        return true;
    }
    return false;
}

int64_t FaultPlan::slow_ms(int64_t step, int rank) const {
    int64_t ms = 0;
    for (const Fault& f : faults_)
        if (f.kind == "slow" && (f.rank < 0 || f.rank == rank) && (f.step < 0 || f.step == step))
            ms += f.ms;
    return ms;
}

void FaultPlan::at_step_start(int64_t step, int rank) const {
    if (faults_.empty()) return;
    ETE_CHECK(!fires("error", step, rank), "ETE_FAULT: world rank {} fails at step {}", rank, step);
    if (fires("oom", step, rank)) throw std::bad_alloc();  // what a failed allocation throws
    if (fires("kill", step, rank)) {
        log_warn("ETE_FAULT: world rank {} kills itself at step {}", rank, step);
        ::raise(SIGKILL);
    }
    if (fires("hang", step, rank)) {
        log_warn("ETE_FAULT: world rank {} hangs at step {}", rank, step);
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(3600));
    }
}

}  // namespace ete
