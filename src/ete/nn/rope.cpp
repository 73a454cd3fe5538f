// ete/nn/rope.cpp
#include "ete/nn/rope.h"

#include <cmath>

#include "ete/core/error.h"

namespace ete {

std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& sc) {
    ETE_CHECK(head_dim % 2 == 0, "rope: head_dim {} must be even", head_dim);
    int half = head_dim / 2;
    std::vector<double> f(static_cast<size_t>(half));
    for (int j = 0; j < half; ++j) f[j] = std::pow(theta, -2.0 * j / head_dim);
    if (sc.type == "default") return f;
    if (sc.type == "linear") {  // positions divided by the factor (HF's linear scaling)
        for (double& x : f) x /= sc.factor;
        return f;
    }
    ETE_CHECK(sc.type == "llama3",
              "rope_scaling type '{}': expected 'linear' or 'llama3' (or none)", sc.type);
    // Llama-3: long wavelengths are divided by `factor`, short ones kept, a smooth blend between.
    double orig = sc.original_max_position_embeddings;
    double low_wl = orig / sc.low_freq_factor, high_wl = orig / sc.high_freq_factor;
    for (double& x : f) {
        double wl = 2.0 * M_PI / x;
        if (wl > low_wl) {
            x = x / sc.factor;
        } else if (wl >= high_wl) {
            double s =
                (orig / wl - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
            x = (1.0 - s) * x / sc.factor + s * x;
        }
    }
    return f;
}

void rope_tables(float* cos, float* sin, int T, int head_dim, double theta,
                 const RopeScaling& scaling) {
    auto f = rope_inv_freq(head_dim, theta, scaling);
    int half = head_dim / 2;
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < half; ++j) {
            // HF computes the angle in f32 (t * inv_freq as float); match that rounding.
            float angle = float(t) * float(f[j]);
            cos[size_t(t) * half + j] = std::cos(angle);
            sin[size_t(t) * half + j] = std::sin(angle);
        }
}

}  // namespace ete
