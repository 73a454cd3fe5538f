// ete/backend/cpu/blas.cpp — GEMM through OpenBLAS, and the core-type fix of DESIGN.md §8.
#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "ete/backend/cpu/cpu_kernels.h"

namespace ete::cpu {

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
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
