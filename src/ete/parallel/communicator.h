// ete/parallel/communicator.h — the one interface every transport implements (MPI on CPU, NCCL on
// GPU, an in-process fake for unit tests, a trivial single-rank one).
//
// A Communicator is a group of ranks. Buffers are host pointers for MPI/fake/self and device
// pointers for NCCL. Counts are elements of `dtype` (F32, F64, BF16, I32, I64, U8 at least).
// Collectives must be called by every rank of the group in the same order (the MPI rule).
//
// Errors: every call is checked. A failing call, or one that does not finish within timeout()
// seconds (0 = wait forever), throws ete::Error naming the operation, the group name and its
// ranks (their world ranks), e.g. "[comm] all_reduce on group dp[0,2] (world ranks 0,2) timed
// out after 30 s". Groups are explicit values: there is no global communicator.
//
// BF16 sums accumulate each pairwise step in f32 and round to bf16 (gradient communication in
// bf16 halves the traffic; the caller converts to and from f32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ete/core/dtype.h"

namespace ete {

enum class ReduceOp : uint8_t { Sum, Max, Min };

// The largest user tag on every transport: the MPI standard guarantees MPI_TAG_UB >= 32767, so a
// tag that works on the fake works on any MPI.
inline constexpr int kMaxTag = 32767;

// A started non-blocking operation. wait() blocks until it is done (throws on failure or
// timeout, naming the operation); test() returns whether it is done without blocking. Destroying
// a request that was neither waited for nor completed waits for it (buffers must outlive it) —
// except while an exception unwinds past it: then it is abandoned (a pending receive is cancelled)
// and, under MPI, the job counts as failed (see mpi_comm.h).
class CommRequest {
  public:
    virtual ~CommRequest() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;
};
using Request = std::unique_ptr<CommRequest>;

class Communicator {
  public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;  // in this group, 0..size()-1
    virtual int size() const = 0;
    // "world", "dp[0,2]", ...: used in every error message, with world_ranks().
    virtual const std::string& name() const = 0;
    virtual const std::vector<int>& world_ranks() const = 0;  // group rank i -> world rank
    virtual std::string transport() const = 0;                // "mpi", "nccl", "fake", "self"

    // Seconds a blocking call or wait() may take before it throws; 0 = forever.
    virtual void set_timeout(double seconds) = 0;
    virtual double timeout() const = 0;

    // In place: buf (count) = op over ranks of buf.
    // The blocking forms default to the non-blocking call followed by wait().
    virtual void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
        iall_reduce(buf, count, dtype, op)->wait();
    }
    virtual Request iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
    // send (size()·recv_count) reduced; rank r receives block r (recv_count) of the result.
    virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                ReduceOp op) {
        ireduce_scatter(send, recv, recv_count, dtype, op)->wait();
    }
    virtual Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                                    ReduceOp op) = 0;
    // In place at root: root's buf (count) = op over ranks of buf; every other rank's buf is
    // unspecified afterwards (this default all-reduces, which leaves the result everywhere).
    virtual void reduce(void* buf, size_t count, DType dtype, ReduceOp op, int root) {
        ireduce(buf, count, dtype, op, root)->wait();
    }
    virtual Request ireduce(void* buf, size_t count, DType dtype, ReduceOp op, int root) {
        (void)root;
        return iall_reduce(buf, count, dtype, op);
    }
    // recv (size()·send_count) = concatenation of every rank's send, in rank order. In place when
    // send == recv + rank()·send_count elements (each rank's block already where it belongs).
    virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
        iall_gather(send, recv, send_count, dtype)->wait();
    }
    virtual Request iall_gather(const void* send, void* recv, size_t send_count, DType dtype) = 0;
    // buf (count) = root's buf on every rank.
    virtual void broadcast(void* buf, size_t count, DType dtype, int root) {
        ibroadcast(buf, count, dtype, root)->wait();
    }
    virtual Request ibroadcast(void* buf, size_t count, DType dtype, int root) = 0;

    // Point to point within the group; peer is a group rank. A send matches the recv with the same
    // (source, tag); messages between one pair with one tag arrive in order. Tags are 0..kMaxTag.
    virtual void send(const void* buf, size_t count, DType dtype, int peer, int tag) {
        isend(buf, count, dtype, peer, tag)->wait();
    }
    virtual void recv(void* buf, size_t count, DType dtype, int peer, int tag) {
        irecv(buf, count, dtype, peer, tag)->wait();
    }
    virtual Request isend(const void* buf, size_t count, DType dtype, int peer, int tag) = 0;
    virtual Request irecv(void* buf, size_t count, DType dtype, int peer, int tag) = 0;

    virtual void barrier() = 0;

    // Collective over this group: ranks with the same color form a new group, ordered by key
    // (ties by current rank). color < 0 returns nullptr for that rank. `name` names the new group.
    virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

// Waits for every request in order and clears the list. The first error propagates after the
// remaining requests are destroyed (so the list is empty either way).
void wait_all(std::vector<Request>& requests);

}  // namespace ete
