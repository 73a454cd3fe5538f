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
#include "ete/backend/cpu/kernel_use.h"
#include "ete/backend/cpu/openblas_util.h"
#include "ete/core/signals.h"

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
    note_profiled_kernel();
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

bool is_one_of(std::string_view core, std::initializer_list<const char*> cores) {
    for (const char* c : cores)
        if (core == std::string_view(c)) return true;
    return false;
}

// OpenBLAS 0.3.21's cores whose sgemm kernels use AVX-512 (Cooperlake adds bf16 routines ETE does
// not call; Sapphirerapids from 0.3.22 on), and those with AVX2+FMA kernels (Zen and Excavator run
// Haswell's).
bool is_avx512_core(std::string_view core) {
    return is_one_of(core, {"SkylakeX", "Cooperlake", "Sapphirerapids"});
}
bool is_avx2_core(std::string_view core) {
    return is_avx512_core(core) || is_one_of(core, {"Haswell", "Zen", "Excavator"});
}

}  // namespace

// The rule (docs/benchmarks.md, "OpenBLAS core choice", has the measurements): the widest
// kernels the CPU can run. OpenBLAS 0.3.21 predates Zen 5 and recent Intel parts and picks an
// AVX2 core on them (Zen 5: Haswell's kernels, which trained ETE fp32 at 0.55-0.60x the speed of
// SkylakeX's) or a generic SSE one (an Emerald Rapids Xeon: Prescott). On Zen 4, whose AVX-512
// units are 256 bits wide, AVX-512 and AVX2 kernels measure alike.
const char* openblas_core_override(std::string_view current_core, bool has_avx512,
                                   bool has_avx2_fma) {
    if (has_avx512 && !is_avx512_core(current_core)) return "SkylakeX";
    if (!has_avx512 && has_avx2_fma && !is_avx2_core(current_core)) return "Haswell";
    return nullptr;
}

namespace {

bool cpu_has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
bool cpu_has_avx2_fma() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace

void openblas_fix_coretype(char** argv) {
    if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("ETE_OPENBLAS_FIXED")) return;
    const char* detected = openblas_get_corename();
    const char* core = openblas_core_override(detected, cpu_has_avx512(), cpu_has_avx2_fma());
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    // Never loop, even if the library ignores the value; and say what OpenBLAS had picked.
    setenv("ETE_OPENBLAS_FIXED", detected, 1);
    const sigset_t mask = block_signals_for_exec();  // pending across exec, never lost
    execv("/proc/self/exe", argv);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    // exec failed (no /proc): keep running with OpenBLAS's choice; results are still correct.
}

std::string openblas_core_advice() {
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    if (!user || std::getenv("ETE_OPENBLAS_FIXED")) return "";
    const char* wider = openblas_core_override(user, cpu_has_avx512(), cpu_has_avx2_fma());
    if (!wider) return "";
    return fmt::format(
        "OPENBLAS_CORETYPE={} is set in the environment: {} kernels on a CPU that runs {}'s "
        "(fp32 trained 1.6-4x faster with them on the CPUs measured, docs/numerics.md); unset "
        "it to let ete choose",
        user, is_avx2_core(user) ? "AVX2" : "generic", wider);
}

std::string openblas_core_why() {
    const char* fixed = std::getenv("ETE_OPENBLAS_FIXED");
    const char* user = std::getenv("OPENBLAS_CORETYPE");
    const std::string_view core = openblas_get_corename();
    if (fixed && user && core == std::string_view(user))
        return fmt::format("set by ete: OpenBLAS picked {}, {} on a CPU with {}", fixed,
                           is_avx2_core(fixed) ? "an AVX2 kernel" : "a generic kernel",
                           cpu_has_avx512() ? "AVX-512" : "AVX2 and FMA");
    if (user)
        return fmt::format("OPENBLAS_CORETYPE={} set by the user{}", user,
                           openblas_core_advice().empty() ? "" : ", narrower than this CPU");
    return fmt::format("OpenBLAS's own choice{}", cpu_has_avx512()     ? ", an AVX-512 kernel"
                                                  : cpu_has_avx2_fma() ? ", an AVX2 kernel"
                                                                       : "");
}

}  // namespace ete::cpu
