// ete/model/shard.h — moving parameters between their logical (global) layout and one tensor-
// parallel rank's shard, from the ParamSpec's ShardRule alone.
//
// The split dimension d (rows 0 or cols 1) of extent E is G equal groups of g = E / G (GPT-2
// c_attn rows are q | k | v: G = 3), cut into P parts: P = tp, or P = max_parts when the rule
// caps it below tp (GQA kv heads at tp > KV), and then R = tp / P consecutive ranks hold the same
// part: rank r holds part r / R. Each group is padded to gp = g rounded up to a multiple of P
// when the rule allows padding (vocab, MLP width), else gp = g must divide; part p is rows
// [p·gp/P, (p+1)·gp/P) of every group, in group order. With ShardRule::lead the first group is
// lead·g wide (g = E / (G - 1 + lead)) and always cut into tp parts. Elements of a shard past g are
// padding: zero weights whose gradients are masked, dropped on export. Buffers here are in ETE
// layout (linears (out, in)), row-major; `global` is the logical tensor of ParamSpec::global_shape.
//
// Every global element has exactly one owner among the tp ranks (shard_owner): it is the one
// that writes it when the logical model is gathered and counts it in the gradient norm.
#pragma once

#include <cstdint>
#include <vector>

#include "ete/model/param_spec.h"

namespace ete {

// The number of distinct parts P a split cuts its dim into at this tp size (tp, or max_parts
// below it); 1 for a replicated parameter.
int shard_parts(const ShardRule& rule, int tp_size);
// Whether tp_rank owns the elements it holds: every rank of a plain split, the first of the
// R = tp / P ranks holding a replicated part, rank 0 of a replicated parameter.
bool shard_owner(const ShardRule& rule, int tp_rank, int tp_size);
// The local extent of a split dimension of global extent `extent` (G groups, padded or not).
int64_t shard_extent(const ShardRule& rule, int64_t extent, int tp_size);
// This rank's shape of a parameter with global shape `global`.
Shape shard_shape(const ShardRule& rule, const Shape& global, int tp_size);

// One contiguous run of a shard: local elements [local, local + len) are the global elements
// [global, global + len), or padding when global < 0.
struct ShardRun {
    int64_t local = 0, global = 0, len = 0;
};
// The shard of `s` on tp_rank as runs covering every local element once, in local order.
std::vector<ShardRun> shard_runs(const ParamSpec& s, int tp_rank, int tp_size);
// Whether any rank's shard of `s` holds padding at this tp size.
bool shard_has_padding(const ParamSpec& s, int tp_size);

// local (s.shape) = this rank's slice of global (s.global_shape); padding elements become 0.
void shard_from_global(const ParamSpec& s, int tp_rank, int tp_size, const float* global,
                       float* local);
// Writes this rank's slice of local into global (padding dropped); other elements untouched.
// Replicated parameters are copied whole. The exact inverse of shard_from_global. Ranks holding
// the same part write the same elements: gathering sums call it on the owner only.
void shard_to_global(const ParamSpec& s, int tp_rank, int tp_size, const float* local,
                     float* global);
// Sets the padding elements of a local buffer (weights or gradients) to 0.
void shard_zero_padding(const ParamSpec& s, int tp_rank, int tp_size, float* local);

}  // namespace ete
