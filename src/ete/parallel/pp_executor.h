// ete/parallel/pp_executor.h — walks one pipeline stage's action list (pp_schedule.h): runs the
// forward/backward callbacks and moves micro-batch activations and their gradients to the
// neighbouring stages with non-blocking send/recv on the pp group.
//
// Communication (peer = stage ± 1 in the pp group; tags from the micro-batch and direction):
// - A receive is posted one compute ahead: when the executor reaches the compute action that
//   precedes the receive in the list (or at the start when none does), before that compute runs,
//   so the transfer overlaps it. It is waited for just before its consumer (forward(m) for
//   RecvAct(m), backward(m) for RecvGrad(m)).
// - A send stays in flight until its buffer is about to be written again (forward(m) writes
//   act_out(m), backward(m) writes grad_out(m), a receive writes act_in/grad_in) or the step ends:
//   every send is waited for before run_pipeline returns.
// The sends never block a stage, so every schedule_1f1b list runs without deadlock for any p, m.
//
// Buffers (each act_count floats; a callback must return the same pointer for a micro-batch every
// time it is asked during one run, and distinct pointers to micro-batches whose buffers are live
// at the same time):
// - act_in(m): where RecvAct(m) lands (this stage's input activation; backward(m) may read it).
//   It is owned by the executor from the post until forward(m). A ring of
//   max_in_flight(stage, p, m) + 1 buffers indexed by m % size is enough.
// - grad_in(m): where RecvGrad(m) lands (d of this stage's output). A ring of 2 is enough.
// - act_out(m) / grad_out(m): what SendAct(m) / SendGrad(m) send (this stage's output / d of its
//   input). One buffer each is enough: the executor waits for the previous send from a buffer
//   before the compute that rewrites it.
// A receive posted into a buffer whose earlier receive is still pending is an ete::Error.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "ete/parallel/communicator.h"
#include "ete/parallel/pp_schedule.h"

namespace ete {

struct PipeCallbacks {
    std::function<void(int micro)> forward;   // reads act_in(micro) (stage > 0), writes act_out
    std::function<void(int micro)> backward;  // reads grad_in(micro) (not last), writes grad_out
    // Only the ones a stage's transfers use are needed: act_in and grad_out unless stage 0,
    // act_out and grad_in unless the last stage.
    std::function<float*(int micro)> act_in, act_out, grad_in, grad_out;
    size_t act_count = 0;  // floats per activation (and per gradient) message
};

// One stage's wall time in one run_pipeline call, in seconds.
struct PipeStats {
    double compute_s = 0;    // inside the forward and backward callbacks
    double recv_wait_s = 0;  // blocked waiting for a receive to complete
    double send_wait_s = 0;  // blocked on sends (buffer reuse, and the final wait for all)
    double total_s = 0;      // the whole call
    int forwards = 0, backwards = 0;

    // The share of the step this stage is not computing: 1 - compute_s / total_s (0 when
    // total_s is 0). It includes waits and executor overhead, so it is >= the pipeline bubble
    // proper; compare it with bubble_fraction_theory(p, m).
    double measured_bubble() const;
};

// Runs `actions` (normally schedule_1f1b(stage, num_stages, m)) on this stage. `pp` is the
// pipeline group: size num_stages, this rank = stage. Throws ete::Error for a group that does
// not match, a missing callback or buffer, or a transfer the stage has no peer for; the
// transport's errors (timeouts) propagate.
PipeStats run_pipeline(const std::vector<PipeAction>& actions, Communicator& pp, int stage,
                       int num_stages, const PipeCallbacks& cb);

// The message tag of micro-batch `micro`'s activation (grad = false) or gradient (grad = true):
// 2·micro + grad, wrapped below kMaxTag + 1. Wrapping is safe: messages between one pair with one
// tag arrive in order and the executor posts its receives in micro-batch order.
int pipe_tag(int micro, bool grad);

}  // namespace ete
