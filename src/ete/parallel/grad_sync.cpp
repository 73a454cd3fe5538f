// ete/parallel/grad_sync.cpp — bucketed, overlapped dp gradient all-reduce (grad_sync.h).
//
// Bookkeeping lives on the main thread: the reported ranges of the step (a merged interval map,
// which both enforces "each element at most once" and yields the unreported gaps for finish())
// and per-bucket counters of elements still missing. A bucket whose counter reaches zero is
// ready; ready buckets are handed to the comm thread strictly in bucket order through a queue.
// The comm thread records start/end times and the first error under the same mutex; after an
// error it skips the remaining buckets of the step so finish() returns promptly.
#include "ete/parallel/grad_sync.h"

#include <mpi.h>

#include <algorithm>
#include <exception>

#include "ete/core/dtype.h"
#include "ete/core/error.h"
#include "ete/core/log.h"
#include "ete/parallel/mpi_comm.h"

namespace ete {

GradSync::GradSync(Communicator& dp, DeviceMemory* mem, float* grads, size_t n,
                   GradSyncOptions options)
    : dp_(dp),
      mem_(mem && !mem->host_addressable() ? mem : nullptr),
      grads_(grads),
      n_(n),
      options_(options) {
    ETE_CHECK(options.bucket_bytes >= sizeof(float),
              "GradSync on group {}: bucket_bytes {} (expected >= 4, one f32 element)", dp.name(),
              options.bucket_bytes);
    ETE_CHECK(grads != nullptr || n == 0,
              "GradSync on group {}: null gradient buffer of {} elements (expected a buffer)",
              dp.name(), n);
    bucket_elems_ = options.bucket_bytes / sizeof(float);
    num_buckets_ = n == 0 ? 0 : (n - 1) / bucket_elems_ + 1;
    active_ = dp.size() > 1;
    remaining_.assign(num_buckets_, 0);
    bucket_ready_.assign(num_buckets_, false);
    if (!active_) return;
    // Below MPI_THREAD_MULTIPLE a second thread must not call MPI beside the main thread.
    if (options_.overlap && dp.transport() == "mpi" && mpi_thread_level() < MPI_THREAD_MULTIPLE) {
        log_warn(
            "GradSync on group {}: MPI lacks MPI_THREAD_MULTIPLE; gradient all-reduce will "
            "not overlap backward",
            dp.name());
        options_.overlap = false;
    }
    if (options_.bf16) staging_.resize(std::min(bucket_elems_, n));
    if (mem_) host_.resize(std::min(bucket_elems_, n));
    if (options_.overlap) comm_thread_ = std::thread([this] { comm_loop(); });
}

void GradSync::set_owners(GradOwners g) {
    const std::vector<size_t>& o = g.owners;
    ETE_CHECK(!armed_, "GradSync on group {}: set_owners during a step", dp_.name());
    ETE_CHECK(o.empty() || (o.size() == size_t(dp_.size()) + 1 && o.front() == 0 &&
                            o.back() == n_ && std::is_sorted(o.begin(), o.end())),
              "GradSync on group {}: {} owner offsets (expected none, or {} increasing from 0 to "
              "{})",
              dp_.name(), o.size(), dp_.size() + 1, n_);
    ETE_CHECK(g.whole_offset + g.whole_count <= n_,
              "GradSync on group {}: whole range [{}, {}) past the {} gradients", dp_.name(),
              g.whole_offset, g.whole_offset + g.whole_count, n_);
    owners_ = std::move(g);
}

GradSync::~GradSync() {
    if (!comm_thread_.joinable()) return;
    {
        // Buckets not started are dropped: destruction mid-step means the step is abandoned.
        std::lock_guard lock(mu_);
        stop_ = true;
        queue_.clear();
    }
    cv_.notify_all();
    comm_thread_.join();
}

GradSync::Range GradSync::bucket(size_t b) const {
    ETE_ASSERT(b < num_buckets_);
    const size_t end = n_ - b * bucket_elems_;
    const size_t begin = end > bucket_elems_ ? end - bucket_elems_ : 0;
    return {begin, end - begin};
}

double GradSync::now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void GradSync::begin() {
    ETE_CHECK(!failed_,
              "GradSync::begin on group {}: a previous step failed in communication (expected "
              "no further steps on this GradSync)",
              dp_.name());
    ETE_CHECK(!armed_,
              "GradSync::begin on group {}: the previous step is not finished (expected finish() "
              "before the next begin())",
              dp_.name());
    armed_ = true;
    reported_.clear();
    for (size_t b = 0; b < num_buckets_; ++b) {
        remaining_[b] = bucket(b).count;
        bucket_ready_[b] = false;
    }
    next_launch_ = 0;
    wait_seconds_ = 0;
    std::lock_guard lock(mu_);
    ETE_ASSERT(queue_.empty());
    done_ = 0;
    error_.clear();
    events_.clear();
    if (active_) {
        for (size_t b = 0; b < num_buckets_; ++b) events_.push_back({int(b), -1, -1, -1});
    }
    t0_ = std::chrono::steady_clock::now();
}

void GradSync::check_range(size_t offset, size_t count) const {
    ETE_CHECK(armed_, "GradSync::ready on group {}: no step armed (expected begin() first)",
              dp_.name());
    ETE_CHECK(offset <= n_ && count <= n_ - offset,
              "GradSync::ready on group {}: elements [{}, {}) (expected a range inside the "
              "gradient buffer of {} elements)",
              dp_.name(), offset, offset + count, n_);
}

void GradSync::ready(size_t offset, size_t count) {
    check_range(offset, count);
    if (count == 0) return;
    const size_t end = offset + count;
    // reported_ holds disjoint, merged ranges: the new one must fit in a gap between two.
    auto next = reported_.upper_bound(offset);  // first range starting after offset
    auto prev = next == reported_.begin() ? reported_.end() : std::prev(next);
    const bool hits_prev = prev != reported_.end() && prev->second > offset;
    const bool hits_next = next != reported_.end() && next->first < end;
    if (hits_prev || hits_next) {
        const auto& hit = hits_prev ? *prev : *next;
        throw Error(
            fmt::format("GradSync::ready on group {}: elements [{}, {}) overlap [{}, {}) "
                        "reported earlier this step (expected each element at most once "
                        "per step)",
                        dp_.name(), offset, end, hit.first, hit.second));
    }
    size_t lo = offset, hi = end;
    if (prev != reported_.end() && prev->second == offset) {
        lo = prev->first;
        reported_.erase(prev);
    }
    if (next != reported_.end() && next->first == end) {
        hi = next->second;
        reported_.erase(next);
    }
    reported_[lo] = hi;
    mark_ready(offset, count);
}

void GradSync::mark_ready(size_t offset, size_t count) {
    if (!active_ || count == 0) return;
    const size_t end = offset + count;
    // Bucket indices grow towards the start of the buffer.
    const size_t b_first = (n_ - end) / bucket_elems_;
    const size_t b_last = (n_ - 1 - offset) / bucket_elems_;
    const double t = now_s();
    std::lock_guard lock(mu_);
    for (size_t b = b_first; b <= b_last; ++b) {
        const Range r = bucket(b);
        const size_t covered = std::min(end, r.offset + r.count) - std::max(offset, r.offset);
        ETE_ASSERT(covered <= remaining_[b]);
        remaining_[b] -= covered;
        if (remaining_[b] == 0) {
            bucket_ready_[b] = true;
            events_[b].ready_s = t;
        }
    }
    if (!options_.overlap) return;  // finish() reduces every bucket on the main thread
    const size_t launched = next_launch_;
    while (next_launch_ < num_buckets_ && bucket_ready_[next_launch_]) {
        queue_.push_back(next_launch_++);
    }
    if (next_launch_ != launched) cv_.notify_all();
}

void GradSync::report_unreported() {
    std::vector<Range> gaps;
    size_t pos = 0;
    for (const auto& [lo, hi] : reported_) {
        if (lo > pos) gaps.push_back({pos, lo - pos});
        pos = hi;
    }
    if (pos < n_) gaps.push_back({pos, n_ - pos});
    // From the end of the buffer backwards, as backward would have reported them.
    for (auto it = gaps.rbegin(); it != gaps.rend(); ++it) mark_ready(it->offset, it->count);
    reported_.clear();
    if (n_ > 0) reported_[0] = n_;
}

void GradSync::finish() {
    ETE_CHECK(armed_, "GradSync::finish on group {}: no step armed (expected begin() first)",
              dp_.name());
    report_unreported();
    armed_ = false;
    if (!active_) return;
    const auto t = std::chrono::steady_clock::now();
    if (options_.overlap) {
        wait_overlapped();
    } else {
        run_on_main_thread();
    }
    wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    std::string error;
    {
        std::lock_guard lock(mu_);
        error = error_;
    }
    if (!error.empty()) {
        failed_ = true;
        throw Error(error);
    }
}

void GradSync::wait_overlapped() {
    std::unique_lock lock(mu_);
    ETE_ASSERT(next_launch_ == num_buckets_);  // finish() made every bucket ready
    cv_.wait(lock, [&] { return done_ == num_buckets_; });
}

void GradSync::run_on_main_thread() {
    for (size_t b = 0; b < num_buckets_; ++b) reduce_bucket(b);
}

void GradSync::comm_loop() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        const size_t b = queue_.front();
        queue_.pop_front();
        lock.unlock();
        reduce_bucket(b);
        lock.lock();
    }
}

void GradSync::reduce_bucket(size_t b) {
    {
        std::lock_guard lock(mu_);
        if (!error_.empty()) {  // an earlier bucket failed: the step is lost, skip the rest
            ++done_;
            cv_.notify_all();
            return;
        }
        events_[b].start_s = now_s();
    }
    const Range r = bucket(b);
    float* p = mem_ ? host_.data() : grads_ + r.offset;
    std::string error;
    try {
        if (mem_) mem_->download(p, grads_ + r.offset, r.count * sizeof(float));
        if (options_.bf16) {
            uint16_t* h = staging_.data();
            for (size_t i = 0; i < r.count; ++i) h[i] = f32_to_bf16(p[i]);
            reduce_range(h, DType::BF16, r.offset, r.count);
            for (size_t i = 0; i < r.count; ++i) p[i] = bf16_to_f32(h[i]);
        } else {
            reduce_range(p, DType::F32, r.offset, r.count);
        }
        if (mem_) mem_->upload(grads_ + r.offset, p, r.count * sizeof(float));
    } catch (const std::exception& e) {
        error = fmt::format("GradSync bucket {} of {} (elements [{}, {})): {}", b, num_buckets_,
                            r.offset, r.offset + r.count, e.what());
    } catch (...) {
        error = fmt::format("GradSync bucket {} of {} on group {}: unknown exception", b,
                            num_buckets_, dp_.name());
    }
    {
        std::lock_guard lock(mu_);
        events_[b].end_s = now_s();
        if (error_.empty()) error_ = std::move(error);
        ++done_;
    }
    cv_.notify_all();
}

void GradSync::reduce_range(void* p, DType t, size_t offset, size_t count) {
    const std::vector<size_t>& owners = owners_.owners;
    if (owners.empty()) return dp_.all_reduce(p, count, t, ReduceOp::Sum);
    // Pieces cut at the owners' boundaries and the whole range's, in order: every rank derives
    // the same sequence of collectives from the same bucket.
    const size_t w0 = owners_.whole_offset, w1 = w0 + owners_.whole_count, end = offset + count;
    for (size_t at = offset; at < end;) {
        const bool whole = at >= w0 && at < w1;
        const auto owner = std::upper_bound(owners.begin(), owners.end(), at) - owners.begin() - 1;
        size_t stop = whole ? w1 : owners[size_t(owner) + 1];
        if (!whole && at < w0) stop = std::min(stop, w0);
        stop = std::min(stop, end);
        void* piece = static_cast<char*>(p) + (at - offset) * dtype_size(t);
        if (whole)
            dp_.all_reduce(piece, stop - at, t, ReduceOp::Sum);
        else
            dp_.reduce(piece, stop - at, t, ReduceOp::Sum, int(owner));
        at = stop;
    }
}

}  // namespace ete
