// ete/model/nf4_shard.h — one tensor-parallel rank's shard of an NF4 weight, exact on any layout.
//
// The weight is quantized whole (as on one process, or as a bitsandbytes file holds it) and each
// rank keeps the blocks of its shard: the same 4-bit codes and the same block absmax, so every
// layout computes with bit-identical weights. NF4 blocks therefore must not straddle a shard:
// every run of the shard (shard.h) must start at a block boundary and hold whole blocks, which
// needs rows of a whole number of blocks (and, for a column split, shard widths too); a layout
// where they cannot be aligned is an error naming the parameter. A shard's padding (MLP width,
// vocabulary) is whole blocks of zeros.
//
// A double-quantized weight's absmax values are shared in groups of 256 blocks that a shard cuts
// across, so a shard stores its blocks' absmax expanded to fp32 (4.5 bits per parameter on such a
// rank instead of 4.127): re-quantizing them per shard would change the weights by layout.
#pragma once

#include "ete/model/param_spec.h"
#include "ete/quant/nf4.h"

namespace ete {

// Where an NF4 weight's blocks come from, for the remedy an error names: quantized by ETE as it
// loads (lora.nf4_blocksize sets the block), or read as stored in a pre-quantized model dir
// (its blocks are fixed: only re-quantizing the dir changes them).
enum class Nf4Origin { Quantized, Stored };

// The shard of `global` (the whole (out, in) tensor of s.global_shape) on tp_rank; at tp_size 1
// `global` itself. Throws ete::Error naming s when its shard runs are not whole blocks, with the
// largest block size that would fit.
Nf4Tensor nf4_shard(const ParamSpec& s, int tp_rank, int tp_size, const Nf4Tensor& global,
                    Nf4Origin origin = Nf4Origin::Quantized);
// The same check for blocks of `blocksize` on tp_rank, without a tensor (the job's config
// check: a run that would refuse its shards at load is refused before any rank starts).
void check_nf4_shard(const ParamSpec& s, int tp_rank, int tp_size, int64_t blocksize,
                     Nf4Origin origin = Nf4Origin::Quantized);

}  // namespace ete
