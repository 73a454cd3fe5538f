// ete/train/fault.h — fault injection for tests and drills (docs/operations.md, Drills).
//
// ETE_FAULT holds faults separated by ';', each `kind@key=value,key=value`:
//   nan_grad@step=S,rank=R   a NaN in one gradient of world rank R at 1-based step S, after the
//                            data-parallel sum (so only R sees it unless the decision is shared)
//   nan_loss@step=S,rank=R   R's local loss of step S becomes NaN (its gradients are left alone)
//   spike@step=S,rank=R      R's local loss of step S is reported 1000 times larger (a loss spike
//                            for anomaly.spike_zscore; its gradients are left alone)
//   hang@step=S,rank=R       R stops at the start of step S and never returns (a stuck rank)
//   kill@step=S,rank=R       R dies by SIGKILL at the start of step S (a lost host)
//   kill_gather@step=S,rank=R  R dies by SIGKILL inside its first ZeRO-3 gather of step S, its
//                            broadcasts started (its peers are left waiting in theirs)
//   error@step=S,rank=R      R fails with an error at the start of step S, alone
//   slow@rank=R,ms=M         R sleeps M ms in every step's compute (a straggler); step=S limits
//                            it to that step
// A fault without rank= applies to every rank. kill, kill_gather and hang fire only on the first
// attempt of a supervised run (ETE_RESTART_ATTEMPT, set by `ete launch`) unless `attempt=A` names
// another or `always=1` (so `ete launch --max-restarts` can recover from them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ete {

struct Fault {
    std::string kind;
    int64_t step = -1;  // 1-based; -1 = every step
    int rank = -1;      // world rank; -1 = every rank
    int64_t ms = 0;     // slow
    bool always = false;
    int attempt = -1;  // kill, hang: the attempt it fires on (-1 = the first)
};

// Parses an ETE_FAULT value; throws ete::Error naming the bad fault and the expected form.
std::vector<Fault> parse_faults(const std::string& spec);

class FaultPlan {
  public:
    FaultPlan() = default;
    explicit FaultPlan(std::vector<Fault> faults, int attempt = 0)
        : faults_(std::move(faults)), attempt_(attempt) {}
    // ETE_FAULT (empty plan when unset), with the attempt number ete launch exports.
    static FaultPlan from_env();

    bool empty() const { return faults_.empty(); }
    // Whether a fault of `kind` fires for world rank `rank` at 1-based step `step`.
    bool fires(const std::string& kind, int64_t step, int rank) const;
    // slow: the milliseconds world rank `rank` sleeps in step `step` (0 = none).
    int64_t slow_ms(int64_t step, int rank) const;
    // Carries out hang, kill and error for this rank at the start of `step` (hang never returns,
    // kill does not either, error throws).
    void at_step_start(int64_t step, int rank) const;

  private:
    std::vector<Fault> faults_;
    int attempt_ = 0;
};

}  // namespace ete
