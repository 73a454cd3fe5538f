// ete/backend/cuda/cublaslt_api.cpp — cuBLASLt loaded with dlopen (cublaslt_api.h).
#include "ete/backend/cuda/cublaslt_api.h"

#include <dlfcn.h>

#include <string>

#include "ete/core/error.h"

namespace ete::cuda {

namespace {

void* open_library() {
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    // The executable's run path first (it names the toolkit's library folder), then the
    // toolkit this build was configured with.
    for (const std::string& path : {name, std::string(ETE_CUDA_LIBDIR) + "/" + name}) {
        if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
    const char* why = ::dlerror();
    throw_error(fmt::format("[cuda] cannot load {} (cuBLASLt, from the CUDA {} toolkit): {}", name,
                            CUBLAS_VER_MAJOR, why ? why : "not found"));
}

LtApi load() {
    void* h = open_library();
    LtApi api;
    const auto sym = [h](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
        ETE_CHECK(fn != nullptr, "[cuda] cuBLASLt has no symbol {}", name);
    };
#define ETE_LT_SYM(name) sym(api.name, #name);
    ETE_LT_SYM(cublasLtCreate)
    ETE_LT_SYM(cublasLtDestroy)
    ETE_LT_SYM(cublasLtGetVersion)
    ETE_LT_SYM(cublasLtMatmul)
    ETE_LT_SYM(cublasLtMatmulDescCreate)
    ETE_LT_SYM(cublasLtMatmulDescDestroy)
    ETE_LT_SYM(cublasLtMatmulDescSetAttribute)
    ETE_LT_SYM(cublasLtMatrixLayoutCreate)
    ETE_LT_SYM(cublasLtMatrixLayoutDestroy)
    ETE_LT_SYM(cublasLtMatmulPreferenceCreate)
    ETE_LT_SYM(cublasLtMatmulPreferenceDestroy)
    ETE_LT_SYM(cublasLtMatmulPreferenceSetAttribute)
    ETE_LT_SYM(cublasLtMatmulAlgoGetHeuristic)
#undef ETE_LT_SYM
    return api;
}

}  // namespace

const LtApi& lt() {
    static const LtApi api = load();  // the library stays loaded for the process
    return api;
}

}  // namespace ete::cuda
