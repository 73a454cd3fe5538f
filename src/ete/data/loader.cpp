// ete/data/loader.cpp — window layout, per-epoch shuffles and batch filling.
#include "ete/data/loader.h"

#include <cmath>
#include <numeric>
#include <random>

#include "ete/core/error.h"
#include "ete/core/rng.h"

namespace ete {
namespace {

// Uniform integer in [0, n) from raw mt19937_64 words by rejection (std::uniform_int_distribution
// is implementation-defined, which would make the order depend on the standard library).
uint64_t bounded(std::mt19937_64& gen, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // largest multiple of n, exclusive
    uint64_t x;
    do {
        x = gen();
    } while (x >= limit);
    return x % n;
}

uint64_t epoch_seed(uint64_t seed, uint64_t epoch) {
    // Philox of (seed, epoch) gives well-mixed, distinct seeds for nearby (seed, epoch) values.
    auto w = philox4x32(
        {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        {static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32), 0x5EED0DA7u, 0});
    return (static_cast<uint64_t>(w[0]) << 32) | w[1];
}

}  // namespace

std::vector<uint64_t> shuffle_epoch_order(uint64_t n, uint64_t seed, uint64_t epoch) {
    ETE_ASSERT(n >= 1);
    std::vector<uint64_t> order(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
    std::mt19937_64 gen(epoch_seed(seed, epoch));
    for (uint64_t i = n - 1; i > 0; --i) std::swap(order[i], order[bounded(gen, i + 1)]);
    return order;
}

BatchSampler::BatchSampler(const TokenShard& shard, int seq_len, double val_fraction, uint64_t seed,
                           bool shuffle)
    : shard_(&shard), seq_len_(seq_len), seed_(seed) {
    ETE_CHECK(seq_len > 0, "batch sampler: seq_len is {}, expected > 0", seq_len);
    ETE_CHECK(val_fraction >= 0.0 && val_fraction < 1.0,
              "batch sampler: validation fraction is {}, expected in [0, 1)", val_fraction);
    const uint64_t n = shard.size(), t = static_cast<uint64_t>(seq_len);
    if (val_fraction == 0.0) {
        num_train_ = n >= 1 ? (n - 1) / t : 0;
        ETE_CHECK(num_train_ >= 1,
                  "batch sampler: shard '{}' has {} tokens, expected at least seq_len + 1 = {}",
                  shard.path(), n, t + 1);
    } else {
        const uint64_t w = n >= 2 ? (n - 2) / t : 0;
        num_val_ = std::max<uint64_t>(
            1, static_cast<uint64_t>(std::ceil(val_fraction * static_cast<double>(w))));
        ETE_CHECK(w > num_val_,
                  "batch sampler: shard '{}' has {} tokens: {} windows of {} + 1 with {} for "
                  "validation leaves no training window (expected at least {} tokens)",
                  shard.path(), n, w, t, num_val_, (num_val_ + 1) * t + 2);
        num_train_ = w - num_val_;
    }
    schedule_ = EpochSchedule(num_train_, seed_, shuffle);
}

uint64_t BatchSampler::train_window_start(uint64_t w) const {
    ETE_ASSERT(w < num_train_);
    return w * static_cast<uint64_t>(seq_len_);
}

uint64_t BatchSampler::val_window_start(uint64_t v) const {
    ETE_ASSERT(v < num_val_);
    return (num_train_ + v) * static_cast<uint64_t>(seq_len_) + 1;
}

std::vector<uint64_t> EpochSchedule::order(uint64_t epoch) const {
    if (shuffle_) return shuffle_epoch_order(n_, seed_, epoch);
    std::vector<uint64_t> identity(n_);
    std::iota(identity.begin(), identity.end(), uint64_t{0});
    return identity;
}

uint64_t EpochSchedule::at(uint64_t global_index) {
    const uint64_t epoch = global_index / n_;
    if (epoch != cached_epoch_) {
        cached_ = order(epoch);
        cached_epoch_ = epoch;
    }
    return cached_[global_index % n_];
}

std::vector<uint64_t> BatchSampler::epoch_order(uint64_t epoch) const {
    return schedule_.order(epoch);
}

uint64_t BatchSampler::sample(uint64_t global_index) {
    return schedule_.at(global_index);
}

void BatchSampler::fill_window(uint64_t start, int32_t* inputs, int32_t* targets) const {
    // Two reads of the mapped window: cheaper than a staging buffer and keeps this const.
    const auto t = static_cast<uint64_t>(seq_len_);
    shard_->read(start, t, inputs);
    shard_->read(start + 1, t, targets);
}

void BatchSampler::fill_batch(uint64_t first_global_index, int count, int32_t* inputs,
                              int32_t* targets, int32_t* /*doc_start*/) {
    ETE_CHECK(count >= 0, "batch sampler: batch count {} is negative", count);
    const size_t t = static_cast<size_t>(seq_len_);
    for (int i = 0; i < count; ++i) {
        uint64_t w = sample(first_global_index + static_cast<uint64_t>(i));
        fill_window(train_window_start(w), inputs + i * t, targets + i * t);
    }
}

void BatchSampler::fill_val_batch(uint64_t first, int count, int32_t* inputs, int32_t* targets,
                                  int32_t* /*doc_start*/) const {
    ETE_CHECK(num_val_ > 0, "batch sampler: no validation windows (validation fraction is 0)");
    ETE_CHECK(count >= 0, "batch sampler: batch count {} is negative", count);
    const size_t t = static_cast<size_t>(seq_len_);
    for (int i = 0; i < count; ++i) {
        uint64_t v = (first + static_cast<uint64_t>(i)) % num_val_;
        fill_window(val_window_start(v), inputs + i * t, targets + i * t);
    }
}

}  // namespace ete
