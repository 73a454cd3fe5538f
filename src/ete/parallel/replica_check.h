// ete/parallel/replica_check.h — detecting data-parallel replicas whose parameters diverged (a
// missed gradient sync, a nondeterministic kernel, a corrupted rank) from a 64-bit checksum of
// each replica's bytes, compared over the dp group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ete/parallel/communicator.h"

namespace ete {

// A 64-bit hash of the n*4 bytes at p; not cryptographic, not compatible with any published hash.
// The bytes are read as 8-byte little-endian words (two floats), dealt round-robin to four
// independent lanes; a word w enters its lane as acc = rotl(acc + w*kA, 31) * kB with odd
// multipliers, the lanes are combined with distinct rotations, an odd trailing float and the byte
// length are mixed in, and a splitmix64 finalizer spreads every bit. Each step is a bijection of
// the running state, so buffers of equal length that differ in one 8-byte word (e.g. one ulp of
// one element) ALWAYS hash differently; other differences collide with probability ~2^-64.
// Deterministic on every run and machine of the same byte order; -0.0 and +0.0 and distinct NaN
// payloads differ (it compares bits, as bit-identical replicas require).
uint64_t buffer_checksum(const float* p, size_t n);

// Collective over dp: all-gathers every rank's checksum of params (n f32) and throws ete::Error on
// every rank if they are not all equal. The reference checksum is the one most ranks hold (ties:
// the one of the lowest rank among them); the diverged ranks are those whose checksum differs
// from it. E.g. "replica check (step 40): parameters of dp rank 1 (world rank 2) differ from dp
// rank 0 in group dp[0,2]: checksums 0x... vs 0x... (1 of 2 ranks agree with dp rank 0)".
// `what` names the occasion (e.g. "step 40"). A different n on some rank counts as divergence.
void check_replicas_identical(Communicator& dp, const float* params, size_t n,
                              const std::string& what);

}  // namespace ete
