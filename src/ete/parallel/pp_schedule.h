// ete/parallel/pp_schedule.h — the 1F1B pipeline schedule (PipeDream-Flush / Megatron, not
// interleaved) as plain data: a pure function gives each stage the list of actions its executor
// (pp_executor.h) walks in order.
//
// With p stages and m micro-batches, stage s runs
//   warmup:   min(p - s - 1, m) forwards,
//   steady:   m - warmup pairs (one forward, then the backward of the oldest micro-batch),
//   cooldown: the remaining backwards,
// each forward wrapped as [RecvAct] Forward [SendAct] and each backward as [RecvGrad] Backward
// [SendGrad]: stage 0 receives no activations and sends no gradients, the last stage sends no
// activations and receives no gradients. A stage therefore holds at most min(p - s, m) micro-batch
// activations at once (max_in_flight), instead of m for GPipe (all forwards, then all backwards).
//
// With equal per-stage costs tF and tB, the step takes (m + p - 1)(tF + tB) of which each stage
// computes m (tF + tB): the bubble is (p - 1) / (m + p - 1) of the step (bubble_fraction_theory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ete {

enum class PipeOp : uint8_t { RecvAct, Forward, SendAct, RecvGrad, Backward, SendGrad };

struct PipeAction {
    PipeOp op;
    int micro;  // micro-batch index, 0..m-1
    bool operator==(const PipeAction&) const = default;
};

// The actions of `stage` (0..num_stages-1) in the exact order its executor runs them. Throws
// ete::Error unless num_stages >= 1, num_micro >= 1 and stage is in range.
std::vector<PipeAction> schedule_1f1b(int stage, int num_stages, int num_micro);

// The number of micro-batches whose activations `stage` holds at once (forwarded, not yet
// backwarded) under schedule_1f1b: min(p - s, m). Same argument checks.
int max_in_flight(int stage, int num_stages, int num_micro);

// (p - 1) / (m + p - 1): the share of a 1F1B step each stage idles with equal stage costs.
double bubble_fraction_theory(int num_stages, int num_micro);

// "F0 F1 B0 F2 B1": compute actions only; with_comm adds the transfers as Ra/Sa (receive/send
// activation) and Rg/Sg (receive/send gradient), e.g. "Ra0 F0 Sa0 Rg0 B0 Sg0".
std::string format_schedule(const std::vector<PipeAction>& actions, bool with_comm = false);

// One line per stage, "stage 0: F0 F1 B0 ...", for logs.
std::string format_schedule_table(int num_stages, int num_micro);

}  // namespace ete
