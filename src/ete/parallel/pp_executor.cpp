// ete/parallel/pp_executor.cpp — walks one stage's 1F1B action list (see pp_executor.h for the
// communication and buffer rules).
#include "ete/parallel/pp_executor.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>

#include "ete/core/error.h"

namespace ete {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_compute(PipeOp op) {
    return op == PipeOp::Forward || op == PipeOp::Backward;
}
bool is_recv(PipeOp op) {
    return op == PipeOp::RecvAct || op == PipeOp::RecvGrad;
}

std::string_view op_name(PipeOp op) {
    switch (op) {
        case PipeOp::RecvAct:
            return "RecvAct";
        case PipeOp::Forward:
            return "Forward";
        case PipeOp::SendAct:
            return "SendAct";
        case PipeOp::RecvGrad:
            return "RecvGrad";
        case PipeOp::Backward:
            return "Backward";
        case PipeOp::SendGrad:
            return "SendGrad";
    }
    ETE_ASSERT(false);
    return "";
}

// For each receive at index i: the index at which it is posted. That is the start of the block
// of the compute preceding it (the receives just before that compute, then the compute), so it
// overlaps that compute; 0 when no compute precedes it. -1 for other actions.
std::vector<long> receive_post_points(const std::vector<PipeAction>& actions) {
    std::vector<long> post_at(actions.size(), -1);
    long block_start = 0;  // of the latest compute seen so far
    long run_start = 0;    // first index of the current run of receives
    for (size_t i = 0; i < actions.size(); ++i) {
        const PipeOp op = actions[i].op;
        if (is_recv(op)) {
            post_at[i] = block_start;
            if (i == 0 || !is_recv(actions[i - 1].op)) run_start = long(i);
        } else if (is_compute(op)) {
            const bool after_recv = i > 0 && is_recv(actions[i - 1].op);
            block_start = after_recv ? run_start : long(i);
        }
    }
    return post_at;
}

class StageRunner {
  public:
    StageRunner(Communicator& pp, int stage, int num_stages, const PipeCallbacks& cb)
        : pp_(pp), stage_(stage), last_(stage == num_stages - 1), cb_(cb) {}

    PipeStats run(const std::vector<PipeAction>& actions);

  private:
    struct Pending {
        PipeAction action;
        float* buf;
        Request req;
    };

    void validate(const std::vector<PipeAction>& actions) const;
    float* buffer(const PipeAction& a) const;
    int peer(const PipeAction& a) const;
    void post_recv(const PipeAction& a);
    void wait_recv(const PipeAction& a);
    void send(const PipeAction& a);
    void compute(const PipeAction& a);
    void wait_sends_from(const float* buf);

    Communicator& pp_;
    int stage_;
    bool last_;
    const PipeCallbacks& cb_;
    std::vector<Pending> recvs_;  // posted, not yet waited for
    std::vector<Pending> sends_;  // in flight
    PipeStats stats_;
};

// The callback that gives the buffer of a transfer, and its name for messages.
std::pair<const std::function<float*(int)>*, const char*> buffer_callback(const PipeCallbacks& cb,
                                                                          PipeOp op) {
    switch (op) {
        case PipeOp::RecvAct:
            return {&cb.act_in, "act_in"};
        case PipeOp::SendAct:
            return {&cb.act_out, "act_out"};
        case PipeOp::RecvGrad:
            return {&cb.grad_in, "grad_in"};
        case PipeOp::SendGrad:
            return {&cb.grad_out, "grad_out"};
        default:
            break;
    }
    ETE_ASSERT(false);
    return {nullptr, ""};
}

float* StageRunner::buffer(const PipeAction& a) const {
    const auto [get, name] = buffer_callback(cb_, a.op);
    float* buf = (*get)(a.micro);
    ETE_CHECK(buf != nullptr, "pp executor: stage {}: {}({}) returned null", stage_, name, a.micro);
    return buf;
}

int StageRunner::peer(const PipeAction& a) const {
    // Activations flow to higher stages, gradients to lower ones.
    const bool from_below = a.op == PipeOp::RecvAct || a.op == PipeOp::SendGrad;
    ETE_CHECK(from_below ? stage_ > 0 : !last_,
              "pp executor: stage {} of {} has no peer for {} of micro-batch {}", stage_,
              pp_.size(), op_name(a.op), a.micro);
    return from_below ? stage_ - 1 : stage_ + 1;
}

void StageRunner::post_recv(const PipeAction& a) {
    const int src = peer(a);
    float* buf = buffer(a);
    for (const Pending& r : recvs_) {
        ETE_CHECK(r.buf != buf,
                  "pp executor: stage {}: {} of micro-batch {} lands in the buffer of micro-batch "
                  "{}, whose receive is still pending; give in-flight micro-batches distinct "
                  "buffers",
                  stage_, op_name(a.op), a.micro, r.action.micro);
    }
    wait_sends_from(buf);
    const int tag = pipe_tag(a.micro, a.op == PipeOp::RecvGrad);
    recvs_.push_back({a, buf, pp_.irecv(buf, cb_.act_count, DType::F32, src, tag)});
}

void StageRunner::wait_recv(const PipeAction& a) {
    auto it =
        std::find_if(recvs_.begin(), recvs_.end(), [&](const Pending& r) { return r.action == a; });
    ETE_ASSERT(it != recvs_.end());  // receive_post_points posts every receive before its index
    const Clock::time_point t0 = Clock::now();
    it->req->wait();
    stats_.recv_wait_s += seconds_since(t0);
    recvs_.erase(it);
}

void StageRunner::send(const PipeAction& a) {
    const int dst = peer(a);
    float* buf = buffer(a);
    const int tag = pipe_tag(a.micro, a.op == PipeOp::SendGrad);
    sends_.push_back({a, buf, pp_.isend(buf, cb_.act_count, DType::F32, dst, tag)});
}

void StageRunner::wait_sends_from(const float* buf) {
    const Clock::time_point t0 = Clock::now();
    for (Pending& s : sends_) {
        if (s.buf == buf) s.req->wait();
    }
    std::erase_if(sends_, [&](const Pending& s) { return s.buf == buf; });
    stats_.send_wait_s += seconds_since(t0);
}

void StageRunner::compute(const PipeAction& a) {
    const bool fwd = a.op == PipeOp::Forward;
    // The buffer this compute writes for a later send must not still be in flight.
    if (fwd && !last_) wait_sends_from(buffer({PipeOp::SendAct, a.micro}));
    if (!fwd && stage_ > 0) wait_sends_from(buffer({PipeOp::SendGrad, a.micro}));
    const std::function<void(int)>& fn = fwd ? cb_.forward : cb_.backward;
    const Clock::time_point t0 = Clock::now();
    fn(a.micro);
    stats_.compute_s += seconds_since(t0);
    ++(fwd ? stats_.forwards : stats_.backwards);
}

void StageRunner::validate(const std::vector<PipeAction>& actions) const {
    for (const PipeAction& a : actions) {
        ETE_CHECK(a.micro >= 0, "pp executor: stage {}: {} of micro-batch {}, expected >= 0",
                  stage_, op_name(a.op), a.micro);
        if (is_compute(a.op)) {
            const bool fwd = a.op == PipeOp::Forward;
            ETE_CHECK(fwd ? bool(cb_.forward) : bool(cb_.backward),
                      "pp executor: stage {} needs the {} callback", stage_,
                      fwd ? "forward" : "backward");
            continue;
        }
        peer(a);
        const auto [get, name] = buffer_callback(cb_, a.op);
        ETE_CHECK(*get, "pp executor: stage {} needs the {} callback for {}", stage_, name,
                  op_name(a.op));
    }
}

PipeStats StageRunner::run(const std::vector<PipeAction>& actions) {
    const Clock::time_point t0 = Clock::now();
    // A bad list fails here, on every stage that holds one, before any message moves.
    validate(actions);
    const std::vector<long> post_at = receive_post_points(actions);
    size_t next_post = 0;  // receives are posted in list order: post_at is non-decreasing
    for (size_t i = 0; i < actions.size(); ++i) {
        for (; next_post < actions.size(); ++next_post) {
            if (post_at[next_post] < 0) continue;
            if (post_at[next_post] > long(i)) break;
            post_recv(actions[next_post]);
        }
        const PipeAction& a = actions[i];
        if (is_recv(a.op)) {
            wait_recv(a);
        } else if (is_compute(a.op)) {
            compute(a);
        } else {
            send(a);
        }
    }
    ETE_ASSERT(recvs_.empty());
    const Clock::time_point t1 = Clock::now();
    std::vector<Request> sends;
    for (Pending& s : sends_) sends.push_back(std::move(s.req));
    sends_.clear();
    wait_all(sends);
    stats_.send_wait_s += seconds_since(t1);
    stats_.total_s = seconds_since(t0);
    return stats_;
}

}  // namespace

double PipeStats::measured_bubble() const {
    return total_s > 0 ? 1.0 - compute_s / total_s : 0.0;
}

int pipe_tag(int micro, bool grad) {
    ETE_CHECK(micro >= 0, "pp executor: micro-batch must be >= 0, got {}", micro);
    return int((2 * int64_t(micro) + (grad ? 1 : 0)) % (int64_t(kMaxTag) + 1));
}

PipeStats run_pipeline(const std::vector<PipeAction>& actions, Communicator& pp, int stage,
                       int num_stages, const PipeCallbacks& cb) {
    ETE_CHECK(num_stages >= 1 && stage >= 0 && stage < num_stages,
              "pp executor: stage must be in [0, num_stages = {}), got {}", num_stages, stage);
    ETE_CHECK(pp.size() == num_stages,
              "pp executor: the pp group {} has {} ranks, expected num_stages = {}", pp.name(),
              pp.size(), num_stages);
    ETE_CHECK(pp.rank() == stage,
              "pp executor: stage {} runs on rank {} of the pp group {}, expected rank {}", stage,
              pp.rank(), pp.name(), stage);
    ETE_CHECK(num_stages == 1 || cb.act_count > 0,
              "pp executor: act_count (floats per activation message) must be > 0");
    StageRunner runner(pp, stage, num_stages, cb);
    return runner.run(actions);
}

}  // namespace ete
