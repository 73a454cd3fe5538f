// ete/parallel/pp_schedule.cpp — the 1F1B schedule as a pure function (see pp_schedule.h).
#include "ete/parallel/pp_schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "ete/core/error.h"

namespace ete {
namespace {

void check_pipeline(int num_stages, int num_micro) {
    ETE_CHECK(num_stages >= 1, "pp schedule: num_stages must be >= 1, got {}", num_stages);
    ETE_CHECK(num_micro >= 1,
              "pp schedule: num_micro (micro-batches per step) must be >= 1, got {}", num_micro);
}

void check_stage(int stage, int num_stages, int num_micro) {
    check_pipeline(num_stages, num_micro);
    ETE_CHECK(stage >= 0 && stage < num_stages, "pp schedule: stage must be in [0, {}), got {}",
              num_stages, stage);
}

// Builds one stage's list; the first and last stage skip the transfers they have no peer for.
class StageBuilder {
  public:
    StageBuilder(int stage, int num_stages) : first_(stage == 0), last_(stage == num_stages - 1) {}

    void forward(int micro) {
        if (!first_) out_.push_back({PipeOp::RecvAct, micro});
        out_.push_back({PipeOp::Forward, micro});
        if (!last_) out_.push_back({PipeOp::SendAct, micro});
    }
    void backward(int micro) {
        if (!last_) out_.push_back({PipeOp::RecvGrad, micro});
        out_.push_back({PipeOp::Backward, micro});
        if (!first_) out_.push_back({PipeOp::SendGrad, micro});
    }
    std::vector<PipeAction> take() { return std::move(out_); }

  private:
    bool first_, last_;
    std::vector<PipeAction> out_;
};

const char* op_code(PipeOp op) {
    switch (op) {
        case PipeOp::RecvAct:
            return "Ra";
        case PipeOp::Forward:
            return "F";
        case PipeOp::SendAct:
            return "Sa";
        case PipeOp::RecvGrad:
            return "Rg";
        case PipeOp::Backward:
            return "B";
        case PipeOp::SendGrad:
            return "Sg";
    }
    ETE_ASSERT(false);
    return "";
}

}  // namespace

std::vector<PipeAction> schedule_1f1b(int stage, int num_stages, int num_micro) {
    check_stage(stage, num_stages, num_micro);
    // Stage s must forward p - s - 1 micro-batches before the first gradient can come back to it.
    const int warmup = std::min(num_stages - stage - 1, num_micro);
    StageBuilder b(stage, num_stages);
    for (int i = 0; i < warmup; ++i) b.forward(i);
    for (int i = 0; i < num_micro - warmup; ++i) {
        b.forward(warmup + i);
        b.backward(i);
    }
    for (int i = num_micro - warmup; i < num_micro; ++i) b.backward(i);
    return b.take();
}

int max_in_flight(int stage, int num_stages, int num_micro) {
    check_stage(stage, num_stages, num_micro);
    // warmup + 1 forwards happen before the first backward (or all m when m is smaller).
    return std::min(num_stages - stage, num_micro);
}

double bubble_fraction_theory(int num_stages, int num_micro) {
    check_pipeline(num_stages, num_micro);
    return double(num_stages - 1) / double(num_micro + num_stages - 1);
}

std::string format_schedule(const std::vector<PipeAction>& actions, bool with_comm) {
    std::string out;
    for (const PipeAction& a : actions) {
        const bool compute = a.op == PipeOp::Forward || a.op == PipeOp::Backward;
        if (!compute && !with_comm) continue;
        if (!out.empty()) out += ' ';
        out += fmt::format("{}{}", op_code(a.op), a.micro);
    }
    return out;
}

std::string format_schedule_table(int num_stages, int num_micro) {
    check_pipeline(num_stages, num_micro);
    std::string out;
    for (int s = 0; s < num_stages; ++s) {
        out += fmt::format("stage {}: {}\n", s,
                           format_schedule(schedule_1f1b(s, num_stages, num_micro)));
    }
    return out;
}

}  // namespace ete
