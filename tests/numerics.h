// tests/numerics.h — the error estimates the suite's numeric tolerances are derived from.
//
// Every numeric bound in the tests is one of two kinds:
//  - bit equality, where the code guarantees the same operations in the same order;
//  - an error estimate of the computation, stated in one line beside the bound, built from
//      u   the unit roundoff of the type that rounds: fp32 2^-24, bf16 2^-8, fp16 2^-11;
//      n   the accumulation length: the terms of one sum or dot product, or, for a value at the
//          end of a chain of them (a network's forward and backward), the sum of the chain's
//          lengths (decoder_chain);
//    and one of two models of how rounding errors add up:
//      worst  γ_n = n·u/(1 − n·u): any order, any data (Higham, "Accuracy and Stability of
//             Numerical Algorithms", 2002, §3.1), relative to Σ|terms|;
//      prob   γ̃_n(λ) = exp(λ·√n·u + n·u²/(1 − u)) − 1 ≈ λ·√n·u: holds with probability at
//             least 1 − 2·exp(−λ²(1 − u)²/2) when the rounding errors are independent and of mean
//             zero (Higham and Mary, "A New Approach to Probabilistic Rounding Error Analysis",
//             SISC 2019, Theorem 2.4); λ = 6 here, so a bound fails with probability ≤ 3e-8.
//    Two evaluations that differ only in summation order (another BLAS kernel, another row
//    blocking, another layout's reduction) are each within the bound of the exact value, so they
//    differ by at most twice it: the reorder_* functions.
//
// Kernel choices change the summation order, never the set of products: every such bound holds
// whichever OpenBLAS core, oneDNN ISA or 16-bit engine runs (run.sh test checks it under several).
#pragma once

#include <cmath>
#include <cstdint>

namespace ete::testing {

inline constexpr double kUnitF32 = 0x1p-24;
inline constexpr double kUnitBf16 = 0x1p-8;
inline constexpr double kUnitF16 = 0x1p-11;
inline constexpr double kLambda = 6.0;

// γ_n: worst-case relative error (to Σ|terms|) of an n-term sum in any order.
inline double gamma_worst(double n, double u = kUnitF32) {
    return n * u / (1.0 - n * u);
}
// γ̃_n(λ): the probabilistic bound, failing with probability ≤ 2·exp(−λ²/2).
inline double gamma_prob(double n, double u = kUnitF32, double lambda = kLambda) {
    return std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1.0 - u));
}
// Two summation orders of the same terms: twice the bound.
inline double reorder_worst(double n, double u = kUnitF32) {
    return 2.0 * gamma_worst(n, u);
}
inline double reorder_prob(double n, double u = kUnitF32, double lambda = kLambda) {
    return 2.0 * gamma_prob(n, u, lambda);
}

// The accumulation length along a decoder's longest chain of reductions, forward and backward:
// per layer the norm (C), the q/k/v projection (C), the scores (head dim hd), the softmax and P·V
// (T keys each: 2T), the output projection (C), the MLP's norm (C), its input projections (C) and
// its output projection (F); then the final norm and the head (2C) and the loss's log-sum-exp (V).
// Backward runs the same chain again and each weight gradient sums over the N tokens of the batch.
inline double decoder_chain(int64_t layers, int64_t C, int64_t hd, int64_t T, int64_t F, int64_t V,
                            int64_t N) {
    const double layer = double(5 * C + hd + 2 * T + F);
    return 2.0 * (double(layers) * layer + double(2 * C + V)) + double(N);
}
// The forward half alone, up to the logits (no loss): the layers, the final norm and the head.
inline double decoder_forward_chain(int64_t layers, int64_t C, int64_t hd, int64_t T, int64_t F) {
    return double(layers) * double(5 * C + hd + 2 * T + F) + double(2 * C);
}

// The same chains of a model config (ModelConfig's fields; a template, so this header needs none
// of the engine's), over T positions and N tokens a step.
template <typename Config>
double model_chain(const Config& c, int64_t T, int64_t N) {
    return decoder_chain(c.num_layers, c.hidden_size, c.D(), T, c.intermediate_size, c.vocab_size,
                         N);
}
template <typename Config>
double model_forward_chain(const Config& c, int64_t T) {
    return decoder_forward_chain(c.num_layers, c.hidden_size, c.D(), T, c.intermediate_size);
}

// A model's logits against a float64 golden on the same f32 weights (rounded once to f32): its
// own f32 rounding along the forward chain, with 4 more roundings a layer for the kernels'
// approximate exp, tanh and sigmoid (a few ulp each).
template <typename Config>
double golden_logit_bound(const Config& c, int64_t T) {
    return gamma_prob(model_forward_chain(c, T) + 4.0 * double(c.num_layers) + 1.0);
}

}  // namespace ete::testing
