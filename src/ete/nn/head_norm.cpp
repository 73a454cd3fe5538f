// ete/nn/head_norm.cpp
#include "ete/nn/head_norm.h"

#include "ete/core/error.h"

namespace ete {

HeadNorm::HeadNorm(NormParams q, NormParams k, float eps, int H, int KV, int D, float w_offset,
                   Vec w_scratch)
    : q_(q), k_(k), eps_(eps), H_(H), KV_(KV), D_(D), w_offset_(w_offset), w_scratch_(w_scratch) {
    ETE_ASSERT(H > 0 && KV > 0 && D > 0 && q.w.n == D && k.w.n == D);
}

namespace {

// The first r·c elements of a contiguous buffer as an (r, c) matrix.
Mat leading(Mat buf, int64_t r, int64_t c) {
    ETE_ASSERT(buf.contiguous() && r * c <= buf.numel());
    return Mat(buf.data, buf.dtype, r, c);
}

}  // namespace

Mat HeadNorm::block(Mat qkv, bool k) const {
    const int64_t q_cols = int64_t(H_) * D_;
    return k ? qkv.col_slice(q_cols, int64_t(KV_) * D_) : qkv.col_slice(0, q_cols);
}

void HeadNorm::forward(Backend& be, Mat qkv, const HeadNormActs& a, Mat out) const {
    const int64_t N = qkv.rows;
    for (bool k : {false, true}) {
        const int heads = k ? KV_ : H_;
        const NormParams& p = k ? k_ : q_;
        Mat in = (k ? a.k_in : a.q_in).row_slice(0, N * heads);
        Mat dst = block(qkv, k);
        // Gather the heads (rows of dst) into (N·heads, D) F32, normalise them into out (same
        // shape, qkv's dtype), and write them back.
        be.copy(in.reshaped(N, int64_t(heads) * D_), dst);
        be.rmsnorm_forward(leading(out, N * heads, D_),
                           (k ? a.k_rstd : a.q_rstd).slice(0, N * heads), in,
                           norm_weight(be, p.w, w_offset_, w_scratch_), eps_);
        be.copy(dst, leading(out, N, int64_t(heads) * D_));
    }
}

void HeadNorm::backward(Backend& be, Mat d_qkv, const HeadNormActs& a, Mat d_norm, Mat d_in,
                        Vec d_w_part) const {
    const int64_t N = d_qkv.rows;
    if (!d_w_part.empty()) be.fill(as_mat(d_w_part), 0.0f);
    for (bool k : {false, true}) {
        const int heads = k ? KV_ : H_;
        const int64_t cols = int64_t(heads) * D_;
        const NormParams& p = k ? k_ : q_;
        Mat src = block(d_qkv, k);
        Mat dn = leading(d_norm, N, cols), di = leading(d_in, N, cols);
        be.copy(dn, src);
        be.fill(di, 0.0f);  // the norm's backward adds into d_x
        Vec d_w = p.d_w;
        if (!d_w.empty() && !d_w_part.empty()) d_w = d_w_part.slice(k ? D_ : 0, D_);
        const CMat in = (k ? a.k_in : a.q_in).row_slice(0, N * heads);
        be.rmsnorm_backward(di.reshaped(N * heads, D_), d_w, dn.reshaped(N * heads, D_), in,
                            norm_weight(be, p.w, w_offset_, w_scratch_),
                            (k ? a.k_rstd : a.q_rstd).slice(0, N * heads));
        be.copy(src, di);
    }
}

}  // namespace ete
