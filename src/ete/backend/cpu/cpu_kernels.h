// ete/backend/cpu/cpu_kernels.h — optimized CPU kernels (OpenMP + SIMD + BLAS).
//
// Same semantics as the Backend methods of the same name (backend.h); each is tested against
// ete::ref in tests/backend. One file per concern: blas.cpp, norm.cpp, attention.cpp,
// elementwise.cpp, loss.cpp, optim.cpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "ete/backend/backend.h"

namespace ete::cpu {

void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

void bias_forward(float* y, const float* b, int N, int C, int ldy);
void bias_backward(float* d_b, const float* d_y, int N, int C, int ldy);
void embedding_forward(float* out, const int32_t* ids, const float* table, int N, int C);
void embedding_backward(float* d_table, const float* d_out, const int32_t* ids, int N, int C);
void pos_embedding_forward(float* out, const float* wpe, const int32_t* doc_start, int B, int T,
                           int C);
void pos_embedding_backward(float* d_wpe, const float* d_out, const int32_t* doc_start, int B,
                            int T, int C);

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                     float eps);
void rmsnorm_backward(float* d_x, float* d_w, const float* d_out, const float* x, const float* w,
                      const float* rstd, int N, int C);
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                       const float* b, int N, int C, float eps);
void layernorm_backward(float* d_x, float* d_w, float* d_b, const float* d_out, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C);

void rope_forward(float* qkv, const float* cos, const float* sin, AttnDims d);
void rope_backward(float* d_qkv, const float* cos, const float* sin, AttnDims d);
void attention_forward(float* out, float* lse, const float* qkv, AttnDims d, float scale);
void attention_backward(float* d_qkv, const float* d_out, const float* out, const float* lse,
                        const float* qkv, AttnDims d, float scale);

void swiglu_forward(float* out, const float* gu, int N, int F);
void swiglu_backward(float* d_gu, const float* d_out, const float* gu, int N, int F);
void gelu_forward(float* out, const float* x, int64_t n);
void gelu_backward(float* d_x, const float* d_out, const float* x, int64_t n);
void add_inplace(float* x, const float* y, int64_t n);

void cross_entropy_forward_backward(float* logits, float* losses, const int32_t* targets, int N,
                                    int V, float d_scale);
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int N,
                           int V);

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                float beta2, float eps, float wd, float bc1, float bc2);
double sum_squares(const float* x, int64_t n);
void scale(float* x, float s, int64_t n);

// OpenBLAS core type (DESIGN.md §8): Debian's OpenBLAS 0.3.21 does not know recent CPUs and falls
// back to a generic kernel. Called first thing in main(): when OPENBLAS_CORETYPE is unset and the
// library picked a generic core on a CPU that has AVX-512 (or AVX2+FMA), sets the variable and
// re-executes the process once so the library loads with the right kernels. A user's own value
// always wins; CPUs without the instructions are left alone.
void openblas_fix_coretype(char** argv);
// The decision itself: the core to force, or null to leave OpenBLAS's choice alone (it already
// picked a specific core, or the CPU lacks the instructions).
const char* openblas_core_override(std::string_view current_core, bool has_avx512,
                                   bool has_avx2_fma);
// "SkylakeX", "Prescott", ... as OpenBLAS reports it.
const char* openblas_core_name();

}  // namespace ete::cpu
