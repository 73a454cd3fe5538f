// ete/nn/linear.cpp
#include "ete/nn/linear.h"

#include "ete/nn/tp_regions.h"

namespace ete {

void Linear::forward(Backend& be, Mat y, CMat x, bool accumulate, Mat scratch) const {
    if (mode_ == TpMode::Row && tp_) {
        // Partial products first, summed over tp, then (once) the replicated bias.
        Mat part = accumulate ? scratch : y;
        ETE_ASSERT(part.rows == y.rows && part.cols == y.cols);
        be.gemm(x, false, p_.w, true, part);
        reduce_from_region_forward(tp_, part);
        if (accumulate) be.add(y, part);
    } else {
        be.gemm(x, false, p_.w, true, y, 1.0f, accumulate ? 1.0f : 0.0f);
    }
    if (!p_.b.empty()) be.bias_forward(y, p_.b);
}

void Linear::backward_weight(Backend& be, CMat d_y, CMat x) const {
    if (!p_.d_w.empty()) be.gemm(d_y, true, x, false, p_.d_w, 1.0f, 1.0f);
    if (!p_.d_b.empty()) be.bias_backward(p_.d_b, d_y);
}

void Linear::backward_input(Backend& be, Mat d_x, CMat d_y) const {
    be.gemm(d_y, false, p_.w, false, d_x);
    if (mode_ == TpMode::Column) copy_to_region_backward(tp_, d_x);
}

}  // namespace ete
