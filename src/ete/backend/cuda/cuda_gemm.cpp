// ete/backend/cuda/cuda_gemm.cpp — GEMMs through cuBLASLt with fp32 accumulation.
//
// ETE's matrices are row major; cuBLASLt's are column major. A row-major (r, c) matrix with
// leading dimension ld is the column-major (c, r) matrix with the same ld, i.e. its transpose, so
// c = op(a) · op(b) (row major) is computed as cᵀ = op(b)ᵀ · op(a)ᵀ (column major): cuBLASLt's
// first operand is b, its second a, each with the transpose flag ETE was given, and its (m, n) is
// ETE's (N, M). fp32 operands multiply in full fp32 (CUBLAS_COMPUTE_32F: no TF32 unless a later
// option asks for it); bf16/fp16 operands with fp32 accumulation, c in fp32 or the operands' type.
#include <cstdint>
#include <memory>

#include "ete/backend/cuda/cublaslt_api.h"
#include "ete/backend/cuda/cuda_backend.h"
#include "ete/core/error.h"

namespace ete::cuda {

namespace {

cudaDataType_t cuda_type(DType t, const char* op) {
    switch (t) {
        case DType::F32:
            return CUDA_R_32F;
        case DType::BF16:
            return CUDA_R_16BF;
        case DType::F16:
            return CUDA_R_16F;
        default:
            throw_error(
                fmt::format("[cuda] {}: dtype {}, expected F32, BF16 or F16", op, dtype_name(t)));
    }
}

// cuBLASLt descriptors of one call, destroyed with it.
struct LtCall {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtCall() {
        if (pref) lt().cublasLtMatmulPreferenceDestroy(pref);
        if (c) lt().cublasLtMatrixLayoutDestroy(c);
        if (b) lt().cublasLtMatrixLayoutDestroy(b);
        if (a) lt().cublasLtMatrixLayoutDestroy(a);
        if (desc) lt().cublasLtMatmulDescDestroy(desc);
    }
};

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told less, and a view into the middle of a buffer (a column
// slice, a row of a batch) may be aligned to its element only.
uint32_t alignment(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && a % al != 0) al /= 2;
    return al;
}

void set_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* p) {
    const uint32_t al = alignment(p);
    ETE_CU(lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al)));
}

// The column-major layout of a row-major view: (cols, rows), leading dimension ld.
void layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, ete::CMat m) {
    ETE_CU(lt().cublasLtMatrixLayoutCreate(l, t, uint64_t(m.cols), uint64_t(m.rows), m.ld));
}

}  // namespace

void CudaBackend::gemm(ete::CMat a, bool trans_a, ete::CMat b, bool trans_b, ete::Mat c,
                       float alpha, float beta) {
    const char* op = "gemm";
    const int64_t M = trans_a ? a.cols : a.rows, K = trans_a ? a.rows : a.cols;
    const int64_t N = trans_b ? b.rows : b.cols, Kb = trans_b ? b.cols : b.rows;
    ETE_CHECK(K == Kb && c.rows == M && c.cols == N,
              "[cuda] gemm: op(a) ({}, {}) · op(b) ({}, {}) into c ({}, {})", M, K, Kb, N, c.rows,
              c.cols);
    ETE_CHECK(a.dtype == b.dtype, "[cuda] gemm: a is {}, b is {}: expected one dtype",
              dtype_name(a.dtype), dtype_name(b.dtype));
    ETE_CHECK(c.dtype == DType::F32 || c.dtype == a.dtype,
              "[cuda] gemm: c is {} for {} operands: expected F32 or {}", dtype_name(c.dtype),
              dtype_name(a.dtype), dtype_name(a.dtype));
    if (M == 0 || N == 0) return;
    if (K == 0) {  // an empty sum: c = beta · c
        if (beta == 0.0f) {
            fill(c, 0.0f);
        } else if (beta != 1.0f) {
            ETE_CHECK(c.contiguous(), "[cuda] gemm: K = 0 with beta {} needs a contiguous c", beta);
            scale(c.flat(), beta);
        }
        return;
    }
    const cudaDataType_t in_t = cuda_type(a.dtype, op), out_t = cuda_type(c.dtype, op);
    LtCall call;
    ETE_CU(lt().cublasLtMatmulDescCreate(&call.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    ETE_CU(lt().cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                               sizeof(op_first)));
    ETE_CU(lt().cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                               sizeof(op_second)));
    layout(&call.a, in_t, b);
    layout(&call.b, in_t, a);
    layout(&call.c, out_t, ete::CMat(c));
    ETE_CU(lt().cublasLtMatmulPreferenceCreate(&call.pref));
    ETE_CU(lt().cublasLtMatmulPreferenceSetAttribute(
        call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt_workspace_bytes_,
        sizeof(lt_workspace_bytes_)));
    set_alignment(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, b.data);
    set_alignment(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, a.data);
    set_alignment(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c.data);
    set_alignment(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c.data);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    ETE_CU(lt().cublasLtMatmulAlgoGetHeuristic(lt_, call.desc, call.a, call.b, call.c, call.c,
                                               call.pref, 1, &heur, &found));
    ETE_CHECK(found > 0, "[cuda] gemm: cuBLASLt has no algorithm for {} ({}, {}, {})",
              dtype_name(a.dtype), M, N, K);
    ETE_CU(lt().cublasLtMatmul(lt_, call.desc, &alpha, b.data, call.a, a.data, call.b, &beta,
                               c.data, call.c, c.data, call.c, &heur.algo, lt_workspace_,
                               lt_workspace_bytes_, stream_));
}

}  // namespace ete::cuda
