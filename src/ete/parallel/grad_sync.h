// ete/parallel/grad_sync.h — data-parallel gradient synchronisation: a bucketed all-reduce (SUM) of
// one flat f32 gradient buffer over the dp group (or, for ZeRO-2 where it keeps the whole buffer
// — QAT, embeddings tied across pipeline stages — a reduce of each piece to the replica that
// owns it: GradSync::set_owners), overlapped with backward (DESIGN.md §3, §4). ZeRO-2's gradient
// windows and ZeRO-3 reduce in the model instead (model/transformer_zero3.cpp).
//
// Buckets are fixed element ranges cut from the END of the buffer backwards, because backward
// finalises gradients in reverse execution order, i.e. from the end of the buffer towards the
// start. Bucket 0 is the last bucket_bytes/4 elements, bucket 1 the ones before them, ..., and
// the last bucket (the start of the buffer) may be smaller.
//
// One step:   begin();  ...backward calls ready(offset, count) as gradients become final...;
//             finish();  // grads = sum over the dp group
//
// Overlap: a communication thread owned by GradSync performs the all-reduces with blocking calls
// on the dp communicator while the main thread keeps computing. Buckets are all-reduced in bucket
// order 0, 1, 2, ...: a bucket starts the moment it is complete and every lower-numbered bucket
// has started. The fixed order is what makes every rank issue the same collectives in the same
// order (the MPI rule) even when ranks report ranges in different orders; in the usual reverse
// execution order it costs nothing.
//
// Backend memory: the gradient buffer is a backend's (core/device_memory.h). When that memory is
// not host addressable, each bucket is downloaded into a host staging buffer, reduced there and
// uploaded back (the dp communicator always works on host buffers).
//
// Threading contract: between begin() and finish() the comm thread owns the dp communicator and
// every reported range — the caller must neither call dp nor touch a reported range until finish()
// returns. Other communicators (tp, pp) may be used meanwhile (MPI runs with MPI_THREAD_MULTIPLE).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ete/core/device_memory.h"
#include "ete/parallel/communicator.h"

namespace ete {

struct GradSyncOptions {
    size_t bucket_bytes = 25 << 20;  // of f32 gradient; >= 4
    bool bf16 = false;               // communicate in bf16 (the transport accumulates in f32)
    bool overlap = true;             // false: every all-reduce runs inside finish(), main thread
};

// ZeRO-2 (GradSync::set_owners): dp.size() + 1 increasing element offsets from 0 to n, rank r
// owning [owners[r], owners[r+1]). Each bucket is then reduced piece by piece to the owner of each
// piece (a reduce, half an all-reduce's traffic), so after finish() a rank's own range holds the
// sum and the rest of the buffer is unspecified, except [whole_offset, whole_offset +
// whole_count), all-reduced as without owners (a pipeline's tied embedding, whose gradient is
// summed with another stage's afterwards).
struct GradOwners {
    std::vector<size_t> owners;
    size_t whole_offset = 0, whole_count = 0;
};

// One bucket's trace in the last step, in seconds since begin(). ready_s: its last element was
// reported (or finish() reported it); start_s/end_s: its all-reduce, including bf16 conversion.
struct BucketEvent {
    int bucket;
    double ready_s, start_s, end_s;
};

class GradSync {
  public:
    struct Range {
        size_t offset, count;
    };

    // grads (n f32 of `mem`'s memory; mem null = host memory) must outlive this object. With
    // dp.size() == 1 every step is a no-op (no thread, no events) apart from the argument checks.
    GradSync(Communicator& dp, DeviceMemory* mem, float* grads, size_t n,
             GradSyncOptions options = {});
    ~GradSync();  // stops the comm thread after the bucket it is reducing, if any
    GradSync(const GradSync&) = delete;
    GradSync& operator=(const GradSync&) = delete;

    // ZeRO-2: reduce to owners from the next step on (ete::Error when `o` does not cover the
    // buffer).
    void set_owners(GradOwners o);
    // Arms one synchronisation: call before the backward of the last micro-batch of a step.
    void begin();
    // grads[offset, offset+count) are final. Ranges come in any order and may span buckets; each
    // element is reported at most once per step (ete::Error otherwise).
    void ready(size_t offset, size_t count);
    // Reports every range not reported yet, waits for all buckets and rethrows the first
    // communication error (the communicator's message, naming op, group and ranks). Afterwards
    // grads = the sum over the dp group. After an error the object refuses further steps.
    void finish();

    size_t num_buckets() const { return num_buckets_; }
    Range bucket(size_t b) const;  // the element range of bucket b
    // Of the last finished step, by bucket; empty with dp size 1.
    const std::vector<BucketEvent>& events() const { return events_; }
    // Seconds the last finish() spent blocked on communication (with overlap=false: all of it).
    double wait_seconds() const { return wait_seconds_; }

  private:
    double now_s() const;
    void check_range(size_t offset, size_t count) const;
    void mark_ready(size_t offset, size_t count);  // updates bucket counters, launches buckets
    void report_unreported();
    void reduce_bucket(size_t b);  // the all-reduce of one bucket, with its trace
    // The collectives of elements [offset, offset + count) whose host copy (of dtype t) is p.
    void reduce_range(void* p, DType t, size_t offset, size_t count);
    void comm_loop();
    void wait_overlapped();
    void run_on_main_thread();

    Communicator& dp_;
    DeviceMemory* mem_;  // null or host addressable: reduce in place
    float* grads_;
    size_t n_;
    GradSyncOptions options_;
    GradOwners owners_;  // empty owners: all-reduce
    size_t bucket_elems_;
    size_t num_buckets_;
    bool active_;  // dp size > 1

    // Main thread only.
    bool armed_ = false;
    bool failed_ = false;
    std::map<size_t, size_t> reported_;  // disjoint, merged [begin, end) ranges of this step
    std::vector<size_t> remaining_;      // by bucket: elements not reported yet
    std::vector<bool> bucket_ready_;
    size_t next_launch_ = 0;  // buckets below it have been handed to the comm thread
    double wait_seconds_ = 0;
    std::chrono::steady_clock::time_point t0_;

    // Shared with the comm thread, guarded by mu_.
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<size_t> queue_;  // launched buckets not started yet
    size_t done_ = 0;           // buckets finished (or skipped after an error) this step
    bool stop_ = false;
    std::string error_;  // first communication error of this step
    std::vector<BucketEvent> events_;

    std::vector<uint16_t> staging_;  // bf16 copy of one bucket (used by one thread at a time)
    std::vector<float> host_;  // f32 copy of one bucket when the gradients are not host memory
    std::thread comm_thread_;
};

}  // namespace ete
