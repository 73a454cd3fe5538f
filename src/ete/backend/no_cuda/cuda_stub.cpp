// ete/backend/no_cuda/cuda_stub.cpp — linked when the build has no CUDA compute backend (built
// without CUDA, or with -DETE_CUDA=ON before backend/cuda/ exists). MLX style: no #ifdef in
// shared code; CMake picks this file or backend/cuda/.
#include "ete/backend/backend.h"
#include "ete/core/error.h"

namespace ete {

std::unique_ptr<Backend> make_cuda_backend() {
    throw_error(
        "[cuda] backend 'cuda': this build of ETE has no CUDA compute backend (the CUDA "
        "backend is not written yet; use train.backend = cpu)");
}

}  // namespace ete
