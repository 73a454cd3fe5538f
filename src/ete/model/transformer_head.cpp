// ete/model/transformer_head.cpp — the token embedding and the LM head with its loss, plain or
// vocab-parallel (tp > 1).
//
// Vocab-parallel: rank r holds vocabulary rows [r·V', (r+1)·V') of the (padded) table and head,
// of which the first vocab_valid_ are real tokens. The embedding looks up the ids it owns (zero
// rows elsewhere) and all-reduces. The head computes only its real columns of the logits and
// fuses the softmax across ranks without gathering them: the backend's cross-entropy gives each
// rank's log-sum-exp over its own columns, one Max and one Sum all-reduce combine them into the
// global one (with the target logit from its owner), and the local gradient is rescaled to the
// global softmax. Padded rows never enter a logit, so they get no gradient.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ete/model/transformer.h"
#include "ete/parallel/communicator.h"

namespace ete {

namespace {

const char* embed_name(const ModelConfig& c) {
    return c.arch == Arch::Llama ? "model.embed_tokens.weight" : "wte.weight";
}

// The LM head is its own matrix only for untied Llama; otherwise it is the embedding table (on a
// last stage other than stage 0, its tied copy, which has the same name).
const char* head_name(const ModelConfig& c) {
    return c.arch == Arch::Llama && !c.tie_word_embeddings ? "lm_head.weight" : embed_name(c);
}

}  // namespace

const float* Transformer::head_weight() const {
    return params_.param(params_.index(head_name(cfg_)));
}

float* Transformer::head_grad() {
    return params_.grad(head_name(cfg_));
}

// ids_local_ = each id as a row of this rank's shard; ids it does not own map to row 0 (a valid
// row whose contribution the caller zeroes).
void Transformer::local_ids(const int32_t* ids, int N) {
    for (int i = 0; i < N; ++i) ids_local_[i] = owns_token(ids[i]) ? ids[i] - vocab_begin_ : 0;
}

void Transformer::embed_forward(float* out, const int32_t* ids, AttnDims d) {
    const int N = d.B * d.T, C = cfg_.hidden_size;
    const float* table = params_.param(embed_name(cfg_));
    if (!tp_) {
        be_.embedding_forward(out, ids, table, N, C);
    } else {
        local_ids(ids, N);
        be_.embedding_forward(out, ids_local_, table, N, C);
        for (int i = 0; i < N; ++i)
            if (!owns_token(ids[i])) std::memset(out + size_t(i) * C, 0, sizeof(float) * C);
        tp_sum(out, size_t(N) * C);
    }
    // After the all-reduce: wpe is replicated and added once.
    if (cfg_.arch == Arch::GPT2) {
        be_.pos_embedding_forward(out, params_.param("wpe.weight"), d.doc_start, d.B, d.T, C);
    }
}

void Transformer::embed_backward(const float* d_out, const int32_t* ids, AttnDims d) {
    const int N = d.B * d.T, C = cfg_.hidden_size;
    float* d_table = params_.grad(embed_name(cfg_));
    if (!tp_) {
        be_.embedding_backward(d_table, d_out, ids, N, C);
    } else {
        // Only the rows of owned ids scatter; d_ln_ is free scratch at this point.
        local_ids(ids, N);
        for (int i = 0; i < N; ++i) {
            float* row = d_ln_ + size_t(i) * C;
            if (owns_token(ids[i])) {
                std::memcpy(row, d_out + size_t(i) * C, sizeof(float) * C);
            } else {
                std::memset(row, 0, sizeof(float) * C);
            }
        }
        be_.embedding_backward(d_table, d_ln_, ids_local_, N, C);
    }
    if (cfg_.arch == Arch::GPT2) {
        be_.pos_embedding_backward(params_.grad("wpe.weight"), d_out, d.doc_start, d.B, d.T, C);
    }
}

// Loss of every row (losses_), and with `backward` d_lnf and the head's weight gradient.
double Transformer::head_forward(Slot& s, const int32_t* targets, int N, float d_scale,
                                 bool backward) {
    const int C = cfg_.hidden_size, V = V_;
    const float* W = head_weight();
    for (int i = 0; tp_ && i < N; ++i) {
        // Before any communication, on every rank alike: under tp a target that no rank owns
        // would otherwise pass as a logit of 0 (the backend checks it when tp = 1).
        ETE_CHECK(targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < cfg_.vocab_size),
                  "cross_entropy: target {} of row {} is outside [0, {}) and not the ignore "
                  "index {}",
                  targets[i], i, cfg_.vocab_size, kIgnoreIndex);
    }
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
        int rows = std::min(head_rows_, N - r0);
        const float* x = s.lnf + size_t(r0) * C;
        float* d_x = s.d_lnf + size_t(r0) * C;
        if (tp_) {
            head_chunk_vocab_parallel(x, targets + r0, rows, d_scale, backward, losses_ + r0, d_x);
            continue;
        }
        be_.gemm(false, true, rows, V, C, 1.0f, x, C, W, C, 0.0f, logits_, V);
        if (!backward) {
            be_.cross_entropy_forward(losses_ + r0, logits_, targets + r0, rows, V);
            continue;
        }
        be_.cross_entropy_forward_backward(logits_, losses_ + r0, targets + r0, rows, V, d_scale);
        be_.gemm(false, false, rows, C, V, 1.0f, logits_, V, W, C, 0.0f, d_x, C);
        be_.gemm(true, false, V, C, rows, 1.0f, logits_, V, x, C, 1.0f, head_grad(), C);
    }
    double sum = 0;
    for (int i = 0; i < N; ++i) sum += losses_[i];
    return sum;
}

// One chunk of `rows` rows, tp > 1. Local logits (rows, Vv) cover this rank's real columns only.
// Each row is scored against a local column t_loc: its target when this rank owns it, else
// column 0 — the backend then returns lse_loc - z[t_loc], from which lse_loc (the log-sum-exp
// over this rank's columns) follows, and writes d_scale·(softmax_loc - onehot(t_loc)); the
// gradient is then rescaled by e^(lse_loc - lse) to the global softmax, and element t_loc is
// recomputed exactly from the saved logit.
void Transformer::head_chunk_vocab_parallel(const float* x, const int32_t* targets, int rows,
                                            float d_scale, bool backward, float* losses,
                                            float* d_x) {
    const int C = cfg_.hidden_size, Vv = vocab_valid_;
    const float* W = head_weight();
    float* z_loc = ce_buf_;           // (rows) logit of the local column t_loc
    float* lse_loc = ce_buf_ + rows;  // (rows) log-sum-exp over this rank's columns
    float* mx = ce_buf_ + 2 * rows;   // (rows) global max of lse_loc
    float* red = ce_buf_ + 3 * rows;  // (2·rows) Σ e^(lse_loc - mx), target logit
    for (int r = 0; r < rows; ++r) {
        int t = targets[r];
        ce_tgt_[r] = t == kIgnoreIndex ? kIgnoreIndex : owns_token(t) ? t - vocab_begin_ : 0;
    }
    if (Vv > 0) {
        be_.gemm(false, true, rows, Vv, C, 1.0f, x, C, W, C, 0.0f, logits_, Vv);
        for (int r = 0; r < rows; ++r)
            z_loc[r] = ce_tgt_[r] == kIgnoreIndex ? 0.0f : logits_[size_t(r) * Vv + ce_tgt_[r]];
        if (backward) {
            be_.cross_entropy_forward_backward(logits_, losses, ce_tgt_, rows, Vv, d_scale);
        } else {
            be_.cross_entropy_forward(losses, logits_, ce_tgt_, rows, Vv);
        }
    }
    const float kNoColumns = -std::numeric_limits<float>::infinity();
    for (int r = 0; r < rows; ++r) {
        bool ignored = targets[r] == kIgnoreIndex;
        // Ignored rows take 0 everywhere, so their statistics stay finite and unused.
        lse_loc[r] = ignored ? 0.0f : Vv > 0 ? losses[r] + z_loc[r] : kNoColumns;
        mx[r] = lse_loc[r];
    }
    tp_->all_reduce(mx, size_t(rows), DType::F32, ReduceOp::Max);
    for (int r = 0; r < rows; ++r) {
        bool ignored = targets[r] == kIgnoreIndex;
        red[r] = ignored ? 0.0f : float(std::exp(double(lse_loc[r]) - mx[r]));
        red[rows + r] = !ignored && owns_token(targets[r]) ? z_loc[r] : 0.0f;
    }
    tp_->all_reduce(red, 2 * size_t(rows), DType::F32, ReduceOp::Sum);
    for (int r = 0; r < rows; ++r) {
        if (targets[r] == kIgnoreIndex) {
            losses[r] = 0.0f;  // and the backend zeroed the gradient row
            continue;
        }
        double lse = double(mx[r]) + std::log(double(red[r]));
        losses[r] = float(lse - red[rows + r]);
        if (!backward || Vv == 0) continue;
        float* g = logits_ + size_t(r) * Vv;
        be_.scale(g, float(std::exp(double(lse_loc[r]) - lse)), Vv);
        double p = std::exp(double(z_loc[r]) - lse);
        g[ce_tgt_[r]] = float(d_scale * (p - (owns_token(targets[r]) ? 1.0 : 0.0)));
    }
    if (!backward) return;
    if (Vv > 0) {
        be_.gemm(false, false, rows, C, Vv, 1.0f, logits_, Vv, W, C, 0.0f, d_x, C);
        be_.gemm(true, false, Vv, C, rows, 1.0f, logits_, Vv, x, C, 1.0f, head_grad(), C);
    } else {
        std::memset(d_x, 0, sizeof(float) * size_t(rows) * C);
    }
    tp_sum(d_x, size_t(rows) * C);  // lnf fed every rank's vocabulary columns
}

// logits (N, V) from x (N, C). Under tp the local (N, V') blocks are all-gathered and the
// padding columns dropped; not a training path, so it allocates.
void Transformer::logits_forward(const float* x, int N, float* logits) {
    const int C = cfg_.hidden_size, V = cfg_.vocab_size;
    if (!tp_) {
        be_.gemm(false, true, N, V, C, 1.0f, x, C, head_weight(), C, 0.0f, logits, V);
        return;
    }
    const int P = mp_.tp_size;
    const size_t block = size_t(N) * V_;
    std::vector<float> local(block), all(block * size_t(P));
    be_.gemm(false, true, N, V_, C, 1.0f, x, C, head_weight(), C, 0.0f, local.data(), V_);
    tp_->all_gather(local.data(), all.data(), block, DType::F32);
    for (int r = 0; r < P; ++r) {
        const int v0 = r * V_, cols = std::clamp(V - v0, 0, V_);
        for (int n = 0; n < N; ++n) {
            std::memcpy(logits + size_t(n) * V + v0, all.data() + r * block + size_t(n) * V_,
                        sizeof(float) * size_t(cols));
        }
    }
}

}  // namespace ete
