// ete/nn/linear.cpp
#include "ete/nn/linear.h"

#include <cmath>

#include "ete/nn/int8_linear.h"
#include "ete/nn/tp_regions.h"

namespace ete {

namespace {

// The first rows x cols elements of a contiguous buffer, as a contiguous (rows, cols) view.
Mat head(Mat buf, int64_t rows, int64_t cols) {
    ETE_ASSERT(buf.contiguous() && rows * cols <= buf.numel());
    return {buf.data, buf.dtype, rows, cols};
}

}  // namespace

Linear::Linear(LinearParams p, TpMode mode, Communicator* tp)
    : p_(p), mode_(mode), tp_(mode == TpMode::None ? nullptr : tp) {
    ETE_ASSERT(p_.w.empty() != (p_.nf4 == nullptr));
    ETE_ASSERT(!nf4() || p_.d_w.empty());
}

void Linear::set_weight(CMat w) {
    ETE_CHECK(w.rows == out() && w.cols == in(), "linear: a ({}, {}) weight for a ({}, {}) linear",
              w.rows, w.cols, out(), in());
    p_.w = w;
    p_.nf4 = nullptr;  // an NF4 base's fake-quantized dense copy (QAT) replaces it
}

void Linear::set_adapter(const LoraParams& lora) {
    if (!lora.empty()) {
        // Gradients match A and B, or are absent (a model that only runs forward).
        const bool grads = (lora.d_a.empty() && lora.d_b.empty()) ||
                           (lora.d_a.rows == lora.a.rows && lora.d_a.cols == lora.a.cols &&
                            lora.d_b.rows == lora.b.rows && lora.d_b.cols == lora.b.cols);
        ETE_CHECK(
            lora.a.cols == in() && lora.b.rows == out() && lora.b.cols == lora.a.rows && grads,
            "lora: adapter A ({}, {}), B ({}, {}) does not fit a ({}, {}) linear", lora.a.rows,
            lora.a.cols, lora.b.rows, lora.b.cols, out(), in());
        ETE_CHECK(lora.rank > 0 && lora.rank <= lora.r_max(),
                  "lora: active rank {} outside [1, {}]", lora.rank, lora.r_max());
    }
    lora_ = lora;
}

void Linear::set_rank(int r) {
    ETE_CHECK(has_adapter() && r > 0 && r <= lora_.r_max(), "lora: rank {} outside [1, {}]", r,
              lora_.r_max());
    lora_.rank = r;
}

void Linear::set_adapter_scale(float scale) {
    ETE_CHECK(has_adapter() && std::isfinite(scale), "lora: scale {} for {}", scale,
              has_adapter() ? "this adapter" : "a linear without an adapter");
    lora_.scale = scale;
}

const Nf4View& Linear::nf4_weight() const {
    ETE_CHECK(!p_.nf4->empty(), "linear: its ({}, {}) NF4 weight was used before it was loaded",
              p_.nf4->rows, p_.nf4->cols);
    return *p_.nf4;
}

void Linear::set_int8(const Int8Weight* w) {
    ETE_CHECK(!w || (w->out() == out() && w->in() == in()),
              "linear: a ({}, {}) integer weight for a ({}, {}) linear", w ? w->out() : 0,
              w ? w->in() : 0, out(), in());
    i8_ = w;
}

void Linear::base_product(Backend& be, Mat y, CMat x, float beta) const {
    if (i8_) {
        i8_->product(be, y, x, beta);
    } else if (nf4()) {
        be.gemm_nf4(x, nf4_weight(), true, y, 1.0f, beta);
    } else {
        be.gemm(x, false, p_.w, true, y, 1.0f, beta);
    }
}

void Linear::forward(Backend& be, Mat y, CMat x, bool accumulate, Mat scratch, const LoraActs* acts,
                     Vec hook_state) const {
    ETE_ASSERT(!(accumulate && out_hook_));
    if (mode_ == TpMode::Row && tp_) {
        // Partial products first, summed over tp, then (once) the replicated bias.
        Mat part = accumulate ? scratch : y;
        ETE_ASSERT(part.rows == y.rows && part.cols == y.cols);
        base_product(be, part, x, 0.0f);
        reduce_from_region_forward(tp_, part);
        if (accumulate) be.add(y, part);
    } else {
        base_product(be, y, x, accumulate ? 1.0f : 0.0f);
    }
    if (!p_.b.empty()) be.bias_forward(y, p_.b);
    if (has_adapter()) {
        ETE_ASSERT(acts);
        adapter_forward(be, y, x, *acts);
    }
    hook_forward(out_hook_, y, hook_state);
}

// What the adapter reads: x, or under dropout x̃ regenerated into acts.x_drop.
CMat Linear::adapter_input(Backend& be, CMat x, const LoraActs& acts) const {
    if (!acts.drop.active()) return x;
    Mat xd = head(acts.x_drop, x.rows, x.cols);
    ETE_ASSERT(xd.dtype == x.dtype);
    be.dropout(xd, x, acts.drop);
    return xd;
}

void Linear::forward_saved(Backend& be, CMat x, const LoraActs* acts) const {
    if (!has_adapter()) return;
    ETE_ASSERT(acts);
    adapter_u(be, x, *acts);
}

void Linear::adapter_forward(Backend& be, Mat y, CMat x, const LoraActs& acts) const {
    CMat u = adapter_u(be, x, acts);
    be.gemm(u, false, lora_.b.col_slice(0, lora_.rank), true, y, lora_.scale, 1.0f);
}

// u (N, r) = x̃ · Aᵀ into acts.u (summed over tp under a Row base).
CMat Linear::adapter_u(Backend& be, CMat x_in, const LoraActs& acts) const {
    CMat x = adapter_input(be, x_in, acts);
    const int64_t N = x.rows, r = lora_.rank;
    CMat a = lora_.a.row_slice(0, r);
    Mat u = head(acts.u, N, r);
    if (mode_ == TpMode::Row && tp_) {
        // u is partial (this rank's input columns): summed over tp in F32.
        Mat part = u.dtype == DType::F32 ? u : head(acts.d_u, N, r);
        be.gemm(x, false, a, true, part);
        reduce_from_region_forward(tp_, part);
        if (part.data != u.data) be.copy(u, part);
    } else {
        be.gemm(x, false, a, true, u);
    }
    return u;
}

void Linear::backward_weight(Backend& be, CMat d_y, CMat x, const LoraActs* acts) const {
    if (!p_.d_w.empty()) be.gemm(d_y, true, x, false, p_.d_w, 1.0f, 1.0f);
    if (!p_.d_b.empty()) be.bias_backward(p_.d_b, d_y);
    if (!has_adapter()) return;
    ETE_ASSERT(acts);
    const int64_t N = x.rows, r = lora_.rank;
    const float s = lora_.scale;
    Mat d_u = head(acts->d_u, N, r);
    be.gemm(d_y, false, lora_.b.col_slice(0, r), false, d_u, s);  // (N, out)·(out, r)
    // Column base: this rank's output rows gave a partial d_u.
    if (mode_ == TpMode::Column) copy_to_region_backward(tp_, d_u);
    Mat d_uc = d_u;
    if (acts->d_uc.dtype != DType::F32) {
        d_uc = head(acts->d_uc, N, r);
        be.copy(d_uc, d_u);
    }
    be.gemm(d_y, true, head(acts->u, N, r), false, lora_.d_b.col_slice(0, r), s, 1.0f);
    be.gemm(d_uc, true, adapter_input(be, x, *acts), false, lora_.d_a.row_slice(0, r), 1.0f, 1.0f);
}

void Linear::backward_input_base(Backend& be, Mat d_x, CMat d_y, bool accumulate) const {
    ETE_CHECK(!i8_, "linear: an integer weight is for inference only (no backward)");
    const float beta = accumulate ? 1.0f : 0.0f;
    if (nf4()) {
        be.gemm_nf4(d_y, nf4_weight(), false, d_x, 1.0f, beta);
    } else {
        be.gemm(d_y, false, p_.w, false, d_x, 1.0f, beta);
    }
}

void Linear::backward_input_finish(Backend& be, Mat d_x, const LoraActs* acts, bool sum) const {
    if (sum && mode_ == TpMode::Column) copy_to_region_backward(tp_, d_x);
    if (!has_adapter()) return;
    ETE_ASSERT(acts);
    const int64_t N = d_x.rows, r = lora_.rank;
    Mat d_uc = head(acts->d_uc.dtype != DType::F32 ? acts->d_uc : acts->d_u, N, r);
    if (!acts->drop.active()) {
        be.gemm(d_uc, false, lora_.a.row_slice(0, r), false, d_x, 1.0f, 1.0f);
        return;
    }
    // The adapter read x̃: its input-gradient term passes the same mask.
    Mat t = head(acts->dx_drop, N, d_x.cols);
    be.gemm(d_uc, false, lora_.a.row_slice(0, r), false, t);
    be.dropout(d_x, t, acts->drop, true);
}

}  // namespace ete
