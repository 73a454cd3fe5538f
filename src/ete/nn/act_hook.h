// ete/nn/act_hook.h — a hook on a tensor a module reads or writes (DESIGN.md §3b): forward
// transforms it in place, backward passes its gradient back through that transform. QAT's
// activation points are hooks (model/qat_runtime.h: fake quantization with a straight-through
// mask), installed on a Norm's output, a Linear's input and output, and a decoder layer's
// sublayer outputs (the residual stream); a module without a hook does nothing extra.
//
// A hook's per-call state (QAT: the mask of one micro-batch's forward, which its backward reads)
// lives in the caller's saved activations and is handed to each call, as LoraActs are: one hook
// serves every micro-batch in flight and a recompute.
#pragma once

#include "ete/core/view.h"

namespace ete {

class ActHook {
  public:
    virtual ~ActHook() = default;
    // x (N, cols) in place; state: this call's saved buffer.
    virtual void forward(Mat x, Vec state) const = 0;
    // d_x (N, cols) = d_y through the transform of the forward that wrote state (d_y may be d_x).
    virtual void backward(Mat d_x, CMat d_y, CVec state) const = 0;
    // Whether backward changes a gradient now (false: it is the identity and may be skipped).
    virtual bool grad_active() const = 0;
};

// The hook's forward on x, if there is a hook.
inline void hook_forward(const ActHook* h, Mat x, Vec state) {
    if (h) h->forward(x, state);
}

// d_x = d_y through the hook in place, if there is one.
inline void hook_backward(const ActHook* h, Mat d_x, CVec state) {
    if (h) h->backward(d_x, d_x, state);
}

}  // namespace ete
