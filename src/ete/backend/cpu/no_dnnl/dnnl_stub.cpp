// ete/backend/cpu/no_dnnl/dnnl_stub.cpp — linked when the build has no oneDNN (not found, or
// -DETE_DNNL=OFF). MLX style: no #ifdef in shared code; CMake picks this file or backend/cpu/dnnl/.
// The fp32 fallback (backend/cpu/dnnl_fallback.cpp) is still built, but dnnl_gemm does not use it
// silently: a build without oneDNN should say so rather than run 16-bit GEMMs slowly.
#include <algorithm>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/dnnl_gemm_internal.h"
#include "ete/core/error.h"

namespace ete::cpu {

void dnnl_gemm_onednn(bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t,
                      const void*, int64_t, DType, float, void*, int64_t, DType) {
    throw_error("[gemm] this build has no oneDNN: bf16/fp16 GEMM needs libdnnl-dev");
}

// No engine choice without oneDNN: every 16-bit GEMM says so (above).
void dnnl_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
               int64_t lda, const void* B, int64_t ldb, DType ab, float beta, void* C, int64_t ldc,
               DType c) {
    dnnl_gemm_onednn(ta, tb, M, N, K, alpha, A, lda, B, ldb, ab, beta, C, ldc, c);
}

uint64_t dnnl_gemm_staging_bytes(DType, uint64_t) {
    return 0;  // no 16-bit GEMM runs (dnnl_gemm throws)
}

std::string dnnl_gemm_impl(bool, bool, int64_t, int64_t, int64_t, float, int64_t, int64_t, DType,
                           float, int64_t, DType) {
    return "none";
}

void dnnl_gemm_s8(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, DType a_dtype,
                  const int8_t* W, int64_t ldw, int32_t* C, int64_t ldc) {
    gemm_s8_loops(M, N, K, A, lda, a_dtype, W, ldw, C, ldc);  // exact either way
}

struct PackedS8::Layouts {};

PackedS8::PackedS8(const int8_t* W, int64_t N, int64_t K, int64_t ldw)
    : w_(W), n_(N), k_(K), ldw_(ldw) {
    dnnl_gemm_s8_check_args(0, N, K, W, std::max<int64_t>(1, K), DType::U8, W, ldw, nullptr,
                            std::max<int64_t>(1, N));
}
PackedS8::~PackedS8() = default;

void dnnl_gemm_s8_packed(int64_t M, const void* A, int64_t lda, DType a_dtype, const PackedS8& W,
                         int32_t* C, int64_t ldc) {
    gemm_s8_loops(M, W.N(), W.K(), A, lda, a_dtype, W.plain(), W.ldw(), C, ldc);
}

bool dnnl_gemm_s8_scaled(int64_t, const void*, int64_t, DType, const PackedS8&, const float*,
                         int32_t, float, float*, int64_t) {
    return false;
}

std::string dnnl_gemm_s8_impl(int64_t, int64_t, int64_t, int64_t, DType, int64_t, int64_t) {
    return fmt::format("exact:{}", gemm_s8_exact_isa());
}

std::string dnnl_gemm_s8_check() {
    return "";
}

bool dnnl_gemm_s8_uses_onednn() {
    return false;
}

// Without oneDNN there is no start-up check to run or defer: ETE's exact kernel is the engine,
// whether or not the caller asked to choose now.
std::string dnnl_s8_info(bool /*choose*/) {
    return fmt::format("exact {} kernel (no oneDNN)", gemm_s8_exact_isa());
}

size_t dnnl_cache_entries() {
    return 0;
}

bool dnnl_available() {
    return false;
}

bool dnnl_native(DType) {
    return false;
}

std::string dnnl_info() {
    return "oneDNN: not built";
}

}  // namespace ete::cpu
