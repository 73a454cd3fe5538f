// ete/backend/cpu/cpu_backend.cpp — construction of the CPU backends and what they report.
#include "ete/backend/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <fstream>

#include "ete/backend/cpu/dnnl_gemm.h"
#include "ete/backend/cpu/openblas_util.h"

namespace ete {

namespace cpu {

std::string cpu_summary() {
    std::string model = "unknown CPU";
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) != 0) continue;
        model = line.substr(line.find(':') + 2);
        break;
    }
    __builtin_cpu_init();
    std::string features;
    auto add = [&](bool has, const char* name) {
        if (!has) return;
        if (!features.empty()) features += ' ';
        features += name;
    };
    add(__builtin_cpu_supports("avx2"), "avx2");
    add(__builtin_cpu_supports("fma"), "fma");
    add(__builtin_cpu_supports("f16c"), "f16c");
    add(__builtin_cpu_supports("avx512f"), "avx512f");
    add(__builtin_cpu_supports("avx512bw"), "avx512bw");
    add(__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
    add(__builtin_cpu_supports("avx512fp16"), "avx512_fp16");
    add(__builtin_cpu_supports("amx-bf16"), "amx_bf16");
    add(__builtin_cpu_supports("amx-int8"), "amx_int8");
    return fmt::format("{} ({})", model, features.empty() ? "no AVX2" : features);
}

std::string engines_summary(bool check_int8) {
    return fmt::format(
        "CPU {} | f32 GEMM: OpenBLAS core {} ({}) | bf16/fp16 GEMM: {} | int8 GEMM: {}",
        cpu_summary(), openblas_core_name(), openblas_core_why(), dnnl_info(),
        dnnl_s8_info(check_int8));
}

uint64_t CpuBackend::gemm_workspace_bytes(DType compute, uint64_t largest, int threads) const {
    const uint64_t base = Backend::gemm_workspace_bytes(compute, largest, threads);
    return compute == DType::F32 ? base : base + dnnl_gemm_staging_bytes(compute, largest);
}

std::string CpuBackend::describe() const {
    return fmt::format("{} backend | {}", name(), engines_summary(false));
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() {
    return std::make_unique<cpu::CpuBackend>();
}

std::unique_ptr<Backend> make_guarded_backend() {
    return std::make_unique<cpu::CpuBackend>(cpu::CpuBackend::Memory::Guarded);
}

std::unique_ptr<Backend> make_planning_backend() {
    return std::make_unique<cpu::CpuBackend>(cpu::CpuBackend::Memory::Planning);
}

}  // namespace ete
