// ete/nn/fused_linear.h — linears that read one input and write adjacent column ranges of one
// output: q | k | v, gate | up.
//
// A trainable base keeps such a group in one flat buffer and runs it as ONE Linear (one GEMM). A
// frozen base (LoRA) keeps each member in a buffer of its own — dense or NF4 — with its own
// adapter, so the group runs member by member into column slices of the output; backward sums the
// members' input gradients and communicates once (Linear::backward_input_finish).
#pragma once

#include <vector>

#include "ete/nn/linear.h"

namespace ete {

class FusedLinear {
  public:
    FusedLinear() = default;
    // Members in output order; all share the input width and the tp mode.
    explicit FusedLinear(std::vector<Linear> parts);

    int size() const { return int(parts_.size()); }
    Linear& part(int k) { return parts_[size_t(k)]; }
    const Linear& part(int k) const { return parts_[size_t(k)]; }
    int64_t out() const { return col0_.empty() ? 0 : col0_.back(); }

    // acts: one LoraActs per member (those without an adapter are ignored), or null when no
    // member has an adapter.
    void forward(Backend& be, Mat y, CMat x, const LoraActs* acts = nullptr) const;
    void backward_weight(Backend& be, CMat d_y, CMat x, const LoraActs* acts = nullptr) const;
    // d_x (N, in) = Σ members d_y_k · W_k (+ adapters), summed over tp for Column members.
    void backward_input(Backend& be, Mat d_x, CMat d_y, const LoraActs* acts = nullptr) const;

  private:
    const LoraActs* at(const LoraActs* acts, int k) const { return acts ? acts + k : nullptr; }
    std::vector<Linear> parts_;
    std::vector<int64_t> col0_;  // size() + 1 column offsets
};

}  // namespace ete
