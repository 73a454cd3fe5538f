// ete/nn/linear.h — the one linear layer, y = x·Wᵀ + b, W stored (out, in) like HF nn.Linear.
//
// It is the place where a weight's storage format, its bias, and its tensor-parallel mode meet:
//   - W is read in the compute dtype the ParamStore holds it in (F32, or a 16-bit copy under
//     mixed precision): x and d_y must be in that dtype too, products accumulate in fp32, and the
//     weight gradient accumulates into the F32 gradient (a β = 1 GEMM).
//   - A frozen weight (empty d_w) gets no weight gradient; its bias likewise.
//   - Tensor parallelism: Column splits the output features (the input is replicated:
//     copy_to_region, so backward_input sums d_x over tp); Row splits the input features (the
//     output is partial: reduce_from_region sums it in forward, before the replicated bias).
// Adapters (LoRA) and quantization hooks (fake quant of input, weight, output) wrap this layer
// in the next issues: each gets its own member with its own forward/backward around forward()
// and the two backward halves, which is why backward is split in weight and input parts.
//
// Gradient rule: d_W, d_b accumulate; d_x is written. Row strides of x, y, d_y may exceed their
// widths (views into fused buffers such as q|k|v or gate|up).
#pragma once

#include "ete/backend/backend.h"
#include "ete/parallel/communicator.h"

namespace ete {

enum class TpMode { None, Column, Row };

struct LinearParams {
    CMat w;   // (out, in), compute dtype
    Mat d_w;  // (out, in) F32, empty = frozen
    CVec b;   // (out) F32, or empty (no bias)
    Vec d_b;  // (out) F32, empty when there is no bias or it is frozen
};

class Linear {
  public:
    Linear() = default;
    // tp: the device-capable tp group for Column/Row (null = no communication).
    explicit Linear(LinearParams p, TpMode mode = TpMode::None, Communicator* tp = nullptr)
        : p_(p), mode_(mode), tp_(mode == TpMode::None ? nullptr : tp) {}

    int64_t in() const { return p_.w.cols; }
    int64_t out() const { return p_.w.rows; }
    DType dtype() const { return p_.w.dtype; }
    const LinearParams& params() const { return p_; }

    // y (N, out) = x (N, in) · Wᵀ + b, or with accumulate y += x · Wᵀ + b. A Row layer under tp
    // sums the product over tp before the bias; accumulating then needs `scratch` (N, out),
    // contiguous, in y's dtype.
    void forward(Backend& be, Mat y, CMat x, bool accumulate = false, Mat scratch = {}) const;
    // d_W += d_yᵀ · x, d_b += Σ_rows d_y (nothing for a frozen weight).
    void backward_weight(Backend& be, CMat d_y, CMat x) const;
    // d_x (N, in) = d_y · W; a Column layer under tp sums it over tp (d_x contiguous then).
    void backward_input(Backend& be, Mat d_x, CMat d_y) const;
    // Both; d_x may be empty (an input that needs no gradient).
    void backward(Backend& be, Mat d_x, CMat d_y, CMat x) const {
        backward_weight(be, d_y, x);
        if (!d_x.empty()) backward_input(be, d_x, d_y);
    }

  private:
    LinearParams p_;
    TpMode mode_ = TpMode::None;
    Communicator* tp_ = nullptr;
};

}  // namespace ete
