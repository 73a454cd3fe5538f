// ete/nn/norm.cpp
#include "ete/nn/norm.h"

#include "ete/core/error.h"

namespace ete {

CVec norm_weight(Backend& be, CVec w, float w_offset, Vec scratch) {
    if (w_offset == 0.0f) return w;
    ETE_ASSERT(scratch.dtype == DType::F32 && scratch.n >= w.n);
    const Mat s = as_mat(scratch.slice(0, w.n));
    be.fill(s, w_offset);
    be.add(s, as_mat(w));
    return s.flat();
}

void Norm::forward(Backend& be, Mat out, Vec mean, Vec rstd, CMat x, Vec hook_state) const {
    if (layernorm_) {
        be.layernorm_forward(out, mean, rstd, x, p_.w, p_.b, eps_);
    } else {
        be.rmsnorm_forward(out, rstd, x, norm_weight(be, p_.w, w_offset_, w_scratch_), eps_);
    }
    hook_forward(out_hook_, out, hook_state);
}

void Norm::forward_quantized(Backend& be, Mat q, CMat x, CVec scale, CVec zero,
                             const QuantGrid& g) const {
    ETE_CHECK(!layernorm_, "norm: a quantized output is fused for RMSNorm only");
    be.rmsnorm_quantize(q, x, norm_weight(be, p_.w, w_offset_, w_scratch_), eps_, scale, zero, g);
}

void Norm::backward(Backend& be, Mat d_x, Mat d_out, CMat x, CVec mean, CVec rstd,
                    CVec hook_state) const {
    hook_backward(out_hook_, d_out, hook_state);
    // A frozen norm (empty d_w, d_b) still passes the gradient to its input.
    if (layernorm_) {
        be.layernorm_backward(d_x, p_.d_w, p_.d_b, d_out, x, p_.w, mean, rstd);
    } else {
        be.rmsnorm_backward(d_x, p_.d_w, d_out, x, norm_weight(be, p_.w, w_offset_, w_scratch_),
                            rstd);
    }
}

}  // namespace ete
