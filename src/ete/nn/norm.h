// ete/nn/norm.h — the normalisation layer: RMSNorm (Llama), Gemma's RMSNorm that multiplies by
// (1 + w), or LayerNorm (GPT-2), with its weight (and bias) from the ParamStore in F32. Statistics
// (mean, rstd) are F32 and saved by the caller for backward; the output may be in a 16-bit compute
// dtype (it feeds a GEMM), the input and its gradient are the F32 residual stream. An output
// hook (nn/act_hook.h: QAT's fake quantization of what the next linears read) transforms the
// output in forward and the output's gradient in backward.
#pragma once

#include "ete/backend/backend.h"
#include "ete/nn/act_hook.h"

namespace ete {

struct NormParams {
    CVec w;   // (C) F32
    Vec d_w;  // (C) F32, empty = frozen
    CVec b;   // (C) LayerNorm only
    Vec d_b;  // (C) LayerNorm only
};

// The weight an RMSNorm multiplies by: w itself, or w_offset + w written into scratch (at least
// w.n F32) in fp32 with one rounding — exactly Hugging Face's `1.0 + weight.float()` (Gemma).
// The weight's gradient is the same either way (d(1 + w)/dw = 1).
CVec norm_weight(Backend& be, CVec w, float w_offset, Vec scratch);

class Norm {
  public:
    Norm() = default;
    // w_offset != 0 (Gemma's 1): the weight is applied as w_offset + w, built in w_scratch
    // (C F32, shared by every norm of a model: each call rebuilds it) before each use.
    Norm(NormParams p, bool layernorm, float eps, float w_offset = 0.0f, Vec w_scratch = {})
        : p_(p), layernorm_(layernorm), eps_(eps), w_offset_(w_offset), w_scratch_(w_scratch) {}
    bool layernorm() const { return layernorm_; }
    // The output hook (null: none); it outlives the norm's use.
    void set_output_hook(const ActHook* h) { out_hook_ = h; }
    const ActHook* output_hook() const { return out_hook_; }

    // out (N, C) = hook(norm(x)); mean (N) is used by LayerNorm only. hook_state: the output
    // hook's state for this call (unused without a hook).
    void forward(Backend& be, Mat out, Vec mean, Vec rstd, CMat x, Vec hook_state = {}) const;
    // q (N, C) = quantize_s8 of forward's F32 output, in one pass (RMSNorm; the integer model's
    // inputs). LayerNorm: not fused (throws).
    void forward_quantized(Backend& be, Mat q, CMat x, CVec scale, CVec zero,
                           const QuantGrid& g) const;
    // d_x (N, C) += the gradient through the norm (residual stream); d_w, d_b +=. With an output
    // hook d_out is first passed back through it in place (hook_state: forward's).
    void backward(Backend& be, Mat d_x, Mat d_out, CMat x, CVec mean, CVec rstd,
                  CVec hook_state = {}) const;

  private:
    NormParams p_;
    bool layernorm_ = false;
    float eps_ = 1e-5f;
    float w_offset_ = 0.0f;
    Vec w_scratch_;
    const ActHook* out_hook_ = nullptr;
};

}  // namespace ete
