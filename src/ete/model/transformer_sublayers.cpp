// ete/model/transformer_sublayers.cpp — the pieces the decoder layers' forward and backward
// (transformer.cpp) are built from: the row-parallel outputs and their gradients, Gemma's post
// norms, the MLP activation, the RoPE tables of a layer, Qwen3/Gemma 3's per-head norms' backward
// under tp, and the kv-group (GQA, tp > KV) gradient sum.
#include "ete/model/transformer.h"

namespace ete {

const LayerActs& Transformer::acts(const Slot& s, int i) const {
    int k = act_index_[size_t(i)];
    return k < 0 ? scratch_acts_ : s.acts[size_t(k)];
}

CMat Transformer::in_compute(CMat x, Mat scratch) {
    if (x.dtype == act_) return x;
    Mat y = rows(scratch, int(x.rows));
    be_.copy(y, x);
    return y;
}

// y (N, C) = resid + in · Wᵀ + b. tp = 1: copy the residual and let the GEMM add into it.
// tp > 1: the partial products are summed over the group first (in tp_buf_), so the replicated
// bias is added once. With an output hook the whole product (summed over tp) passes through it
// first, in qat_out_.
void Transformer::row_parallel_forward(const Linear& lin, Mat y, CMat resid, CMat in,
                                       const LoraActs* acts, Vec hook_state) {
    if (lin.output_hook()) {
        Mat o = rows(qat_out_, int(y.rows));
        lin.forward(be_, o, in, false, Mat{}, acts, hook_state);
        be_.copy(y, resid);
        be_.add(y, o);
        return;
    }
    be_.copy(y, resid);
    lin.forward(be_, y, in, true, tp_ ? rows(tp_buf_, int(y.rows)) : Mat{}, acts);
}

void Transformer::post_norm_forward(const Linear& lin, const Norm& post, Mat y, CMat resid, CMat in,
                                    const LoraActs* acts, Mat o, Vec rstd, Vec hook_state) {
    lin.forward(be_, o, in, false, Mat{}, acts, hook_state);  // a Row layer sums over tp
    const Mat z = y.empty() ? rows(post_tmp_, int(o.rows)) : y;
    post.forward(be_, z, Vec{}, rstd, o);
    if (!y.empty()) be_.add(y, resid);
}

Mat Transformer::post_norm_backward(const Norm& post, Mat d_y, CMat o, CVec rstd) {
    const Mat d_o = rows(d_post_, int(o.rows));
    be_.fill(d_o, 0.0f);
    post.backward(be_, d_o, d_y, o, CVec{}, rstd);
    return d_o;
}

void Transformer::mlp_act_forward(Mat act, CMat fc) {
    switch (cfg_.family().mlp) {
        case MlpKind::SwiGLU:
            return be_.swiglu_forward(act, fc);
        case MlpKind::GeGLU:
            return be_.geglu_forward(act, fc);
        case MlpKind::Gelu:
            return be_.gelu_forward(act, fc);
    }
}

void Transformer::mlp_act_backward(Mat d_fc, CMat d_act, CMat fc) {
    switch (cfg_.family().mlp) {
        case MlpKind::SwiGLU:
            return be_.swiglu_backward(d_fc, d_act, fc);
        case MlpKind::GeGLU:
            return be_.geglu_backward(d_fc, d_act, fc);
        case MlpKind::Gelu:
            return be_.gelu_backward(d_fc, d_act, fc);
    }
}

std::pair<CMat, CMat> Transformer::rope_of(int l, int T) const {
    if (cfg_.local_rope(l)) return {rows(rope_local_cos_, T), rows(rope_local_sin_, T)};
    return {rows(rope_cos_, T), rows(rope_sin_, T)};
}

CMat Transformer::row_parallel_grad(const Linear& lin, Mat d_resid, CVec hook_state) {
    const int N = int(d_resid.rows);
    const ActHook* h = lin.output_hook();
    if (!h || !h->grad_active()) return in_compute(d_resid, d_y16_);
    Mat g = act_ == DType::F32 ? rows(qat_out_, N) : rows(d_y16_, N);
    h->backward(g, d_resid, hook_state);
    return g;
}

void Transformer::head_norm_backward(int i, const LayerActs& s, Mat d_qkv) {
    const int N = int(d_qkv.rows);
    layers_[size_t(i)].qk.backward(be_, d_qkv, s.qk_norm, rows(qk_dn_, N), rows(qk_di_, N), qk_dw_);
    if (qk_dw_.empty()) return;  // tp = 1 (accumulated in place) or frozen weights
    tp_->all_reduce(qk_dw_.data, size_t(qk_dw_.n), DType::F32, ReduceOp::Sum);
    const int l = mp_.layer_begin + i;
    const int64_t D = cfg_.D();
    be_.add(params_.grad(params_.find(ParamRole::QNorm, l)), as_mat(qk_dw_.slice(0, D)));
    be_.add(params_.grad(params_.find(ParamRole::KNorm, l)), as_mat(qk_dw_.slice(D, D)));
}

// The gradients of layer i that the ranks holding one replicated kv head compute in part: the
// k|v rows of a trainable fused q|k|v weight (and bias), or, over a frozen base, the B of the
// k_proj and v_proj adapters (their rows are the kv head's). Contiguous views.
std::vector<Mat> Transformer::kv_grad_views(int i) {
    std::vector<Mat> v;
    if (kv_trainable_) {
        const LinearParams& p = layers_[size_t(i)].qkv.part(0).params();
        const int64_t D = cfg_.D(), q = int64_t(H_) * D;
        v.push_back(p.d_w.row_slice(q, 2 * D));
        if (!p.d_b.empty()) v.push_back(as_mat(p.d_b.slice(q, 2 * D)));
        return v;
    }
    if (!kv_group_) return v;
    for (ParamRole r : {ParamRole::K, ParamRole::V}) {
        const int ib = params_.find_lora(r, mp_.layer_begin + i, true);
        if (ib >= 0) v.push_back(params_.grad(ib));
    }
    return v;
}

// Replicated kv heads. Those gradients accumulate over micro-batches, but only this
// micro-batch's contribution may be summed over the kv group: the accumulated value is set aside
// and zeroed, the backward writes the fresh partial, the group sums it, and the old value is
// added back. Every holder adds the same two values, so the copies stay bit-identical.
void Transformer::kv_grads_set_aside(int i) {
    int64_t at = 0;
    for (const Mat& g : kv_grad_views(i)) {
        be_.copy(as_mat(kv_old_.slice(at, g.numel())).reshaped(g.rows, g.cols), g);
        be_.fill(g, 0.0f);
        at += g.numel();
    }
}

// Packs the fresh partials into one message and starts its sum.
Request Transformer::kv_grads_start_sum(int i) {
    const std::vector<Mat> views = kv_grad_views(i);
    if (views.empty()) return nullptr;
    int64_t at = 0;
    for (const Mat& g : views) {
        be_.copy(as_mat(kv_sum_.slice(at, g.numel())).reshaped(g.rows, g.cols), g);
        at += g.numel();
    }
    return kv_group_->iall_reduce(kv_sum_.data, size_t(at), DType::F32, ReduceOp::Sum);
}

// gradient = set-aside value + the group's sum of this micro-batch's partials.
void Transformer::kv_grads_finish(int i, Request& sum) {
    if (!sum) return;
    sum->wait();
    int64_t at = 0;
    for (const Mat& g : kv_grad_views(i)) {
        be_.copy(g, as_mat(kv_old_.slice(at, g.numel())).reshaped(g.rows, g.cols));
        be_.add(g, as_mat(kv_sum_.slice(at, g.numel())).reshaped(g.rows, g.cols));
        at += g.numel();
    }
}

}  // namespace ete
