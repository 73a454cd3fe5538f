// ete/core/rng.h — counter-based, layout-invariant randomness (DESIGN.md §3).
//
// Philox4x32-10 maps (key, counter) to four random 32-bit words with no state. ETE keys it by
// (seed, a stream id) and counts by a global element index, so element i of a tensor gets the same
// random number whether it lives on one process or on a shard of eight. Stream ids are derived
// from names (a tensor's HF name, "dropout/layer3", ...) with a stable 64-bit hash.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ete {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 2> key, std::array<uint32_t, 4> ctr);

uint64_t stable_hash(std::string_view s);  // FNV-1a 64-bit

class CounterRng {
  public:
    CounterRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
    CounterRng(uint64_t seed, std::string_view stream) : CounterRng(seed, stable_hash(stream)) {}

    uint32_t u32(uint64_t index) const;  // uniform 32-bit word for element `index`
    // The four words of counter q's block. word(e) is word e & 3 of block e >> 2: four
    // consecutive elements share one Philox block (dropout masks, where each needs one word).
    std::array<uint32_t, 4> block(uint64_t q) const;
    uint32_t word(uint64_t e) const { return block(e >> 2)[e & 3]; }
    // out[k] = word(first + k) for 0 <= k < n, Philox run on 16 blocks at a time (the loops
    // vectorise: ~10x the per-block call).
    void words(uint64_t first, int64_t n, uint32_t* out) const;
    float uniform(uint64_t index) const;  // in [0, 1)
    float normal(uint64_t index) const;   // standard normal (Box-Muller on two words)

    // out[k] = scale * normal(first + k) for 0 <= k < n, the float product of normal()'s float
    // result, bit for bit (so parameter init is layout-invariant whichever way it is filled).
    // Vectorised and OpenMP-parallel over fixed blocks for large n (rng_normal.cpp).
    void normal_fill(float* out, uint64_t first, int64_t n, float scale) const;

  private:
    uint64_t seed_, stream_;
};

}  // namespace ete
