// ete/parallel/fake_comm.h — an in-process fake world for unit tests: n threads, each holding its
// own rank's view of one shared world. Collectives complete when every rank of the group has
// arrived; sends are eager (copied at the call); timeouts, split and errors behave like MPI's.
//
// Reductions are deterministic and identical on every rank: element i is reduced in group-rank
// order, ((x0 op x1) op x2) ... op x(n-1); BF16 sums accumulate each pairwise step in f32 and
// round to bf16 after each step.
#pragma once

#include <functional>

#include "ete/parallel/communicator.h"

namespace ete {

// Runs body(world) on n threads (world.rank() = 0..n-1, name "world", transport "fake") and joins
// them. If any rank throws, the shared world is aborted so ranks blocked in a call throw too, and
// the first exception (in time) is rethrown here after every thread has finished. A call that
// needs a rank whose body already returned throws at once, naming it. The default timeout is
// 60 s, so a deadlocked test fails with a message instead of hanging (set_timeout(0): forever).
void run_fake_world(int n, const std::function<void(Communicator& world)>& body);

}  // namespace ete
