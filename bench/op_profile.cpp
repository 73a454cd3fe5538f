// bench/op_profile.cpp
#include "op_profile.h"

#include <cstring>

namespace ete::bench {

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::GemmFwd:
            return "gemm forward y = x*W^T";
        case Phase::GemmDx:
            return "gemm d_x = d_y*W";
        case Phase::GemmDw:
            return "gemm d_W += d_y^T*x";
        case Phase::AttnFwd:
            return "attention forward";
        case Phase::AttnBwd:
            return "attention backward";
        case Phase::Rope:
            return "rope";
        case Phase::Norm:
            return "norms";
        case Phase::Activation:
            return "swiglu/gelu";
        case Phase::CrossEntropy:
            return "cross-entropy";
        case Phase::Embedding:
            return "embedding";
        case Phase::Elementwise:
            return "bias/add/copy";
        case Phase::Clip:
            return "clip (norm + scale)";
        case Phase::Optimizer:
            return "adamw";
        case Phase::kCount:
            break;
    }
    return "?";
}

Phase phase_of(const char* op) {
    auto starts = [&](const char* prefix) {
        return std::strncmp(op, prefix, std::strlen(prefix)) == 0;
    };
    // The model's three GEMM roles differ by transposes: NT forward, NN d_x, TN d_W.
    if (starts("gemm_nt")) return Phase::GemmFwd;
    if (starts("gemm_nn")) return Phase::GemmDx;
    if (starts("gemm_t")) return Phase::GemmDw;
    if (starts("attention_forward")) return Phase::AttnFwd;
    if (starts("attention_backward")) return Phase::AttnBwd;
    if (starts("rope")) return Phase::Rope;
    if (starts("rmsnorm") || starts("layernorm")) return Phase::Norm;
    if (starts("swiglu") || starts("gelu")) return Phase::Activation;
    if (starts("cross_entropy")) return Phase::CrossEntropy;
    if (starts("embedding") || starts("pos_embedding")) return Phase::Embedding;
    if (starts("sum_squares") || starts("scale")) return Phase::Clip;
    if (starts("adamw")) return Phase::Optimizer;
    return Phase::Elementwise;
}

void PhaseProfiler::record(const char* op, double seconds, double flops) {
    for (PhaseStats* s : {&stats_[size_t(phase_of(op))], &by_op_[op]}) {
        s->seconds += seconds;
        s->flops += flops;
        ++s->calls;
    }
}

}  // namespace ete::bench
