// ete/train/generate.cpp
#include "ete/train/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ete/core/rng.h"

namespace ete {

int32_t sample_token(std::vector<float> logits, const SampleOptions& opt, uint64_t draw) {
    int V = int(logits.size());
    if (opt.temperature <= 0) {
        return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    std::vector<int32_t> idx(static_cast<size_t>(V), 0);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    int keep = opt.top_k > 0 ? std::min(opt.top_k, V) : V;
    double mx = logits[size_t(idx[0])];
    std::vector<double> p(static_cast<size_t>(keep));
    double total = 0;
    for (int i = 0; i < keep; ++i) {
        p[size_t(i)] = std::exp((logits[size_t(idx[size_t(i)])] - mx) / opt.temperature);
        total += p[size_t(i)];
    }
    if (opt.top_p < 1.0) {  // smallest prefix of the sorted distribution with mass >= top_p
        double cum = 0;
        for (int i = 0; i < keep; ++i) {
            cum += p[size_t(i)] / total;
            if (cum >= opt.top_p) {
                keep = i + 1;
                break;
            }
        }
        total = std::accumulate(p.begin(), p.begin() + keep, 0.0);
    }
    double u = CounterRng(opt.seed, "generate").uniform(draw) * total;
    for (int i = 0; i < keep; ++i) {
        u -= p[size_t(i)];
        if (u <= 0) return idx[size_t(i)];
    }
    return idx[size_t(keep - 1)];
}

std::vector<int32_t> generate(Transformer& model, std::vector<int32_t> tokens,
                              const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
    ETE_CHECK(!tokens.empty(), "generate: the prompt must contain at least one token");
    int V = model.config().vocab_size, Tmax = model.max_seq();
    std::vector<float> logits(size_t(Tmax) * V);
    for (int i = 0; i < opt.max_new_tokens; ++i) {
        int T = int(std::min<size_t>(tokens.size(), size_t(Tmax)));
        const int32_t* ctx = tokens.data() + (tokens.size() - size_t(T));
        model.forward_logits(ctx, 1, T, logits.data());
        std::vector<float> last(logits.begin() + int64_t(T - 1) * V,
                                logits.begin() + int64_t(T) * V);
        int32_t next = sample_token(std::move(last), opt, uint64_t(i));
        tokens.push_back(next);
        if (on_token) on_token(next);
        if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), next) != opt.stop_ids.end()) break;
    }
    return tokens;
}

}  // namespace ete
