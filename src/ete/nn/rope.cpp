// ete/nn/rope.cpp
#include "ete/nn/rope.h"

#include <algorithm>
#include <cmath>

#include "ete/core/error.h"

namespace ete {

namespace {

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, a smooth blend between.
void llama3_scale(std::vector<double>& f, const RopeScaling& sc) {
    const double orig = sc.original_max_position_embeddings;
    const double low_wl = orig / sc.low_freq_factor, high_wl = orig / sc.high_freq_factor;
    for (double& x : f) {
        const double wl = 2.0 * M_PI / x;
        if (wl > low_wl) {
            x = x / sc.factor;
        } else if (wl >= high_wl) {
            const double s =
                (orig / wl - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
            x = (1.0 - s) * x / sc.factor + s * x;
        }
    }
}

// YaRN: frequency j is interpolated (/ factor) below the correction range, kept above it, and
// blended linearly across it; the range is where the dimension pair turns beta_fast .. beta_slow
// times over the original context.
double yarn_scale(std::vector<double>& f, int R, double theta, const RopeScaling& sc) {
    auto correction_dim = [&](double rotations) {
        return R * std::log(sc.original_max_position_embeddings / (rotations * 2 * M_PI)) /
               (2 * std::log(theta));
    };
    double lo = correction_dim(sc.beta_fast), hi = correction_dim(sc.beta_slow);
    if (sc.truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, double(R - 1));
    if (lo == hi) hi += 0.001;  // HF's guard against a zero-width ramp
    for (size_t j = 0; j < f.size(); ++j) {
        const double ramp = std::clamp((double(j) - lo) / (hi - lo), 0.0, 1.0);
        const double extrapolate = 1.0 - ramp;  // the share of the unscaled frequency
        f[j] = f[j] / sc.factor * (1.0 - extrapolate) + f[j] * extrapolate;
    }
    if (sc.attention_factor > 0) return sc.attention_factor;
    auto mscale = [&](double m) {
        return sc.factor <= 1 ? 1.0 : 0.1 * m * std::log(sc.factor) + 1;
    };
    if (sc.mscale != 0 && sc.mscale_all_dim != 0)
        return mscale(sc.mscale) / mscale(sc.mscale_all_dim);
    return mscale(1.0);
}

// LongRoPE (Phi-3): each frequency divided by its own factor, the long ones past the original
// context.
double longrope_scale(std::vector<double>& f, const RopeScaling& sc, int seq_len) {
    const bool long_ctx = seq_len > sc.original_max_position_embeddings;
    const std::vector<double>& ext = long_ctx ? sc.long_factor : sc.short_factor;
    ETE_CHECK(ext.size() == f.size(),
              "rope_scaling longrope: {} has {} entries, expected {} (rotary dims / 2)",
              long_ctx ? "long_factor" : "short_factor", ext.size(), f.size());
    for (size_t j = 0; j < f.size(); ++j) f[j] /= ext[j];
    if (sc.attention_factor > 0) return sc.attention_factor;
    if (sc.factor <= 1) return 1.0;
    return std::sqrt(1 + std::log(sc.factor) / std::log(sc.original_max_position_embeddings));
}

}  // namespace

RopeFrequencies rope_frequencies(int R, double theta, const RopeScaling& sc, int seq_len) {
    ETE_CHECK(R > 0 && R % 2 == 0, "rope: rotary_dim {} must be even and positive", R);
    RopeFrequencies out;
    std::vector<double>& f = out.inv_freq;
    f.resize(size_t(R / 2));
    for (int j = 0; j < R / 2; ++j) f[size_t(j)] = std::pow(theta, -2.0 * j / R);
    if (sc.type == "default") return out;
    if (sc.type == "linear") {  // positions divided by the factor
        for (double& x : f) x /= sc.factor;
    } else if (sc.type == "llama3") {
        llama3_scale(f, sc);
    } else if (sc.type == "yarn") {
        out.attention_factor = yarn_scale(f, R, theta, sc);
    } else {
        ETE_CHECK(sc.type == "longrope",
                  "rope_scaling type '{}': expected linear, llama3, yarn or longrope (or none)",
                  sc.type);
        out.attention_factor = longrope_scale(f, sc, seq_len);
    }
    return out;
}

std::vector<double> rope_inv_freq(int R, double theta, const RopeScaling& sc, int seq_len) {
    return rope_frequencies(R, theta, sc, seq_len).inv_freq;
}

void rope_tables(float* cos, float* sin, int T, int R, double theta, const RopeScaling& sc) {
    const RopeFrequencies rf = rope_frequencies(R, theta, sc, T);
    const float a = float(rf.attention_factor);
    const int half = R / 2;
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < half; ++j) {
            // HF computes the angle in f32 (t * inv_freq as float); match that rounding.
            const float angle = float(t) * float(rf.inv_freq[size_t(j)]);
            cos[size_t(t) * half + j] = std::cos(angle) * a;  // a = 1: exact, unscaled
            sin[size_t(t) * half + j] = std::sin(angle) * a;
        }
}

}  // namespace ete
