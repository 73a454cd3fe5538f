// ete/nn/fused_linear.cpp
#include "ete/nn/fused_linear.h"

namespace ete {

FusedLinear::FusedLinear(std::vector<Linear> parts) : parts_(std::move(parts)) {
    col0_.push_back(0);
    for (const Linear& p : parts_) {
        ETE_ASSERT(p.in() == parts_[0].in() && p.mode() == parts_[0].mode());
        col0_.push_back(col0_.back() + p.out());
    }
}

void FusedLinear::forward(Backend& be, Mat y, CMat x, const LoraActs* acts) const {
    ETE_ASSERT(y.cols == out());
    for (int k = 0; k < size(); ++k)
        parts_[size_t(k)].forward(be, y.col_slice(col0_[size_t(k)], parts_[size_t(k)].out()), x,
                                  false, {}, at(acts, k));
}

void FusedLinear::backward_weight(Backend& be, CMat d_y, CMat x, const LoraActs* acts) const {
    for (int k = 0; k < size(); ++k)
        parts_[size_t(k)].backward_weight(
            be, d_y.col_slice(col0_[size_t(k)], parts_[size_t(k)].out()), x, at(acts, k));
}

void FusedLinear::backward_input(Backend& be, Mat d_x, CMat d_y, const LoraActs* acts) const {
    for (int k = 0; k < size(); ++k)
        parts_[size_t(k)].backward_input_base(
            be, d_x, d_y.col_slice(col0_[size_t(k)], parts_[size_t(k)].out()), k > 0);
    for (int k = 0; k < size(); ++k)
        parts_[size_t(k)].backward_input_finish(be, d_x, at(acts, k), k == 0);
}

}  // namespace ete
