// ete/model/lora_rank.h — changing a LoRA adapter's active rank without losing what it learned
// (DESIGN.md §5): host maths on one adapter's whole (unsharded) A (R, in) and B (out, R),
// row-major F32, active rank r <= R; scale is the adapter's fixed scale (alpha / r0).
//
// Shrink r -> r' < r: the best rank-r' approximation of scale·B_r·A_r (Eckart–Young), written back
// in place: with B_r = Q_B R_B and A_rᵀ = Q_A R_A (thin QR, LAPACK dgeqrf/dorgqr) the product is
// Q_B (R_B R_Aᵀ) Q_Aᵀ, and the SVD of the small r×r core U Σ Vᵀ (dgesvd) gives
// B' = Q_B U_{r'} Σ_{r'}^½ and A' = Σ_{r'}^½ V_{r'}ᵀ Q_Aᵀ, so scale·B'·A' is the truncated SVD.
// The out×in product is never formed. Rows r'..R of A and columns r'..R of B become 0. It
// returns the discarded singular values of scale·B_r·A_r: for any x the layer's output moves by
// at most σ_{r'+1}·|x|, and ‖ΔW‖_F² = Σ discarded σ².
//
// Grow r -> r' > r: columns r..r' of B stay 0, so the output does not change at all; rows r..r'
// of A get fresh Kaiming-uniform values (from `init_a`, given the element's index in A), or the
// new directions could never receive a gradient (d_B' ∝ x·A'ᵀ, d_A' ∝ B'ᵀ).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ete {

std::vector<double> lora_shrink(float* a, float* b, int64_t in, int64_t out, int R, int r,
                                int r_new, float scale);
void lora_grow(float* a, float* b, int64_t in, int64_t out, int R, int r, int r_new,
               const std::function<float(int64_t index)>& init_a);

}  // namespace ete
