// ete/backend/cpu/gemm_host.h — the CPU GEMM on host views (already translated, shapes and dtypes
// already checked by the calling op): what CpuBackend::gemm runs, and what the NF4 product runs
// on its dequantized tiles (which live in host workspace, not in backend memory).
#pragma once

#include "ete/core/view.h"

namespace ete::cpu {

void gemm_host(CMat a, bool trans_a, CMat b, bool trans_b, Mat c, float alpha, float beta);

}  // namespace ete::cpu
