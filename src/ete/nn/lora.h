// ete/nn/lora.h — a LoRA adapter (DESIGN.md §5, PEFT conventions): the member of nn::Linear that
// adds scale · B · A · x to its output.
//
//   y += scale · (x · Aᵀ) · Bᵀ,   A (r, in), B (out, r),  scale = alpha / r (alpha / √r rsLoRA)
//
// computed as u = x · Aᵀ (N, r) first and then u · Bᵀ, so B · A is never formed (Unsloth's
// ordering: two thin GEMMs instead of one (out, in) product). Its backward, with d_u = scale ·
// d_y · B (N, r):  d_B += scale · d_yᵀ · u,  d_A += d_uᵀ · x,  d_x += d_u · A.
//
// The adapter is allocated at r_max and runs at its active rank r <= r_max: the first r rows of A
// and columns of B (views with the r_max leading dimension), so shapes, buffer offsets and
// checkpoint keys never move when the rank changes (dynamic rank).
//
// Tensor parallelism follows the base. Column-parallel base (out split): A replicated, B split by
// rows; u is computed whole on every rank, and the (N, r) partial d_u is summed over tp before
// d_A (identical on every rank then) and the d_x term. Row-parallel base (in split): A split by
// columns, B replicated; the (N, r) partial u is summed over tp before u · Bᵀ.
//
// Dtypes: A, B, u and the copy of d_u the GEMMs read are in the compute dtype; d_A, d_B and the
// d_u that is summed over tp are F32.
#pragma once

#include "ete/backend/backend.h"

namespace ete {

struct LoraParams {
    CMat a;   // (r_max, in) compute dtype; under a Row base this rank's columns
    CMat b;   // (out, r_max) compute dtype; under a Column base this rank's rows
    Mat d_a;  // (r_max, in) F32
    Mat d_b;  // (out, r_max) F32
    float scale = 1.0f;
    int rank = 0;  // active rank, 0 < rank <= r_max

    bool empty() const { return a.empty(); }
    int r_max() const { return int(a.rows); }
};

// The activations one adapter of one micro-batch needs between forward and backward. N rows of
// r_max columns each; the caller owns them.
//
// Dropout (lora.dropout = p > 0, training only): the adapter reads x̃ = dropout(x) where the base
// reads x, as PEFT's lora_dropout does: u = x̃ · Aᵀ, d_A += d_uᵀ · x̃, d_x += mask ⊙ (d_u · A) /
// (1 - p). The mask is counter-based (backend.h DropoutMask): backward regenerates x̃ from the
// saved x instead of keeping it, and a recomputed forward draws the same mask.
struct LoraActs {
    Mat u;     // (N, r_max) compute dtype: x · Aᵀ, saved by forward
    Mat d_u;   // (N, r_max) F32: scratch (forward's tp sum of u, backward's d_u)
    Mat d_uc;  // (N, r_max) compute dtype: d_u for the GEMMs; may be d_u itself when that is F32
    DropoutMask drop;  // inactive: no dropout (evaluation, p = 0)
    Mat x_drop;        // drop active: contiguous scratch of >= N·in elements, compute dtype (x̃)
    Mat dx_drop;       // drop active: contiguous scratch of >= N·in elements, F32 (d_u · A)
};

// The scale PEFT gives an adapter of rank r: alpha / r, or alpha / √r with rsLoRA.
float lora_scale(float alpha, int r, bool rslora);

}  // namespace ete
