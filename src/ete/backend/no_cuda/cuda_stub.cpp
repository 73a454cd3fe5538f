// ete/backend/no_cuda/cuda_stub.cpp — linked when the build has no CUDA backend (configured
// without -DETE_CUDA=ON). MLX style: no #ifdef in shared code; CMake picks this file or
// backend/cuda/.
#include "ete/backend/backend.h"
#include "ete/core/error.h"

namespace ete {

std::string cuda_unavailable_reason() {
    return "this build of ETE has no CUDA backend (configure with -DETE_CUDA=ON; docs/gpu.md)";
}

std::string cuda_summary() {
    return "CUDA: " + cuda_unavailable_reason();
}

int cuda_device_count() {
    return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int) {
    throw_error("[cuda] backend 'cuda': " + cuda_unavailable_reason());
}

std::unique_ptr<Backend> make_cuda_backend() {
    return make_cuda_backend(0);
}

}  // namespace ete
