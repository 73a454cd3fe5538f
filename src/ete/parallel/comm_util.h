// ete/parallel/comm_util.h — what the transports share (internal, not for callers of
// Communicator): error text naming op/group/ranks, argument checks, the reference element-wise
// reduction, deadlines, and the point-to-point mailbox of the in-process transports.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ete/core/error.h"
#include "ete/parallel/communicator.h"

namespace ete::comm {

// "[comm] OP on group NAME (world ranks a,b)": the prefix of every transport error.
std::string where(std::string_view op, const std::string& group, const std::vector<int>& ranks);
std::string where(std::string_view op, const Communicator& c);
// "<where> timed out after S s"
std::string timeout_message(const std::string& where, double seconds);

// Argument checks shared by every transport; each throws ete::Error prefixed with where(op, c).
void check_reducible(std::string_view op, const Communicator& c, DType dtype);
void check_peer(std::string_view op, const Communicator& c, int peer);
void check_tag(std::string_view op, const Communicator& c, int tag);
void check_root(std::string_view op, const Communicator& c, int root);
void check_timeout(const Communicator& c, double seconds);

// Whether `dtype` can be reduced: F32, F64, BF16 and the integer types (not F16 or BOOL).
bool dtype_reducible(DType dtype);
std::string_view reduce_op_name(ReduceOp op);

// acc[i] = acc[i] op in[i] for count elements of dtype (both may be unaligned). Integer sums wrap
// (two's complement); BF16 Sum adds in f32 and rounds the result to bf16 (ties to even).
void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op);

// A request that is complete when it is made (eager sends, single-rank collectives).
Request done_request();

// A point in time `seconds` from now; seconds == 0 means never.
class Deadline {
  public:
    explicit Deadline(double seconds);
    bool forever() const { return forever_; }
    bool passed() const { return !forever_ && std::chrono::steady_clock::now() >= at_; }
    std::chrono::steady_clock::time_point at() const { return at_; }

  private:
    bool forever_;
    std::chrono::steady_clock::time_point at_;
};

// The pause between two polls of a pending operation: spin for 50 µs (small messages finish
// here), then yield until 2 ms, then sleep in steps doubling from 20 µs to 1 ms, so a rank waiting
// on a slow peer does not hold a core.
class PollBackoff {
  public:
    void pause();

  private:
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::chrono::microseconds nap_{20};
};

// Messages to one rank and the receives it posted. Not thread-safe: the transport holds its lock
// around every call. A receive matches the oldest message from its (source, tag), and receives
// with one (source, tag) are matched in the order they were posted (the MPI rule).
class Mailbox {
  public:
    struct Recv {
        Recv(void* b, size_t n, DType t, int src, int tg)
            : buf(b), count(n), dtype(t), source(src), tag(tg) {}
        void* buf;
        size_t count;
        DType dtype;
        int source;
        int tag;
        bool done = false;
        std::string error;  // set with done when the message had another count or dtype
    };

    // Copies the message (eager send).
    void deliver(int source, int tag, const void* buf, size_t count, DType dtype);
    void post(const std::shared_ptr<Recv>& recv);
    // Matches queued messages to the posted receives of recv's (source, tag), oldest first.
    void progress(const Recv& recv);
    // Forgets a posted receive that will not be waited for (its buffer may be gone).
    void cancel(const Recv& recv);

  private:
    using Key = std::pair<int, int>;  // (source, tag)
    struct Message {
        std::vector<std::byte> data;
        size_t count;
        DType dtype;
    };
    std::map<Key, std::deque<Message>> messages_;
    std::map<Key, std::deque<std::shared_ptr<Recv>>> posted_;
};

}  // namespace ete::comm
