// ete/nn/linear.h — the one linear layer, y = x·Wᵀ + b (+ a LoRA adapter), W stored (out, in)
// like HF nn.Linear.
//
// It is the place where a weight's storage format, its bias, its adapter and its tensor-parallel
// mode meet:
//   - W is dense in the compute dtype the ParamStore holds it in (F32, or a 16-bit copy under
//     mixed precision), or NF4 (core/nf4.h), dequantized tile by tile inside the GEMM. x and d_y
//     are in the compute dtype, products accumulate in fp32, and a trainable W's gradient
//     accumulates into the F32 gradient (a β = 1 GEMM). For inference, an integer weight
//     (nn/int8_linear.h) may replace the dense one in forward products.
//   - A frozen weight (empty d_w; always for NF4) gets no weight gradient; its bias likewise.
//   - An adapter (nn/lora.h) adds scale · (x·Aᵀ)·Bᵀ (x under dropout: x̃); it needs LoraActs in
//     forward and backward.
//   - Hooks (nn/act_hook.h; QAT's fake quantization): one on the input the products read (the
//     caller applies it to the buffer it will pass, forward_input_hook, and to backward's d_x,
//     backward_input_hook), one on the output (forward applies it to the whole product, a Row
//     layer's after its tp sum; the caller passes d_y through it before backward).
//   - Tensor parallelism: Column splits the output features (the input is replicated:
//     copy_to_region, so the input gradient is summed over tp); Row splits the input features
//     (the output is partial: reduce_from_region sums it in forward, before the replicated bias).
//
// Backward comes in halves so that a caller can run several Linears that read one input (the
// q, k and v projections of a frozen base) and communicate once: backward_weight (parameter
// gradients; computes the adapter's d_u, so it runs first), backward_input_base (d_x = or +=
// d_y·W, no communication), backward_input_finish (the tp sum of a Column layer, then the
// adapter's d_x term). backward_input runs the last two.
//
// Gradient rule: d_W, d_b, d_A, d_B accumulate; d_x is written. Row strides of x, y, d_y may
// exceed their widths (views into fused buffers such as q|k|v or gate|up).
#pragma once

#include "ete/backend/backend.h"
#include "ete/nn/act_hook.h"
#include "ete/nn/lora.h"
#include "ete/parallel/communicator.h"

namespace ete {

enum class TpMode { None, Column, Row };

class Int8Weight;

struct LinearParams {
    CMat w;  // (out, in), compute dtype; or empty when the weight is NF4
    // (out, in) NF4 weight (frozen), or null. A pointer to the ParamStore's view, so a weight
    // loaded after the layers were built is seen (its shape is known from the start).
    const Nf4View* nf4 = nullptr;
    Mat d_w;  // (out, in) F32, empty = frozen
    CVec b;   // (out) F32, or empty (no bias)
    Vec d_b;  // (out) F32, empty when there is no bias or it is frozen
};

class Linear {
  public:
    Linear() = default;
    // tp: the device-capable tp group for Column/Row (null = no communication).
    explicit Linear(LinearParams p, TpMode mode = TpMode::None, Communicator* tp = nullptr);

    int64_t in() const { return nf4() ? p_.nf4->cols : p_.w.cols; }
    int64_t out() const { return nf4() ? p_.nf4->rows : p_.w.rows; }
    bool nf4() const { return p_.nf4 != nullptr; }
    const LinearParams& params() const { return p_; }
    TpMode mode() const { return mode_; }

    // Replaces the weight the products read by a dense one of the same shape (QAT's
    // fake-quantized copy; for an NF4 weight, of its dequantized values).
    void set_weight(CMat w);
    // Computes forward products with an integer weight (nn/int8_linear.h, the int8 model; same
    // shape, kept by the caller) instead of the dense one; null restores it. Inference only.
    void set_int8(const Int8Weight* w);
    bool int8() const { return i8_ != nullptr; }
    const Int8Weight* int8_weight() const { return i8_; }

    // Attaches (or with empty params removes) the adapter; shapes must match the base.
    void set_adapter(const LoraParams& lora);
    const LoraParams& adapter() const { return lora_; }
    bool has_adapter() const { return !lora_.empty(); }
    void set_rank(int r);  // the adapter's active rank, 0 < r <= r_max
    // The adapter's scale (PEFT: alpha / r of its own rank_pattern / alpha_pattern entry).
    void set_adapter_scale(float scale);

    // The hooks (null: none); they outlive the layer's use.
    void set_hooks(const ActHook* input, const ActHook* output) {
        in_hook_ = input;
        out_hook_ = output;
    }
    const ActHook* input_hook() const { return in_hook_; }
    const ActHook* output_hook() const { return out_hook_; }
    // The input hook on x in place: the input forward and backward_weight then read (a caller
    // that needs x itself too hands a copy). state: the hook's state for this call.
    void forward_input_hook(Mat x, Vec state) const { hook_forward(in_hook_, x, state); }
    // backward's d_x through the input hook, in place (state: forward_input_hook's).
    void backward_input_hook(Mat d_x, CVec state) const { hook_backward(in_hook_, d_x, state); }

    // y (N, out) = x (N, in) · Wᵀ + b (+ adapter), or with accumulate y += .... A Row layer
    // under tp sums the product over tp before the bias; accumulating then needs `scratch`
    // (N, out), contiguous, in y's dtype. acts: the adapter's activations (needed iff it has one).
    // With an output hook y = hook(...) (hook_state: its state for this call); accumulating
    // onto a hooked output is refused.
    void forward(Backend& be, Mat y, CMat x, bool accumulate = false, Mat scratch = {},
                 const LoraActs* acts = nullptr, Vec hook_state = {}) const;
    // What forward saves for backward, without y: the adapter's u (nothing without an adapter).
    // For a recomputed layer whose output is not needed again.
    void forward_saved(Backend& be, CMat x, const LoraActs* acts) const;
    // d_W += d_yᵀ · x, d_b += Σ_rows d_y (nothing for a frozen weight); the adapter's d_u, d_B
    // and d_A.
    void backward_weight(Backend& be, CMat d_y, CMat x, const LoraActs* acts = nullptr) const;
    // d_x (N, in) = d_y · W, or += with accumulate; no communication.
    void backward_input_base(Backend& be, Mat d_x, CMat d_y, bool accumulate = false) const;
    // After the base terms: a Column layer sums d_x over tp (d_x contiguous then), then the
    // adapter adds d_u · A. With several Linears on one input, call it with sum = true once (the
    // first) and sum = false for the others.
    void backward_input_finish(Backend& be, Mat d_x, const LoraActs* acts, bool sum = true) const;
    void backward_input(Backend& be, Mat d_x, CMat d_y, const LoraActs* acts = nullptr) const {
        backward_input_base(be, d_x, d_y);
        backward_input_finish(be, d_x, acts);
    }
    // Both; d_x may be empty (an input that needs no gradient).
    void backward(Backend& be, Mat d_x, CMat d_y, CMat x, const LoraActs* acts = nullptr) const {
        backward_weight(be, d_y, x, acts);
        if (!d_x.empty()) backward_input(be, d_x, d_y, acts);
    }

  private:
    void base_product(Backend& be, Mat y, CMat x, float beta) const;
    const Nf4View& nf4_weight() const;
    void adapter_forward(Backend& be, Mat y, CMat x, const LoraActs& acts) const;
    CMat adapter_u(Backend& be, CMat x, const LoraActs& acts) const;
    CMat adapter_input(Backend& be, CMat x, const LoraActs& acts) const;

    LinearParams p_;
    LoraParams lora_;
    const Int8Weight* i8_ = nullptr;
    TpMode mode_ = TpMode::None;
    Communicator* tp_ = nullptr;
    const ActHook* in_hook_ = nullptr;
    const ActHook* out_hook_ = nullptr;
};

}  // namespace ete
