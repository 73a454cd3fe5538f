// ete/backend/cuda/cublaslt_api.h — cuBLASLt, loaded when the first CUDA backend is made rather
// than linked: its library registers thousands of kernels as it loads (≈ 80 ms and hundreds of
// MB mapped in every process that links it, measured), which every CPU-only run and test of a
// CUDA build would pay. The functions keep their own names' types (decltype of the header's
// declarations); lt() loads them once, or throws naming the library it looked for.
#pragma once

#include <cublasLt.h>

namespace ete::cuda {

struct LtApi {
#define ETE_LT_FN(name) decltype(&::name) name = nullptr;
    ETE_LT_FN(cublasLtCreate)
    ETE_LT_FN(cublasLtDestroy)
    ETE_LT_FN(cublasLtGetVersion)
    ETE_LT_FN(cublasLtMatmul)
    ETE_LT_FN(cublasLtMatmulDescCreate)
    ETE_LT_FN(cublasLtMatmulDescDestroy)
    ETE_LT_FN(cublasLtMatmulDescSetAttribute)
    ETE_LT_FN(cublasLtMatrixLayoutCreate)
    ETE_LT_FN(cublasLtMatrixLayoutDestroy)
    ETE_LT_FN(cublasLtMatmulPreferenceCreate)
    ETE_LT_FN(cublasLtMatmulPreferenceDestroy)
    ETE_LT_FN(cublasLtMatmulPreferenceSetAttribute)
    ETE_LT_FN(cublasLtMatmulAlgoGetHeuristic)
#undef ETE_LT_FN
};

// The loaded API (thread-safe, once per process).
const LtApi& lt();

}  // namespace ete::cuda
