// ete/nn/rope.h — rotary position embedding tables (HF rotate-half convention).
//
// inv_freq[j] = theta^(-2j/D) for j < D/2, optionally rescaled by `rope_scaling` (linear: / factor;
// llama3: Llama 3's blend);
// cos/sin tables are (T, D/2): angle = t · inv_freq[j]. The rotation itself is a backend kernel.
#pragma once

#include <string>
#include <vector>

namespace ete {

struct RopeScaling {
    std::string type = "default";  // "default" (none), "linear" (factor only) or "llama3"
    double factor = 8.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int original_max_position_embeddings = 8192;
};

std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling);

// Fills cos/sin (T, D/2).
void rope_tables(float* cos, float* sin, int T, int head_dim, double theta,
                 const RopeScaling& scaling);

}  // namespace ete
