// ete/nn/norm.h — the normalisation layer: RMSNorm (Llama) or LayerNorm (GPT-2), with its
// weight (and bias) from the ParamStore in F32. Statistics (mean, rstd) are F32 and saved by the
// caller for backward; the output may be in a 16-bit compute dtype (it feeds a GEMM), the input
// and its gradient are the F32 residual stream.
#pragma once

#include "ete/backend/backend.h"

namespace ete {

struct NormParams {
    CVec w;   // (C) F32
    Vec d_w;  // (C) F32, empty = frozen
    CVec b;   // (C) LayerNorm only
    Vec d_b;  // (C) LayerNorm only
};

class Norm {
  public:
    Norm() = default;
    Norm(NormParams p, bool layernorm, float eps) : p_(p), layernorm_(layernorm), eps_(eps) {}
    bool layernorm() const { return layernorm_; }

    // out (N, C) = norm(x); mean (N) is used by LayerNorm only.
    void forward(Backend& be, Mat out, Vec mean, Vec rstd, CMat x) const;
    // q (N, C) = quantize_s8 of forward's F32 output, in one pass (RMSNorm; the integer model's
    // inputs). LayerNorm: not fused (throws).
    void forward_quantized(Backend& be, Mat q, CMat x, CVec scale, CVec zero,
                           const QuantGrid& g) const;
    // d_x (N, C) += the gradient through the norm (residual stream); d_w, d_b +=.
    void backward(Backend& be, Mat d_x, CMat d_out, CMat x, CVec mean, CVec rstd) const;

  private:
    NormParams p_;
    bool layernorm_ = false;
    float eps_ = 1e-5f;
};

}  // namespace ete
