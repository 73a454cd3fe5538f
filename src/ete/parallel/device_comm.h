// ete/parallel/device_comm.h — a Communicator over a backend's memory for transports that read
// host memory (MPI, the in-process fake, self).
//
// Buffers passed to it are backend memory (core/device_memory.h). When that memory is host
// addressable (the CPU backend) every call is forwarded as is. Otherwise each call stages: the
// bytes a rank sends are downloaded into a host buffer, the inner transport runs on host buffers,
// and what it received is uploaded when the operation completes (wait(), or a test() that finds
// it done). This is how MPI carries device buffers (NCCL takes device pointers itself) and how
// the guarded test backend's memory travels between ranks. Completion semantics, errors and
// timeouts are the inner transport's; split() wraps the inner group's split the same way.
#pragma once

#include <memory>

#include "ete/core/device_memory.h"
#include "ete/parallel/communicator.h"

namespace ete {

// `inner` and `mem` must outlive the result.
std::unique_ptr<Communicator> device_communicator(Communicator& inner, DeviceMemory& mem);
// The same, owning its inner group.
std::unique_ptr<Communicator> device_communicator(std::unique_ptr<Communicator> inner,
                                                  DeviceMemory& mem);

}  // namespace ete
