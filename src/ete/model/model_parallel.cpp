// ete/model/model_parallel.cpp — validation of a ModelParallel and pipeline stage boundaries.
#include "ete/model/model_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ete/core/error.h"
#include "ete/parallel/communicator.h"

namespace ete {

ModelParallel ModelParallel::resolved(const ModelConfig& c) const {
    ModelParallel m = *this;
    const int L = c.num_layers;
    ETE_CHECK(tp_size >= 1, "parallel.tp = {}: expected >= 1", tp_size);
    ETE_CHECK(tp_rank >= 0 && tp_rank < tp_size, "tensor-parallel rank {} is outside [0, {})",
              tp_rank, tp_size);
    if (tp) {
        ETE_CHECK(tp->size() == tp_size && tp->rank() == tp_rank,
                  "tensor-parallel group {} has rank {} of {}, but the model was given rank {} "
                  "of parallel.tp = {}",
                  tp->name(), tp->rank(), tp->size(), tp_rank, tp_size);
    }
    if (tp_size > 1) {
        ETE_CHECK(c.num_heads % tp_size == 0,
                  "model.num_heads = {} is not divisible by parallel.tp = {}", c.num_heads,
                  tp_size);
        // tp > KV: each rank's H / tp query heads share one kv head (H / KV per kv head is a
        // multiple of H / tp), held by the tp / KV ranks of those query heads.
        const int KV = c.num_kv_heads;
        ETE_CHECK(KV > 0 && (KV % tp_size == 0 || tp_size % KV == 0),
                  "model.num_kv_heads = {} does not fit parallel.tp = {}: expected num_kv_heads "
                  "divisible by tp (kv heads split) or tp divisible by num_kv_heads (each kv "
                  "head replicated on tp / num_kv_heads ranks)",
                  KV, tp_size);
        // One tensor q|k|v (Phi-3's qkv_proj) cannot hold a replicated k|v beside its own q.
        ETE_CHECK(!c.family().fused_tensors() || KV % tp_size == 0,
                  "{}: parallel.tp = {} exceeds model.num_kv_heads = {}: the fused qkv_proj "
                  "splits whole kv heads only (expected tp dividing num_kv_heads)",
                  c.family().name, tp_size, KV);
    }
    ETE_CHECK(num_stages >= 1 && num_stages <= L,
              "parallel.pp = {}: expected 1..model.num_layers = {} (each stage holds >= 1 layer)",
              num_stages, L);
    ETE_CHECK(stage >= 0 && stage < num_stages, "pipeline stage {} is outside [0, {})", stage,
              num_stages);
    if (m.layer_end < 0) m.layer_end = L;
    ETE_CHECK(m.layer_begin >= 0 && m.layer_begin < m.layer_end && m.layer_end <= L,
              "pipeline stage {}: layers [{}, {}) are not a non-empty range within [0, {})", stage,
              m.layer_begin, m.layer_end, L);
    ETE_CHECK(first_stage() == (m.layer_begin == 0) && last_stage() == (m.layer_end == L),
              "pipeline stage {} of {}: layers [{}, {}) must start at 0 exactly on the first "
              "stage and end at {} exactly on the last",
              stage, num_stages, m.layer_begin, m.layer_end, L);
    return m;
}

StageCosts layer_cost_model(const ModelConfig& c) {
    const double C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
    const double HD = double(c.num_heads) * c.D(), KVD = double(c.num_kv_heads) * c.D();
    const double T = c.max_position_embeddings;
    const double mlp = (c.family().gated_mlp() ? 3 : 2) * C * F;
    double matmul = C * (HD + 2 * KVD) + HD * C + mlp;
    double layer = 2 * matmul + 2 * T * HD;
    return {2 * C / layer, (2 * V * C + 5 * V + 5 * C) / layer};
}

namespace {

std::vector<int> explicit_bounds(const ModelConfig& c, int p, const std::string& spec) {
    const int L = c.num_layers;
    auto bad = [&]() {
        throw_error(fmt::format(
            "parallel.pp_layers = '{}': expected {} positive layer counts separated by commas "
            "(one per stage) that sum to model.num_layers = {}",
            spec, p, L));
    };
    std::vector<int> b{0};
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t end = std::min(spec.find(',', pos), spec.size());
        std::string item = spec.substr(pos, end - pos);
        int n = 0;
        try {
            size_t used = 0;
            n = std::stoi(item, &used);
            if (used != item.size()) bad();
        } catch (const std::logic_error&) {
            bad();
        }
        if (n < 1 || n > L) bad();
        b.push_back(b.back() + n);
        pos = end + 1;
    }
    if (int(b.size()) != p + 1 || b.back() != L) bad();
    return b;
}

// Minimises the most expensive stage, then (among splits within that maximum) the sum of squared
// stage costs, so equal layers spread as evenly as the fixed extra costs allow. O(p·L²).
std::vector<int> balanced_bounds(const ModelConfig& c, int p) {
    const int L = c.num_layers;
    const StageCosts x = layer_cost_model(c);
    auto cost = [&](int s, int a, int b) {
        return double(b - a) + (s == 0 ? x.embedding : 0.0) + (s == p - 1 ? x.head : 0.0);
    };
    const double inf = std::numeric_limits<double>::infinity();
    // best[s][j]: the smallest maximum stage cost of stages 0..s-1 covering layers [0, j).
    std::vector<std::vector<double>> best(size_t(p) + 1, std::vector<double>(size_t(L) + 1, inf));
    best[0][0] = 0;
    for (int s = 1; s <= p; ++s)
        for (int j = s; j <= L; ++j)
            for (int i = s - 1; i < j; ++i)
                best[s][j] = std::min(best[s][j], std::max(best[s - 1][i], cost(s - 1, i, j)));
    const double limit = best[p][L] * (1 + 1e-12);
    // sq[s][j]: the smallest sum of squared costs with every stage within `limit`; from[s][j] the
    // start of stage s-1 that achieves it.
    std::vector<std::vector<double>> sq(size_t(p) + 1, std::vector<double>(size_t(L) + 1, inf));
    std::vector<std::vector<int>> from(size_t(p) + 1, std::vector<int>(size_t(L) + 1, -1));
    sq[0][0] = 0;
    for (int s = 1; s <= p; ++s)
        for (int j = s; j <= L; ++j)
            for (int i = s - 1; i < j; ++i) {
                double k = cost(s - 1, i, j);
                if (k > limit || sq[s - 1][i] == inf) continue;
                if (sq[s - 1][i] + k * k < sq[s][j])
                    sq[s][j] = sq[s - 1][i] + k * k, from[s][j] = i;
            }
    std::vector<int> b(size_t(p) + 1, 0);
    b[size_t(p)] = L;
    for (int s = p; s > 0; --s) b[size_t(s) - 1] = from[size_t(s)][size_t(b[size_t(s)])];
    ETE_ASSERT(b[0] == 0);
    return b;
}

}  // namespace

std::vector<int> pipeline_layer_bounds(const ModelConfig& c, int num_stages,
                                       const std::string& spec) {
    ETE_CHECK(num_stages >= 1 && num_stages <= c.num_layers,
              "parallel.pp = {}: expected 1..model.num_layers = {} (each stage holds >= 1 layer)",
              num_stages, c.num_layers);
    return spec.empty() ? balanced_bounds(c, num_stages) : explicit_bounds(c, num_stages, spec);
}

}  // namespace ete
