// ete/core/rng.cpp
#include "ete/core/rng.h"

#include "ete/core/rng_normal.h"

namespace ete {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 2> key, std::array<uint32_t, 4> c) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = uint64_t(kM0) * c[0];
        uint64_t p1 = uint64_t(kM1) * c[2];
        c = {uint32_t(p1 >> 32) ^ c[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ key[1],
             uint32_t(p0)};
        key[0] += kW0;
        key[1] += kW1;
    }
    return c;
}

uint64_t stable_hash(std::string_view s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    return h;
}

std::array<uint32_t, 4> CounterRng::block(uint64_t index) const {
    return philox4x32(
        {uint32_t(seed_), uint32_t(seed_ >> 32)},
        {uint32_t(index), uint32_t(index >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)});
}

uint32_t CounterRng::u32(uint64_t index) const {
    return block(index)[0];
}

float CounterRng::uniform(uint64_t index) const {
    return float(u32(index) >> 8) * (1.0f / 16777216.0f);
}

float CounterRng::normal(uint64_t index) const {
    auto b = block(index);
    return rng_detail::normal_from_words(b[0], b[1]);
}

}  // namespace ete
