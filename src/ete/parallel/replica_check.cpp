// ete/parallel/replica_check.cpp — buffer checksum and the dp replica-divergence check
// (replica_check.h).
#include "ete/parallel/replica_check.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <map>
#include <vector>

#include "ete/core/error.h"

namespace ete {
namespace {

// Odd multipliers (the golden ratio and splitmix64's constants): multiplication by an odd number
// is a bijection mod 2^64.
constexpr uint64_t kA = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kB = 0xBF58476D1CE4E5B9ULL;
constexpr uint64_t kC = 0x94D049BB133111EBULL;
constexpr size_t kMaxListed = 8;  // diverged ranks named in a message; the rest are counted

// For fixed w a bijection of acc, and for fixed acc a bijection of w.
inline uint64_t mix_word(uint64_t acc, uint64_t w) {
    return std::rotl(acc + w * kA, 31) * kB;
}

inline uint64_t finalize(uint64_t x) {
    x ^= x >> 30;
    x *= kB;
    x ^= x >> 27;
    x *= kC;
    x ^= x >> 31;
    return x;
}

inline uint64_t load_word(const float* p) {
    uint64_t w;
    std::memcpy(&w, p, sizeof w);
    return w;
}

// The reference rank: the lowest rank holding the most common checksum.
int reference_rank(const std::vector<uint64_t>& sums, int* agreeing) {
    std::map<uint64_t, int> count;
    for (uint64_t s : sums) ++count[s];
    int ref = 0;
    for (int r = 1; r < int(sums.size()); ++r) {
        if (count[sums[size_t(r)]] > count[sums[size_t(ref)]]) ref = r;
    }
    *agreeing = count[sums[size_t(ref)]];
    return ref;
}

std::string divergence_message(const Communicator& dp, const std::vector<uint64_t>& sums,
                               const std::string& what) {
    int agreeing = 0;
    const int ref = reference_rank(sums, &agreeing);
    std::vector<int> ranks, world;
    std::vector<std::string> hex;
    for (int r = 0; r < int(sums.size()); ++r) {
        if (sums[size_t(r)] == sums[size_t(ref)]) continue;
        if (ranks.size() == kMaxListed) break;
        ranks.push_back(r);
        world.push_back(dp.world_ranks()[size_t(r)]);
        hex.push_back(fmt::format("{:#018x}", sums[size_t(r)]));
    }
    const size_t diverged = sums.size() - size_t(agreeing);
    const bool many = diverged > 1;
    const std::string more =
        diverged > ranks.size() ? fmt::format(" and {} more", diverged - ranks.size()) : "";
    return fmt::format(
        "replica check{}: parameters of dp rank{} {}{} (world rank{} {}) differ from dp rank {} "
        "in group {}: checksums {} vs {:#018x} ({} of {} ranks agree with dp rank {})",
        what.empty() ? "" : " (" + what + ")", many ? "s" : "", fmt::join(ranks, ","), more,
        many ? "s" : "", fmt::join(world, ","), ref, dp.name(), fmt::join(hex, ","),
        sums[size_t(ref)], agreeing, sums.size(), ref);
}

}  // namespace

uint64_t buffer_checksum(const float* p, size_t n) {
    ETE_ASSERT(p != nullptr || n == 0);
    uint64_t lane[4] = {kA, kA * 3, kA * 5, kA * 7};
    const size_t words = n / 2;  // 8-byte words; an odd last float is the tail
    size_t w = 0;
    for (; w + 4 <= words; w += 4) {
        for (size_t j = 0; j < 4; ++j) lane[j] = mix_word(lane[j], load_word(p + 2 * (w + j)));
    }
    for (; w < words; ++w) lane[w % 4] = mix_word(lane[w % 4], load_word(p + 2 * w));
    uint64_t h = std::rotl(lane[0], 1) + std::rotl(lane[1], 7) + std::rotl(lane[2], 12) +
                 std::rotl(lane[3], 18);
    if (n % 2 == 1) {
        uint32_t tail;
        std::memcpy(&tail, p + n - 1, sizeof tail);
        h = mix_word(h, tail);
    }
    return finalize(h ^ (uint64_t(n) * sizeof(float)));
}

void check_replicas_identical(Communicator& dp, const float* params, size_t n,
                              const std::string& what) {
    if (dp.size() == 1) return;
    const uint64_t mine = buffer_checksum(params, n);
    std::vector<uint64_t> sums(size_t(dp.size()));
    dp.all_gather(&mine, sums.data(), 1, DType::U64);
    for (uint64_t s : sums) {
        if (s != sums[0]) throw Error(divergence_message(dp, sums, what));
    }
}

}  // namespace ete
