// ete/nn/rope.h — rotary position embedding tables (HF rotate-half convention).
//
// RoPE rotates the first R = rotary_dim dims of every q and k head (R = D, or HF's
// int(D · partial_rotary_factor) for Phi-3/Phi-4; the other D - R dims pass through) as R/2 pairs
// (j, j + R/2). inv_freq[j] = theta^(-2j/R) for j < R/2, rescaled by `rope_scaling` as Hugging
// Face's modeling_rope_utils does:
//   linear:   / factor;
//   llama3:   Llama 3.1's blend (long wavelengths / factor, short ones kept, a ramp between);
//   yarn:     YaRN's blend of interpolated (/ factor) and extrapolated frequencies over the
//             correction range of beta_fast..beta_slow rotations, and an attention factor;
//   longrope: Phi-3's per-frequency factors (short_factor, or long_factor when the sequence is
//             longer than original_max_position_embeddings), and an attention factor.
// The tables are (T, R/2): cos = cos(t · inv_freq[j]) · attention_factor, likewise sin (HF
// multiplies its cos/sin by attention_scaling). The rotation itself is a backend kernel.
#pragma once

#include <string>
#include <vector>

namespace ete {

struct RopeScaling {
    // "default" (none), "linear", "llama3", "yarn" or "longrope"
    std::string type = "default";
    double factor = 8.0;
    double low_freq_factor = 1.0;   // llama3
    double high_freq_factor = 4.0;  // llama3
    int original_max_position_embeddings = 8192;
    // yarn: the correction range in rotations, whether its ends are rounded outwards, and the
    // attention factor's inputs (attention_factor <= 0: from factor, mscale and mscale_all_dim).
    double beta_fast = 32.0, beta_slow = 1.0;
    bool truncate = true;
    double mscale = 0, mscale_all_dim = 0;
    // yarn and longrope: the factor cos and sin are multiplied by; 0: from the formula of the type.
    double attention_factor = 0;
    // longrope: one factor per frequency (R/2 each).
    std::vector<double> short_factor, long_factor;

    bool operator==(const RopeScaling&) const = default;
};

// The inverse frequencies (R/2) for rotary width R and a sequence of seq_len positions (which
// longrope's choice of factors depends on), and the attention factor of the tables.
struct RopeFrequencies {
    std::vector<double> inv_freq;
    double attention_factor = 1.0;
};
RopeFrequencies rope_frequencies(int rotary_dim, double theta, const RopeScaling& scaling,
                                 int seq_len);

// The inverse frequencies alone (for tests and tools).
std::vector<double> rope_inv_freq(int rotary_dim, double theta, const RopeScaling& scaling,
                                  int seq_len = 0);

// Fills cos/sin (T, R/2).
void rope_tables(float* cos, float* sin, int T, int rotary_dim, double theta,
                 const RopeScaling& scaling);

}  // namespace ete
