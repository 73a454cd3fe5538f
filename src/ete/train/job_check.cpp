// ete/train/job_check.cpp
#include "ete/train/job_check.h"

#include <optional>
#include <set>
#include <tuple>

#include "ete/core/error.h"
#include "ete/core/json_file.h"
#include "ete/model/lora_spec.h"
#include "ete/model/model_parallel.h"
#include "ete/model/nf4_shard.h"
#include "ete/model/param_spec.h"
#include "ete/model/qat_spec.h"
#include "ete/train/dist.h"
#include "ete/train/run_setup.h"

namespace ete {

namespace {

// Whether the NF4 base is quantized as it loads, in blocks of lora.nf4_blocksize (a fresh init,
// or a full-precision dir): a pre-quantized dir's stored blocks are checked when they are read.
bool quantized_on_load(const RunConfig& cfg) {
    if (cfg.model_init_from.empty()) return true;
    return !read_json_file(cfg.model_init_from + "/config.json").contains("quantization_config");
}

void check_job_or_throw(RunConfig cfg, int world_size, bool data) {
    check_tokenizer_path(cfg);
    // The tokenizer itself is read only where it sizes the vocabulary.
    std::optional<Tokenizer> tok;
    if (cfg.model_init_from.empty() && cfg.model.vocab_size == 0) tok = load_tokenizer(cfg);
    const ModelConfig mc = resolve_model(cfg, tok);
    const MeshShape m = resolve_mesh(cfg, world_size);
    const LoraSpec lora = lora_spec(cfg);
    const QatSpec qat = qat_spec(cfg);
    check_lora_spec(lora, mc);
    if (cfg.qat_enabled) check_qat_spec(qat, mc);
    ETE_CHECK(
        zero_stage(cfg) < 3 || m.pp == 1 || !(mc.family().always_tied || mc.tie_word_embeddings),
        "parallel.zero_stage = 3 with parallel.pp = {} and tied embeddings "
        "(tie_word_embeddings): the first and last stages' copies of the embedding are "
        "summed whole, which sharded stages do not hold (not built yet; use zero_stage 1 "
        "or 2, or pp = 1)",
        m.pp);
    const std::vector<int> bounds = pipeline_layer_bounds(mc, m.pp, cfg.parallel_pp_layers);
    // The NF4 check depends only on a parameter's shapes, split and block size: every layer's
    // like-shaped weights are checked once (the first to fail is still the first in order), which
    // keeps `ete plan` of a 70B QLoRA on 1,024 devices fast.
    std::set<std::tuple<Shape, Shape, int, int, bool, int, int, int>> checked;
    for (int stage = 0; stage < m.pp; ++stage) {
        ModelParallel mp;
        mp.tp_size = m.tp;
        mp.stage = stage;
        mp.num_stages = m.pp;
        mp.layer_begin = bounds[size_t(stage)];
        mp.layer_end = bounds[size_t(stage) + 1];
        // Throws on a stage that cannot be built; NF4 blocks must not straddle any tp shard.
        const std::vector<ParamSpec> specs = param_specs(mc, mp.resolved(mc), lora, qat);
        if (m.tp == 1 || !quantized_on_load(cfg)) continue;
        for (const ParamSpec& p : specs) {
            const ShardRule& h = p.shard;
            if (p.nf4_block == 0 || !checked
                                         .insert({p.shape, p.global_shape, h.dim, h.groups, h.pad,
                                                  h.max_parts, h.lead, p.nf4_block})
                                         .second)
                continue;
            for (int r = 0; r < m.tp; ++r) check_nf4_shard(p, r, m.tp, p.nf4_block);
        }
    }
    replica_rows(cfg.micro_batch, m.dp, 0, cfg.parallel_uneven_batch);
    if (!data) return;
    check_data_file(cfg);
    if (cfg.data_format == "tokens") check_shard_fits(cfg, TokenShard(cfg.data_train), mc);
}

void check(const RunConfig& cfg, int world_size, bool data) {
    try {
        check_job_or_throw(cfg, world_size, data);
    } catch (const ConfigError&) {
        throw;
    } catch (const Error& e) {
        throw ConfigError(e.what());
    }
}

}  // namespace

void check_job(const RunConfig& cfg, int world_size) {
    check(cfg, world_size, false);
}

void check_train_job(const RunConfig& cfg, int world_size) {
    check(cfg, world_size, true);
}

}  // namespace ete
