// ete/backend/cpu/kernel_use.h — whether a process ran a kernel that the environment chooses.
//
// OPENBLAS_CORETYPE picks the f32 GEMM's kernels, ONEDNN_MAX_CPU_ISA oneDNN's 16-bit and int8
// ones, ETE_GEMM16 the 16-bit engine: run.sh's kernel profiles set them to rerun the numeric tests
// as other CPUs compute them (docs/numerics.md). Every other kernel of the engine computes the same
// under any profile, so a test that never reaches one of these GEMMs (nor asks which engine runs
// them) would rerun the same arithmetic. The GEMM entry points call note_profiled_kernel(); with
// ETE_KERNEL_USE_LOG set to a directory, the first call of a process creates an empty file there
// named ETE_TEST_NAME (the test that started it, set by the tests' main and inherited by the
// processes a test runs; '/' written %2F, '%' %25): the list of tests a profile can change.
#pragma once

namespace ete::cpu {

void note_profiled_kernel() noexcept;
// The next note_profiled_kernel() writes again (the tests' main calls this as each test starts).
void reset_profiled_kernel_note() noexcept;

}  // namespace ete::cpu
