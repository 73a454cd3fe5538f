// ete/parallel/no_nccl/nccl_stub.cpp — linked when ETE_CUDA=OFF or NCCL was not found.
#include "ete/core/error.h"
#include "ete/parallel/nccl_comm.h"

namespace ete {

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
    throw Error("[comm] built without CUDA/NCCL");
}

}  // namespace ete
