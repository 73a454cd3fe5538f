// ete/backend/cpu/openblas_util.h — what the process needs to know about the OpenBLAS it loaded.
#pragma once

#include <string>
#include <string_view>

namespace ete::cpu {

// OpenBLAS core type (DESIGN.md §8): Debian's OpenBLAS 0.3.21 does not know recent CPUs and picks
// an older kernel for them (a generic SSE one on an Emerald Rapids Xeon, Haswell's AVX2 one on
// Zen 5). Called first thing in main(): when OPENBLAS_CORETYPE is unset and the library picked a
// core narrower than the CPU (openblas_core_override), sets the variable and re-executes the
// process once so the library loads with the right kernels. A user's own value always wins.
void openblas_fix_coretype(char** argv);
// The decision itself: the core to force, or null to leave OpenBLAS's choice alone. SkylakeX on a
// CPU with AVX-512 (F, BW, DQ, VL) unless OpenBLAS already picked an AVX-512 core; Haswell on one
// with AVX2 and FMA but no AVX-512 unless it picked an AVX2 core; nothing on older CPUs.
const char* openblas_core_override(std::string_view current_core, bool has_avx512,
                                   bool has_avx2_fma);
// Why this process runs the core it does, e.g. "set by ete: OpenBLAS picked Zen, an AVX2 kernel
// on a CPU with AVX-512", "OPENBLAS_CORETYPE=Haswell set by the user", "OpenBLAS's own choice".
std::string openblas_core_why();
// A one-line warning when the user's OPENBLAS_CORETYPE names a narrower core than the CPU runs
// (e.g. Haswell on an AVX-512 CPU, which a machine image may set for everyone), else empty.
std::string openblas_core_advice();
// "SkylakeX", "Prescott", ... as OpenBLAS reports it.
const char* openblas_core_name();

// The CPU as the engine sees it: model name and the vector extensions that pick kernels, e.g.
// "AMD EPYC (avx2 fma f16c avx512f avx512bw avx512_bf16)".
std::string cpu_summary();
// The CPU, the f32, 16-bit and int8 GEMM engines, for `ete --version` (check_int8: choose the
// int8 engine now) and the start of a run (false: a run that has no int8 GEMM yet does not pay
// for the int8 engine's start-up check; dnnl_s8_info).
std::string engines_summary(bool check_int8);

}  // namespace ete::cpu
