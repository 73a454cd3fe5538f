// ete/backend/cpu/gemm.cpp — GEMM (OpenBLAS sgemm for f32, oneDNN matmul for bf16/fp16 with fp32
// accumulation), and the OpenBLAS core-type fix of DESIGN.md §8.
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ete/backend/cpu/cpu_backend.h"
#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/gemm_host.h"
#include "ete/backend/cpu/openblas_util.h"

namespace ete::cpu {

void CpuBackend::gemm(CMat a, bool ta, CMat b, bool tb, Mat c, float alpha, float beta) {
    const int64_t M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols;
    const int64_t N = tb ? b.rows : b.cols, Kb = tb ? b.cols : b.rows;
    ETE_CHECK(K == Kb && c.rows == M && c.cols == N,
              "gemm: op(a) ({}, {}) times op(b) ({}, {}) does not give c ({}, {})", M, K, Kb, N,
              c.rows, c.cols);
    ETE_CHECK(a.dtype == b.dtype, "gemm: operands have dtypes {} and {}, expected one dtype",
              dtype_name(a.dtype), dtype_name(b.dtype));
    static const char* kRole[2][2] = {{"gemm_nn", "gemm_nt"}, {"gemm_tn", "gemm_tt"}};
    Scope h(*this, kRole[ta][tb], 2.0 * double(M) * double(N) * double(K));
    gemm_host(h(a), ta, h(b), tb, h(c), alpha, beta);
}

void CpuBackend::gemm_s8(CMat a, CMat w, Mat c) {
    check_gemm_s8_args(a, w, c);
    Scope h(*this, "gemm_s8", 2.0 * double(a.rows) * double(w.rows) * double(a.cols));
    a = h(a);
    w = h(w);
    c = h(c);
    dnnl_gemm_s8(a.rows, w.rows, a.cols, a.data, a.ld, a.dtype, static_cast<const int8_t*>(w.data),
                 w.ld, static_cast<int32_t*>(c.data), c.ld);
}

void gemm_host(CMat a, bool ta, CMat b, bool tb, Mat c, float alpha, float beta) {
    const int64_t M = ta ? a.cols : a.rows, K = ta ? a.rows : a.cols;
    const int64_t N = tb ? b.rows : b.cols;
    if (M == 0 || N == 0) return;
    if (a.dtype == DType::F32) {
        ETE_CHECK(c.dtype == DType::F32, "gemm: f32 operands need an F32 result, not {}",
                  dtype_name(c.dtype));
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    int(M), int(N), int(K), alpha, static_cast<const float*>(a.data), int(a.ld),
                    static_cast<const float*>(b.data), int(b.ld), beta, static_cast<float*>(c.data),
                    int(c.ld));
        return;
    }
    // Very tall products (the LM head's weight gradient, V rows) run in row chunks: oneDNN's
    // blocking of one call over all of them ran at 0.78 of the chunked speed (GPT-2's head
    // d_W, 50257 x 768 x 256 in bf16: 66 ms in one call, 51 ms in chunks of 2048 rows).
    constexpr int64_t kRowChunk = 2048;
    for (int64_t r0 = 0; r0 < M; r0 += kRowChunk) {
        const int64_t m = M > 2 * kRowChunk ? std::min(kRowChunk, M - r0) : M;
        CMat ar = ta ? a.col_slice(r0, m) : a.row_slice(r0, m);
        Mat cr = c.row_slice(r0, m);
        dnnl_gemm(ta, tb, m, N, K, alpha, ar.data, ar.ld, b.data, b.ld, a.dtype, beta, cr.data,
                  cr.ld, c.dtype);
        if (m == M) break;
    }
}

const char* openblas_core_name() {
    return openblas_get_corename();
}

namespace {

// Cores OpenBLAS uses when it does not recognise the CPU (generic SSE-era kernels).
bool is_generic_core(std::string_view core) {
    for (const char* c : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Katmai",
                          "Coppermine", "Northwood", "Banias", "Atom", "Barcelona", "Opteron"}) {
        if (core == std::string_view(c)) return true;
    }
    return false;
}

}  // namespace

const char* openblas_core_override(std::string_view current_core, bool has_avx512,
                                   bool has_avx2_fma) {
    if (!is_generic_core(current_core)) return nullptr;
    if (has_avx512) return "SkylakeX";
    if (has_avx2_fma) return "Haswell";
    return nullptr;
}

void openblas_fix_coretype(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("ETE_OPENBLAS_FIXED")) return;
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const char* core = openblas_core_override(openblas_get_corename(), avx512, avx2);
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("ETE_OPENBLAS_FIXED", "1", 1);  // never loop, even if the library ignores the value
    execv("/proc/self/exe", argv);
    // exec failed (no /proc): keep running with the generic kernel; results are still correct.
}

}  // namespace ete::cpu
