// ete/nn/head_norm.h — RMSNorm over each query and key head of a fused q|k|v activation (Qwen3's
// self_attn.q_norm and k_norm): head h of row n, the D values qkv[n, h·D, (h+1)·D), is
// normalised over those D values and scaled by the weight of its kind (q or k; (D) F32). The v
// heads are untouched. It runs after the q|k|v projection and before RoPE.
//
// The backend's norms run over the rows of a matrix, and a q|k|v row holds its H q heads, then
// its KV k heads, then v. So the layer gathers the q heads and the k heads into contiguous F32
// buffers, (N·H, D) and (N·KV, D) (one strided copy each: q and k are each a column block of
// q|k|v), normalises them as rows in fp32 and writes the outputs back into q|k|v in its dtype.
// The gathered inputs and their rstd are what the backward reads (HeadNormActs, saved per layer).
//
// Tensor parallelism: the weights are replicated and every rank normalises only its own heads, so
// a rank's weight gradient is a partial sum over its heads. backward() leaves this micro-batch's
// partial in d_w_part; the caller sums it over the tp group and adds it to the gradient
// (the weight gradients go straight to the gradient with tp = 1: d_w_part empty).
#pragma once

#include "ete/backend/backend.h"
#include "ete/nn/norm.h"

namespace ete {

// What one layer's forward saves for its backward.
struct HeadNormActs {
    Mat q_in, k_in;      // (N·H, D), (N·KV, D) F32: the heads before the norm
    Vec q_rstd, k_rstd;  // (N·H), (N·KV) F32
};

class HeadNorm {
  public:
    HeadNorm() = default;
    // q, k: the weights (and their gradients; empty = frozen); H, KV: this rank's heads.
    // w_offset, w_scratch (D F32): Gemma 3's (1 + w) weights, as Norm's.
    HeadNorm(NormParams q, NormParams k, float eps, int H, int KV, int D, float w_offset = 0.0f,
             Vec w_scratch = {});
    bool enabled() const { return H_ > 0; }

    // qkv (N, (H + 2KV)·D) in place; the inputs and statistics into a (N rows); out (N, H·D) in
    // qkv's dtype is scratch.
    void forward(Backend& be, Mat qkv, const HeadNormActs& a, Mat out) const;
    // d_qkv (N, (H + 2KV)·D) in place: the q and k parts become the gradient before the norm.
    // d_norm (N, H·D) F32 and d_in (N, H·D) F32 are scratch. d_w_part (2·D) F32: when not
    // empty, the q and k weight gradients of this call land there (overwritten) instead of
    // accumulating into the weights' gradients.
    void backward(Backend& be, Mat d_qkv, const HeadNormActs& a, Mat d_norm, Mat d_in,
                  Vec d_w_part) const;

  private:
    // The q (k = false) or k heads' columns of a q|k|v view.
    Mat block(Mat qkv, bool k) const;
    NormParams q_, k_;
    float eps_ = 1e-6f;
    int H_ = 0, KV_ = 0, D_ = 0;
    float w_offset_ = 0.0f;
    Vec w_scratch_;
};

}  // namespace ete
