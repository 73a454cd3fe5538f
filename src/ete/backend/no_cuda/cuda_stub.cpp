// ete/backend/no_cuda/cuda_stub.cpp — linked when ETE is built without CUDA (MLX style: no #ifdef
// in shared code; CMake picks this file or backend/cuda/).
#include "ete/backend/backend.h"
#include "ete/core/error.h"

namespace ete {

std::unique_ptr<Backend> make_cuda_backend() {
    throw_error(
        "[cuda] backend 'cuda': this build of ETE was built without CUDA "
        "(reconfigure with -DETE_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace ete
