// ete/parallel/communicator.cpp — wait_all and the helpers every transport shares (comm_util.h).
#include "ete/parallel/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>

#include "ete/parallel/comm_util.h"

namespace ete {

void wait_all(std::vector<Request>& requests) {
    // On the first failure the rest are destroyed too (a destructor waits for or abandons its
    // request), so the caller never holds requests of a failed batch.
    try {
        for (Request& r : requests) r->wait();
    } catch (...) {
        requests.clear();
        throw;
    }
    requests.clear();
}

}  // namespace ete

namespace ete::comm {

std::string where(std::string_view op, const std::string& group, const std::vector<int>& ranks) {
    return fmt::format("[comm] {} on group {} (world ranks {})", op, group, fmt::join(ranks, ","));
}

std::string where(std::string_view op, const Communicator& c) {
    return where(op, c.name(), c.world_ranks());
}

std::string timeout_message(const std::string& where, double seconds) {
    return fmt::format("{} timed out after {:g} s", where, seconds);
}

bool dtype_reducible(DType dtype) {
    return dtype != DType::F16 && dtype != DType::BOOL;
}

std::string_view reduce_op_name(ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
            return "sum";
        case ReduceOp::Max:
            return "max";
        case ReduceOp::Min:
            return "min";
    }
    return "?";
}

void check_reducible(std::string_view op, const Communicator& c, DType dtype) {
    ETE_CHECK(dtype_reducible(dtype),
              "{}: cannot reduce {} (expected F32, F64, BF16 or an integer type)", where(op, c),
              dtype_name(dtype));
}

void check_peer(std::string_view op, const Communicator& c, int peer) {
    ETE_CHECK(peer >= 0 && peer < c.size(),
              "{}: peer {} is not a rank of the group (expected 0..{})", where(op, c), peer,
              c.size() - 1);
}

void check_tag(std::string_view op, const Communicator& c, int tag) {
    ETE_CHECK(tag >= 0 && tag <= kMaxTag, "{}: tag {} is out of range (expected 0..{})",
              where(op, c), tag, kMaxTag);
}

void check_root(std::string_view op, const Communicator& c, int root) {
    ETE_CHECK(root >= 0 && root < c.size(),
              "{}: root {} is not a rank of the group (expected 0..{})", where(op, c), root,
              c.size() - 1);
}

void check_timeout(const Communicator& c, double seconds) {
    ETE_CHECK(std::isfinite(seconds) && seconds >= 0,
              "{}: timeout {} s (expected a finite number >= 0; 0 = wait forever)",
              where("set_timeout", c), seconds);
}

namespace {

template <typename T>
T combine(T a, T b, ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
            if constexpr (std::is_integral_v<T>) {
                // Wrap like MPI does instead of signed-overflow UB.
                using U = std::make_unsigned_t<T>;
                return T(U(a) + U(b));
            } else {
                return a + b;
            }
        case ReduceOp::Max:
            return b > a ? b : a;
        case ReduceOp::Min:
            return b < a ? b : a;
    }
    return a;
}

// Element-wise through memcpy: buffers may be unaligned views into byte arrays.
template <typename T>
void reduce_typed(void* acc, const void* in, size_t count, ReduceOp op) {
    auto* a = static_cast<std::byte*>(acc);
    const auto* b = static_cast<const std::byte*>(in);
    for (size_t i = 0; i < count; ++i) {
        T x, y;
        std::memcpy(&x, a + i * sizeof(T), sizeof(T));
        std::memcpy(&y, b + i * sizeof(T), sizeof(T));
        x = combine(x, y, op);
        std::memcpy(a + i * sizeof(T), &x, sizeof(T));
    }
}

void reduce_bf16(void* acc, const void* in, size_t count, ReduceOp op) {
    auto* a = static_cast<std::byte*>(acc);
    const auto* b = static_cast<const std::byte*>(in);
    for (size_t i = 0; i < count; ++i) {
        uint16_t x, y;
        std::memcpy(&x, a + 2 * i, 2);
        std::memcpy(&y, b + 2 * i, 2);
        // Max/Min of two bf16 values is one of them: no rounding, keep the bits.
        const float fx = bf16_to_f32(x), fy = bf16_to_f32(y);
        uint16_t r = x;
        if (op == ReduceOp::Sum) r = f32_to_bf16(fx + fy);
        if (op == ReduceOp::Max && fy > fx) r = y;
        if (op == ReduceOp::Min && fy < fx) r = y;
        std::memcpy(a + 2 * i, &r, 2);
    }
}

}  // namespace

void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op) {
    switch (dtype) {
        case DType::F32:
            return reduce_typed<float>(acc, in, count, op);
        case DType::F64:
            return reduce_typed<double>(acc, in, count, op);
        case DType::BF16:
            return reduce_bf16(acc, in, count, op);
        case DType::I8:
            return reduce_typed<int8_t>(acc, in, count, op);
        case DType::U8:
            return reduce_typed<uint8_t>(acc, in, count, op);
        case DType::I16:
            return reduce_typed<int16_t>(acc, in, count, op);
        case DType::U16:
            return reduce_typed<uint16_t>(acc, in, count, op);
        case DType::I32:
            return reduce_typed<int32_t>(acc, in, count, op);
        case DType::U32:
            return reduce_typed<uint32_t>(acc, in, count, op);
        case DType::I64:
            return reduce_typed<int64_t>(acc, in, count, op);
        case DType::U64:
            return reduce_typed<uint64_t>(acc, in, count, op);
        case DType::F16:
        case DType::BOOL:
            break;
    }
    ETE_ASSERT(false && "reduce_into: dtype not reducible (checked by the caller)");
}

Request done_request() {
    struct Done final : CommRequest {
        void wait() override {}
        bool test() override { return true; }
    };
    return std::make_unique<Done>();
}

void PollBackoff::pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    if (waited < std::chrono::microseconds(50)) return;
    if (waited < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
        return;
    }
    std::this_thread::sleep_for(nap_);
    nap_ = std::min(nap_ * 2, std::chrono::microseconds(1000));
}

Deadline::Deadline(double seconds)
    : forever_(seconds <= 0),
      at_(std::chrono::steady_clock::now() +
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(forever_ ? 0.0 : seconds))) {}

void Mailbox::deliver(int source, int tag, const void* buf, size_t count, DType dtype) {
    Message m{std::vector<std::byte>(count * dtype_size(dtype)), count, dtype};
    if (!m.data.empty()) std::memcpy(m.data.data(), buf, m.data.size());
    messages_[{source, tag}].push_back(std::move(m));
}

void Mailbox::post(const std::shared_ptr<Recv>& recv) {
    posted_[{recv->source, recv->tag}].push_back(recv);
}

void Mailbox::progress(const Recv& recv) {
    const Key key{recv.source, recv.tag};
    auto posted = posted_.find(key);
    auto queued = messages_.find(key);
    if (posted == posted_.end() || queued == messages_.end()) return;
    while (!posted->second.empty() && !queued->second.empty()) {
        Recv& r = *posted->second.front();
        Message& m = queued->second.front();
        if (m.count == r.count && m.dtype == r.dtype) {
            if (!m.data.empty()) std::memcpy(r.buf, m.data.data(), m.data.size());
        } else {
            r.error = fmt::format("expected {} x {} from rank {} tag {}, the message has {} x {}",
                                  r.count, dtype_name(r.dtype), r.source, r.tag, m.count,
                                  dtype_name(m.dtype));
        }
        r.done = true;
        posted->second.pop_front();
        queued->second.pop_front();
    }
    if (posted->second.empty()) posted_.erase(posted);
    if (queued->second.empty()) messages_.erase(queued);
}

void Mailbox::cancel(const Recv& recv) {
    auto posted = posted_.find({recv.source, recv.tag});
    if (posted == posted_.end()) return;
    auto& q = posted->second;
    for (auto it = q.begin(); it != q.end(); ++it) {
        if (it->get() == &recv) {
            q.erase(it);
            break;
        }
    }
    if (q.empty()) posted_.erase(posted);
}

}  // namespace ete::comm
