// ete/model/transformer_head.cpp — the token embedding and the LM head with its loss, plain or
// vocab-parallel (tp > 1).
//
// Vocab-parallel: rank r holds vocabulary rows [r·V', (r+1)·V') of the (padded) table and head,
// of which the first vocab_valid_ are real tokens. The embedding looks up the ids it owns (zero
// rows elsewhere: the backend op's first_id) and reduces over tp (reduce_from_region). The head
// computes only its real columns of the logits and fuses the softmax across ranks without
// gathering them: each rank's log-sum-exp over its own columns and its target logit (the backend's
// cross_entropy_stats) are combined on the host into the global log-sum-exp with one Max and one
// Sum all-reduce of per-row statistics; the backend then writes the gradient against it. Padded
// rows never enter a logit, so they get no gradient.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ete/model/transformer.h"
#include "ete/nn/tp_regions.h"

namespace ete {

int Transformer::head_param() const {
    const bool own = !cfg_.family().always_tied && !cfg_.tie_word_embeddings;
    return params_.find(own ? ParamRole::LmHead : ParamRole::TokenEmbed);
}

namespace {

// Host copy of a small backend vector.
std::vector<float> download_floats(Backend& be, CVec v) {
    std::vector<float> h(size_t(v.n));
    be.download(h.data(), v.data, v.bytes());
    return h;
}

}  // namespace

float Transformer::embed_scale() const {
    const float s = std::sqrt(float(cfg_.hidden_size));
    switch (act_) {
        case DType::BF16:
            return bf16_to_f32(f32_to_bf16(s));
        case DType::F16:
            return f16_to_f32(f32_to_f16(s));
        default:
            return s;
    }
}

void Transformer::embed_forward(Mat out, CVec ids, AttnDims d) {
    const int table = params_.find(ParamRole::TokenEmbed);
    be_.embedding_forward(out, ids, params_.value(table), vocab_begin_);
    reduce_from_region_forward(tp_.get(), out);
    if (cfg_.family().embed_scale) be_.scale(out.flat(), embed_scale());
    // After the reduction: wpe is replicated and added once.
    if (!cfg_.family().rope)
        be_.pos_embedding_forward(out, params_.value(params_.find(ParamRole::PosEmbed)),
                                  d.doc_start, d.B, d.T);
}

void Transformer::embed_backward(Mat d_out, CVec ids, AttnDims d) {
    const int table = params_.find(ParamRole::TokenEmbed);
    if (!params_.trainable(table)) return;  // a frozen base (LoRA): GPT-2's wpe is frozen too
    if (cfg_.family().embed_scale) be_.scale(d_out.flat(), embed_scale());
    be_.embedding_backward(params_.grad(table), d_out, ids, vocab_begin_);
    if (!cfg_.family().rope) {
        be_.pos_embedding_backward(params_.grad(params_.find(ParamRole::PosEmbed)), d_out,
                                   d.doc_start, d.B, d.T);
    }
}

// Rows [r0, r0 + rows) without tp: logits, loss, and with `backward` d_lnf and the head's weight
// gradient (d_logits in the compute dtype for the two GEMMs).
void Transformer::head_chunk(Slot& s, int r0, int rows_n, float d_scale, bool backward) {
    const Linear& head = head_;
    CMat x = s.lnf.row_slice(r0, rows_n);
    Mat logits = rows(logits_, rows_n);
    CVec targets = targets_.slice(r0, rows_n);
    Vec losses = losses_.slice(r0, rows_n);
    head.forward(be_, logits, x);
    const Mat d_cap = rows(d_cap_, rows_n);
    if (cfg_.final_softcap > 0) be_.softcap_forward(logits, d_cap, cfg_.final_softcap);
    if (!backward) return be_.cross_entropy_forward(losses, logits, targets);
    Mat d_logits = rows(d_logits_, rows_n);
    if (cfg_.final_softcap > 0) {  // d of the capped logits in F32, through the cap, then A
        be_.cross_entropy_forward_backward(logits, losses, targets, d_scale, logits);
        be_.softcap_backward(logits, d_cap);
        if (d_logits.data != logits.data) be_.copy(d_logits, logits);
    } else {
        be_.cross_entropy_forward_backward(logits, losses, targets, d_scale, d_logits);
    }
    head.backward(be_, s.d_lnf.row_slice(r0, rows_n), d_logits, x);
}

// Loss of every row (losses_), and with `backward` d_lnf and the head's weight gradient.
double Transformer::head_forward(Slot& s, const int32_t* targets, int N, float d_scale,
                                 bool backward) {
    for (int i = 0; i < N; ++i) {
        // Before any communication, on every rank alike: under tp a target that no rank owns
        // would otherwise pass as a logit of 0 (the backend checks it when tp = 1).
        ETE_CHECK(targets[i] == kIgnoreIndex || (targets[i] >= 0 && targets[i] < cfg_.vocab_size),
                  "cross_entropy: target {} of row {} is outside [0, {}) and not the ignore "
                  "index {}",
                  targets[i], i, cfg_.vocab_size, kIgnoreIndex);
    }
    be_.upload(targets_.data, targets, sizeof(int32_t) * size_t(N));
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
        int rows_n = std::min(head_rows_, N - r0);
        if (tp_) {
            head_chunk_vocab_parallel(s, targets + r0, r0, rows_n, d_scale, backward);
        } else {
            head_chunk(s, r0, rows_n, d_scale, backward);
        }
    }
    double sum = 0;
    for (float l : download_floats(be_, losses_.slice(0, N))) sum += l;
    return sum;
}

// One chunk of rows, tp > 1. Local logits (rows, Vv) cover this rank's real columns only. Each
// row's target becomes a local column when this rank owns it, -1 when another rank does, the
// ignore index when ignored. The global log-sum-exp is combined from every rank's on the host:
// lse = mx + log Σ_r e^(lse_r - mx) with mx the Max over ranks; the target logit comes from its
// owner (a Sum where the others add 0).
void Transformer::head_chunk_vocab_parallel(Slot& s, const int32_t* targets, int r0, int rows_n,
                                            float d_scale, bool backward) {
    const int Vv = vocab_valid_;
    host_tgt_.resize(size_t(rows_n));
    for (int r = 0; r < rows_n; ++r) {
        const int t = targets[r];
        const bool mine = t >= vocab_begin_ && t < vocab_begin_ + Vv;
        host_tgt_[size_t(r)] = t == kIgnoreIndex ? kIgnoreIndex : mine ? t - vocab_begin_ : -1;
    }
    Vec tgt = ce_tgt_.slice(0, rows_n), lse = ce_lse_.slice(0, rows_n),
        zt = ce_zt_.slice(0, rows_n);
    be_.upload(tgt.data, host_tgt_.data(), sizeof(int32_t) * size_t(rows_n));
    const Linear& head = head_;
    CMat x = s.lnf.row_slice(r0, rows_n);
    Mat logits = rows(logits_, rows_n).col_slice(0, Vv);
    const Mat d_cap = rows(d_cap_, rows_n);
    const float kNoColumns = -std::numeric_limits<float>::infinity();
    std::vector<float> lse_loc(static_cast<size_t>(rows_n), kNoColumns);
    std::vector<float> z(static_cast<size_t>(rows_n), 0.0f);
    if (Vv > 0) {
        head.forward(be_, logits, x);
        if (cfg_.final_softcap > 0)
            be_.softcap_forward(logits, d_cap_.empty() ? Mat{} : d_cap.col_slice(0, Vv),
                                cfg_.final_softcap);
        be_.cross_entropy_stats(lse, zt, logits, tgt);
        lse_loc = download_floats(be_, lse);
        z = download_floats(be_, zt);
    }
    // Ignored rows take 0 everywhere, so their statistics stay finite and unused.
    const size_t R = size_t(rows_n);
    std::vector<float> mx(R), red(2 * R);
    for (int r = 0; r < rows_n; ++r) {
        if (targets[r] == kIgnoreIndex) lse_loc[size_t(r)] = 0.0f;
        mx[size_t(r)] = lse_loc[size_t(r)];
    }
    tp_host_->all_reduce(mx.data(), mx.size(), DType::F32, ReduceOp::Max);
    for (int r = 0; r < rows_n; ++r) {
        const bool ignored = targets[r] == kIgnoreIndex;
        red[size_t(r)] =
            ignored ? 0.0f : float(std::exp(double(lse_loc[size_t(r)]) - mx[size_t(r)]));
        red[size_t(rows_n + r)] = !ignored && host_tgt_[size_t(r)] >= 0 ? z[size_t(r)] : 0.0f;
    }
    tp_host_->all_reduce(red.data(), red.size(), DType::F32, ReduceOp::Sum);
    std::vector<float> losses(R, 0.0f), lse_global(R, 0.0f);
    for (int r = 0; r < rows_n; ++r) {
        if (targets[r] == kIgnoreIndex) continue;
        const double l = double(mx[size_t(r)]) + std::log(double(red[size_t(r)]));
        lse_global[size_t(r)] = float(l);
        losses[size_t(r)] = float(l - red[size_t(rows_n + r)]);
    }
    be_.upload(losses_.slice(r0, rows_n).data, losses.data(), sizeof(float) * size_t(rows_n));
    if (!backward) return;
    Mat d_x = s.d_lnf.row_slice(r0, rows_n);
    if (Vv > 0) {
        be_.upload(lse.data, lse_global.data(), sizeof(float) * size_t(rows_n));
        Mat d_logits = rows(d_logits_, rows_n).col_slice(0, Vv);
        if (cfg_.final_softcap > 0) {  // as head_chunk
            be_.cross_entropy_backward(logits, logits, lse, tgt, d_scale);
            be_.softcap_backward(logits, d_cap.col_slice(0, Vv));
            if (d_logits.data != logits.data) be_.copy(d_logits, logits);
        } else {
            be_.cross_entropy_backward(d_logits, logits, lse, tgt, d_scale);
        }
        head.backward(be_, d_x, d_logits, x);
    } else {
        be_.fill(d_x, 0.0f);
    }
    copy_to_region_backward(tp_.get(), d_x);  // lnf fed every rank's vocabulary columns
}

// logits (N, V) on the host from x (N, C), chunk by chunk. Under tp the local (rows, V') blocks
// are all-gathered on the host and the padding columns dropped; not a training path, so it
// allocates.
void Transformer::logits_forward(CMat x, int N, float* logits) {
    const int V = cfg_.vocab_size, P = mp_.tp_size;
    const Linear& head = head_;
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
        const int rows_n = std::min(head_rows_, N - r0);
        Mat out = rows(logits_, rows_n);
        be_.fill(out, 0.0f);
        if (vocab_valid_ > 0) {
            head.forward(be_, out.col_slice(0, vocab_valid_), x.row_slice(r0, rows_n));
            if (cfg_.final_softcap > 0)
                be_.softcap_forward(out.col_slice(0, vocab_valid_), Mat{}, cfg_.final_softcap);
        }
        std::vector<float> local(size_t(rows_n) * V_);
        be_.download(local.data(), out.data, local.size() * sizeof(float));
        if (!tp_host_) {
            std::copy(local.begin(), local.end(), logits + size_t(r0) * V);
            continue;
        }
        const size_t block = local.size();
        std::vector<float> all(block * size_t(P));
        tp_host_->all_gather(local.data(), all.data(), block, DType::F32);
        for (int r = 0; r < P; ++r) {
            const int v0 = r * V_, cols = std::clamp(V - v0, 0, V_);
            for (int n = 0; n < rows_n; ++n)
                std::copy_n(all.data() + r * block + size_t(n) * V_, cols,
                            logits + (size_t(r0) + n) * V + v0);
        }
    }
}

}  // namespace ete
