// ete/backend/cpu/openblas_util.h — what the process needs to know about the OpenBLAS it loaded.
#pragma once

#include <string>
#include <string_view>

namespace ete::cpu {

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

// The CPU as the engine sees it: model name and the vector extensions that pick kernels, e.g.
// "AMD EPYC (avx2 fma f16c avx512f avx512bw avx512_bf16)".
std::string cpu_summary();
// The CPU, the f32 and the 16-bit GEMM engines, for `ete --version` and the start of a run.
std::string engines_summary();

}  // namespace ete::cpu
