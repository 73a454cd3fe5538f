// ete/model/transformer.cpp — construction and the decoder layers' forward and backward
// (tensor-parallel when tp_size > 1). The builder that assembles the layers from the family's
// spec lives in transformer_build.cpp, activation planning in transformer_memory.cpp, the
// adapters' activations and dropout numbering in transformer_lora.cpp, the sublayer pieces in
// transformer_sublayers.cpp, the embedding and head in transformer_head.cpp, the stage and
// whole-model calls in transformer_stage.cpp, train.recompute's parser in recompute_plan.cpp.
#include "ete/model/transformer.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "ete/model/shard.h"
#include "ete/nn/tp_regions.h"
#include "ete/parallel/device_comm.h"

namespace ete {

namespace {

constexpr ShardRule kPaddedRows{0, 1, true};  // the MLP width and vocabulary split (param_spec)

}  // namespace

Transformer::Transformer(const ModelConfig& config, Backend& backend, const ModelParallel& mp,
                         DType compute, const LoraSpec& lora, const QatSpec& qat, bool gradients)
    : cfg_(config),
      be_(backend),
      mp_((config.validate(), mp.resolved(config))),
      lora_(lora),
      act_(compute),
      params_(param_specs(config, mp_, lora, qat), backend, mp_.tp_rank, mp_.tp_size, compute,
              gradients,
              mp_.zero3 && mp_.zero3->size() > 1   ? ParamStore::Deferred::All
              : mp_.zero2 && mp_.zero2->size() > 1 ? ParamStore::Deferred::Grads
                                                   : ParamStore::Deferred::None) {
    ETE_CHECK(mp_.tp_size == 1 || mp_.tp,
              "tensor parallelism over parallel.tp = {} ranks needs the tp communicator",
              mp_.tp_size);
    const int P = mp_.tp_size;
    tp_host_ = P > 1 ? mp_.tp : nullptr;
    if (tp_host_) tp_ = device_communicator(*tp_host_, be_);
    H_ = cfg_.num_heads / P;
    KV_ = std::max(cfg_.num_kv_heads / P, 1);
    if (P > cfg_.num_kv_heads) {
        // Ranks [k·R, (k+1)·R) hold kv head k (R = P / KV); split is collective over tp.
        const int R = P / cfg_.num_kv_heads, head = mp_.tp_rank / R;
        const std::vector<int>& wr = tp_host_->world_ranks();
        std::vector<int> members(wr.begin() + head * R, wr.begin() + (head + 1) * R);
        kv_group_ = device_communicator(
            tp_host_->split(head, mp_.tp_rank, fmt::format("tp_kv[{}]", fmt::join(members, ","))),
            be_);
        ETE_ASSERT(kv_group_ && kv_group_->size() == R && kv_group_->rank() == mp_.tp_rank % R);
    }
    F_ = int(shard_extent(kPaddedRows, cfg_.intermediate_size, P));
    V_ = int(shard_extent(kPaddedRows, cfg_.vocab_size, P));
    vocab_begin_ = mp_.tp_rank * V_;
    vocab_valid_ = std::clamp(cfg_.vocab_size - vocab_begin_, 0, V_);
    if (mp_.zero3 && mp_.zero3->size() > 1)
        shard_zero3();
    else if (mp_.zero2 && mp_.zero2->size() > 1)
        shard_zero2();
    build_layers();
    build_grad_groups();
}

Transformer::~Transformer() = default;

namespace {

// The integer weight of lin when its input has a static scale, so that the op before it can
// write its integers (rmsnorm_quantize, swiglu_quantize); null otherwise.
const Int8Weight* static_int8_input(const Linear& lin) {
    const Int8Weight* w = lin.int8_weight();
    return w && !w->input().per_token() && !lin.has_adapter() ? w : nullptr;
}

}  // namespace

// What the linears after a norm read: the norm of x in `out` (through the norm's output hook),
// or for integer linears with a static input scale and no adapter their integers straight from
// the norm (one pass, rmsnorm_quantize) in the int8 scratch.
CMat Transformer::norm_input(const Norm& norm, const FusedLinear& next, Mat out, Vec mean, Vec rstd,
                             CMat x, Vec hook_state) {
    const int N = int(x.rows);
    const Int8Weight* w8 = static_int8_input(next.part(0));
    bool adapted = false;
    for (int k = 0; k < next.size(); ++k) adapted = adapted || next.part(k).has_adapter();
    if (w8 && !norm.layernorm() && !adapted) {
        const Mat q = int8_scratch_->xq(N, x.cols);
        norm.forward_quantized(be_, q, x, w8->input_scale(), w8->input_zero(), w8->input().grid);
        return q;
    }
    norm.forward(be_, rows(out, N), rows(mean, N), rows(rstd, N), x, hook_state);
    return rows(out, N);
}

// x (N, C) -> out (N, C). out empty (a recompute in backward): everything the backward reads
// is saved, but the layer output itself is neither computed nor written.
void Transformer::layer_forward(int i, const LayerActs& s, CMat x, Mat out, AttnDims d,
                                const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    const Family& f = cfg_.family();
    Mat ln1 = rows(s.ln1, N), qkv = rows(s.qkv, N), att = rows(s.att, N);
    Mat mid = rows(s.resid_mid, N), ln2 = rows(s.ln2, N), fc = rows(s.fc, N);
    Mat act = rows(s.act, N);
    const int l = mp_.layer_begin + i;
    LoraActs la[kLoraSites];
    d.window = cfg_.window_of(l);
    d.softcap = cfg_.attn_softcap;
    L.qkv.forward(be_, qkv,
                  norm_input(L.ln1, L.qkv, ln1, s.ln1_mean, s.ln1_rstd, x, s.qat_mask[kQatLn1]),
                  lora_acts(i, s, kSiteQkv, L.qkv.size(), N, la));
    if (L.qk.enabled()) L.qk.forward(be_, qkv, s.qk_norm, att);  // att: scratch until attention
    if (f.rope) {
        const auto [cos, sin] = rope_of(l, d.T);
        be_.rope_forward(qkv, cos, sin, d);
    }
    be_.attention_forward(att, s.lse.slice(0, int64_t(d.B) * d.H * d.T), qkv, d, cfg_.attn_scale());
    if (L.o.input_hook()) {  // o_proj reads hook(att) in att_q; attention's backward reads att
        Mat att_q = rows(s.att_q, N);
        be_.copy(att_q, att);
        L.o.forward_input_hook(att_q, s.qat_mask[kQatAtt]);
    }
    const LoraActs* oa = lora_acts(i, s, kSiteO, 1, N, la + kSiteO);
    if (f.sandwich_norms) {
        post_norm_forward(L.o, L.post_attn, mid, x, o_input(s, N), oa, rows(s.attn_o, N),
                          rows(s.attn_rstd, N), kept[kQatAttnOut]);
    } else {
        row_parallel_forward(L.o, mid, x, o_input(s, N), oa, kept[kQatAttnOut]);
    }
    hook_forward(L.resid_mid_hook, mid, kept[kQatResidMid]);
    L.fc.forward(be_, fc,
                 norm_input(L.ln2, L.fc, ln2, s.ln2_mean, s.ln2_rstd, mid, s.qat_mask[kQatLn2]),
                 lora_acts(i, s, kSiteFc, L.fc.size(), N, la + kSiteFc));
    // The integer model's down projection with a static input scale reads its integers straight
    // from SwiGLU (one pass: swiglu_quantize), not from the fp32 activation.
    const Int8Weight* down8 =
        f.mlp == MlpKind::SwiGLU && !out.empty() ? static_int8_input(L.proj) : nullptr;
    CMat proj_in = act;
    if (down8) {
        const Mat q = int8_scratch_->xq(N, act.cols);
        be_.swiglu_quantize(q, fc, down8->input_scale(), down8->input_zero(), down8->input().grid);
        proj_in = q;
    } else {
        mlp_act_forward(act, fc);
    }
    L.proj.forward_input_hook(act, s.qat_mask[kQatAct]);  // in place: the MLP's backward reads fc
    const LoraActs* pa = lora_acts(i, s, kSiteProj, 1, N, la + kSiteProj);
    if (f.sandwich_norms) {  // a recompute needs the output's post-norm statistics too
        post_norm_forward(L.proj, L.post_ffn, out, mid, proj_in, pa, rows(s.ffn_o, N),
                          rows(s.ffn_rstd, N), kept[kQatFfnOut]);
        if (!out.empty()) hook_forward(L.resid_out_hook, out, kept[kQatResidOut]);
    } else if (!out.empty()) {
        row_parallel_forward(L.proj, out, mid, proj_in, pa, kept[kQatFfnOut]);
        hook_forward(L.resid_out_hook, out, kept[kQatResidOut]);
    } else {  // a recompute: the kept masks of ffn_out and residual are still those of the forward
        L.proj.forward_saved(be_, act, pa);  // its adapter's u, which backward reads
    }
}

// d_resid enters as dL/d(layer output) and leaves as dL/d(resid_mid).
void Transformer::mlp_backward(int i, const LayerActs& s, Mat d_resid, AttnDims d,
                               const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    Mat d_act = rows(d_act_, N), d_fc = rows(d_fc_, N), d_ln = rows(d_ln_, N);
    CMat fc = rows(s.fc, N), act = rows(s.act, N);
    // The down projection's output gradient (through Gemma's post norm), as A.
    const Mat d_o =
        cfg_.family().sandwich_norms
            ? post_norm_backward(L.post_ffn, d_resid, rows(s.ffn_o, N), rows(s.ffn_rstd, N))
            : d_resid;
    CMat dy = row_parallel_grad(L.proj, d_o, kept[kQatFfnOut]);
    LoraActs la[kLoraSites];
    L.proj.backward(be_, d_act, dy, act, lora_acts(i, s, kSiteProj, 1, N, la + kSiteProj));
    L.proj.backward_input_hook(d_act, s.qat_mask[kQatAct]);
    mlp_act_backward(d_fc, d_act, fc);
    const LoraActs* fa = lora_acts(i, s, kSiteFc, L.fc.size(), N, la + kSiteFc);
    L.fc.backward_weight(be_, d_fc, rows(s.ln2, N), fa);
    L.fc.backward_input(be_, d_ln, d_fc, fa);  // summed over tp: ln2 fed every rank
    L.ln2.backward(be_, d_resid, d_ln, rows(s.resid_mid, N), rows(s.ln2_mean, N),
                   rows(s.ln2_rstd, N), s.qat_mask[kQatLn2]);
}

// d_resid enters as dL/d(resid_mid) and leaves as dL/d(layer input x).
void Transformer::attention_backward(int i, const LayerActs& s, CMat x, Mat d_resid, AttnDims d,
                                     const std::array<Vec, kQatSites>& kept) {
    const DecoderLayer& L = layers_[size_t(i)];
    const int N = d.B * d.T;
    const int l = mp_.layer_begin + i;
    Mat d_att = rows(d_att_, N), d_qkv = rows(d_qkv_, N), d_ln = rows(d_ln_, N);
    d.window = cfg_.window_of(l);
    d.softcap = cfg_.attn_softcap;
    const Mat d_o =
        cfg_.family().sandwich_norms
            ? post_norm_backward(L.post_attn, d_resid, rows(s.attn_o, N), rows(s.attn_rstd, N))
            : d_resid;
    CMat dy = row_parallel_grad(L.o, d_o, kept[kQatAttnOut]);
    LoraActs la[kLoraSites];
    L.o.backward(be_, d_att, dy, o_input(s, N), lora_acts(i, s, kSiteO, 1, N, la + kSiteO));
    L.o.backward_input_hook(d_att, s.qat_mask[kQatAtt]);
    be_.attention_backward(d_qkv, d_att, rows(s.att, N), s.lse.slice(0, int64_t(d.B) * d.H * d.T),
                           rows(s.qkv, N), d, cfg_.attn_scale());
    if (cfg_.family().rope) {
        const auto [cos, sin] = rope_of(l, d.T);
        be_.rope_backward(d_qkv, cos, sin, d);
    }
    if (L.qk.enabled()) head_norm_backward(i, s, d_qkv);
    const LoraActs* qa = lora_acts(i, s, kSiteQkv, L.qkv.size(), N, la);
    kv_grads_set_aside(i);
    L.qkv.backward_weight(be_, d_qkv, rows(s.ln1, N), qa);
    Request kv_sum = kv_grads_start_sum(i);      // overlaps the d(ln1) all-reduce and the norm
    L.qkv.backward_input(be_, d_ln, d_qkv, qa);  // summed over tp: ln1 fed every rank's heads
    L.ln1.backward(be_, d_resid, d_ln, x, rows(s.ln1_mean, N), rows(s.ln1_rstd, N),
                   s.qat_mask[kQatLn1]);
    kv_grads_finish(i, kv_sum);
}

void Transformer::layer_backward(int i, Slot& s, Mat d_resid, AttnDims d) {
    const LayerActs& a = acts(s, i);
    CMat x = rows(s.resid[size_t(i)], d.B * d.T);
    const std::array<Vec, kQatSites>& kept = s.qat_kept[size_t(i)];
    if (recompute_[size_t(mp_.layer_begin + i)]) {
        qat_train_ = true;  // a training forward again: observes (no change) and keeps masks
        layer_forward(i, a, x, Mat{}, d, kept);
    }
    const DecoderLayer& L = layers_[size_t(i)];
    hook_backward(L.resid_out_hook, d_resid, kept[kQatResidOut]);  // d(output) -> d(pre-hook)
    mlp_backward(i, a, d_resid, d, kept);
    hook_backward(L.resid_mid_hook, d_resid, kept[kQatResidMid]);
    attention_backward(i, a, x, d_resid, d, kept);
}

void Transformer::final_norm_forward(Slot& s, int N) {
    final_norm_.forward(be_, rows(s.lnf, N), rows(s.lnf_mean, N), rows(s.lnf_rstd, N),
                        rows(s.resid.back(), N), s.lnf_mask);
}

// d_resid (N, C) = dL/d(stage output) from d_lnf.
void Transformer::final_norm_backward(Slot& s, Mat d_resid, int N) {
    be_.fill(d_resid, 0.0f);
    final_norm_.backward(be_, d_resid, rows(s.d_lnf, N), rows(s.resid.back(), N),
                         rows(s.lnf_mean, N), rows(s.lnf_rstd, N), s.lnf_mask);
}

}  // namespace ete
