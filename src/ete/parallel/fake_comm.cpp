// ete/parallel/fake_comm.cpp — the in-process fake world (fake_comm.h).
//
// All ranks share one FakeWorld with one mutex. A collective is matched across ranks by its
// sequence number in the group (the k-th collective call of every rank is one operation): each
// rank copies its input into the shared Slot at the call, the last rank to arrive computes the
// result in group-rank order, and each rank copies its part out in wait()/test(). Sends copy the
// message into the destination's Mailbox at the call; a receive matches in wait()/test().
#include "ete/parallel/fake_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "ete/parallel/comm_util.h"

namespace ete {
namespace {

constexpr int kMaxFakeRanks = 256;
// A deadlocked unit test fails with a message naming the op instead of hanging CI.
constexpr double kFakeDefaultTimeout = 60.0;
constexpr const char* kAborted = "aborted because another rank failed";

struct FakeWorld {
    explicit FakeWorld(int n) : exited(size_t(n), false) {}
    std::mutex mu;
    std::condition_variable cv;
    bool aborted = false;
    std::vector<bool> exited;  // by world rank: its body has returned or thrown
};

enum class Coll : uint8_t { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier, Split };

std::string_view coll_name(Coll kind) {
    switch (kind) {
        case Coll::AllReduce:
            return "all_reduce";
        case Coll::ReduceScatter:
            return "reduce_scatter";
        case Coll::AllGather:
            return "all_gather";
        case Coll::Broadcast:
            return "broadcast";
        case Coll::Barrier:
            return "barrier";
        case Coll::Split:
            return "split";
    }
    return "?";
}

// The arguments every rank must pass identically (count is per rank: recv_count of
// reduce_scatter, send_count of all_gather).
struct CollCall {
    Coll kind;
    size_t count = 0;
    DType dtype = DType::U8;
    ReduceOp op = ReduceOp::Sum;
    int root = 0;
    bool operator==(const CollCall&) const = default;

    std::string describe() const {
        std::string s = fmt::format("{}({} x {}", coll_name(kind), count, dtype_name(dtype));
        if (kind == Coll::AllReduce || kind == Coll::ReduceScatter) {
            s += fmt::format(", {}", comm::reduce_op_name(op));
        }
        if (kind == Coll::Broadcast) s += fmt::format(", root {}", root);
        return s + ")";
    }
};

struct FakeGroup;

// One collective operation of a group.
struct Slot {
    Slot(const CollCall& c, int n, int first)
        : call(c), first_rank(first), inputs(size_t(n)), arrived(size_t(n), false) {}
    CollCall call;  // as the first rank to arrive called it
    int first_rank;
    std::vector<std::vector<std::byte>> inputs;  // by group rank, copied at the call
    std::vector<bool> arrived;
    int n_arrived = 0;
    int n_released = 0;  // ranks that copied their output
    bool complete = false;
    std::vector<std::byte> result;
    std::vector<std::shared_ptr<FakeGroup>> split_groups;  // by group rank; null for color < 0
    std::vector<int> split_ranks;
};

struct FakeGroup {
    FakeGroup(std::shared_ptr<FakeWorld> w, std::vector<int> ranks)
        : world(std::move(w)), world_ranks(std::move(ranks)), boxes(world_ranks.size()) {}
    std::shared_ptr<FakeWorld> world;
    std::vector<int> world_ranks;
    std::map<uint64_t, std::shared_ptr<Slot>> slots;  // by sequence number
    std::vector<comm::Mailbox> boxes;                 // by destination group rank
};

// split: ranks with one color form a group, ordered by (key, rank).
void finish_split(Slot& s, const FakeGroup& parent) {
    const int n = int(s.inputs.size());
    std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, rank)
    for (int r = 0; r < n; ++r) {
        int ck[2];
        std::memcpy(ck, s.inputs[size_t(r)].data(), sizeof ck);
        if (ck[0] >= 0) members[ck[0]].push_back({ck[1], r});
    }
    s.split_groups.assign(size_t(n), nullptr);
    s.split_ranks.assign(size_t(n), -1);
    for (auto& [color, m] : members) {
        std::sort(m.begin(), m.end());
        std::vector<int> world_ranks;
        for (auto [key, r] : m) world_ranks.push_back(parent.world_ranks[size_t(r)]);
        auto g = std::make_shared<FakeGroup>(parent.world, std::move(world_ranks));
        for (size_t i = 0; i < m.size(); ++i) {
            s.split_groups[size_t(m[i].second)] = g;
            s.split_ranks[size_t(m[i].second)] = int(i);
        }
    }
}

// Run by the last rank to arrive: reduces in group-rank order 0..n-1, so every rank gets the
// same bits.
void finish(Slot& s, const FakeGroup& group) {
    const CollCall& c = s.call;
    const size_t n = s.inputs.size();
    switch (c.kind) {
        case Coll::AllReduce:
        case Coll::ReduceScatter: {
            const size_t total = c.kind == Coll::AllReduce ? c.count : c.count * n;
            s.result = s.inputs[0];
            for (size_t r = 1; r < n; ++r) {
                comm::reduce_into(s.result.data(), s.inputs[r].data(), total, c.dtype, c.op);
            }
            break;
        }
        case Coll::AllGather:
            for (const auto& in : s.inputs) s.result.insert(s.result.end(), in.begin(), in.end());
            break;
        case Coll::Broadcast:
            s.result = s.inputs[size_t(c.root)];
            break;
        case Coll::Barrier:
            break;
        case Coll::Split:
            finish_split(s, group);
            break;
    }
    s.inputs.clear();
    s.complete = true;
}

// Blocks on the world's condition variable until ready() (called under the lock); throws when
// the world is aborted, when gone() names a rank that finished without doing its part, or at the
// deadline.
template <typename Ready, typename Gone>
void wait_in_world(FakeWorld& w, std::unique_lock<std::mutex>& lock, const std::string& where,
                   double timeout, Ready ready, Gone gone) {
    const comm::Deadline deadline(timeout);
    for (;;) {
        if (ready()) return;
        if (w.aborted) throw Error(where + ": " + kAborted);
        if (std::string why = gone(); !why.empty()) throw Error(where + ": " + why);
        if (deadline.forever()) {
            w.cv.wait(lock);
        } else if (w.cv.wait_until(lock, deadline.at()) == std::cv_status::timeout) {
            if (ready()) return;
            throw Error(comm::timeout_message(where, timeout));
        }
    }
}

class FakeCollRequest final : public CommRequest {
  public:
    FakeCollRequest(std::shared_ptr<FakeGroup> group, std::shared_ptr<Slot> slot, uint64_t seq,
                    int rank, void* out, std::string where, double timeout)
        : group_(std::move(group)),
          slot_(std::move(slot)),
          seq_(seq),
          rank_(rank),
          out_(out),
          where_(std::move(where)),
          timeout_(timeout),
          uncaught_(std::uncaught_exceptions()) {}

    ~FakeCollRequest() override {
        // Waits, unless an exception is unwinding past it (the world is being aborted then).
        if (done_ || std::uncaught_exceptions() != uncaught_) return;
        try {
            wait();
        } catch (...) {
        }
    }

    bool test() override {
        std::lock_guard lock(group_->world->mu);
        if (ready()) return true;
        if (group_->world->aborted) throw Error(where_ + ": " + kAborted);
        return false;
    }

    void wait() override {
        FakeWorld& w = *group_->world;
        std::unique_lock lock(w.mu);
        wait_in_world(
            w, lock, where_, timeout_, [&] { return ready(); }, [&] { return gone(); });
    }

    const Slot& slot() const { return *slot_; }

  private:
    // Copies this rank's output once the last rank has arrived.
    bool ready() {
        if (done_) return true;
        if (!slot_->complete) return false;
        const CollCall& c = slot_->call;
        const size_t bytes = c.count * dtype_size(c.dtype);
        const std::byte* res = slot_->result.data();
        if (c.kind == Coll::ReduceScatter) res += size_t(rank_) * bytes;
        const bool copies = c.kind == Coll::AllReduce || c.kind == Coll::ReduceScatter ||
                            c.kind == Coll::AllGather ||
                            (c.kind == Coll::Broadcast && rank_ != c.root);
        const size_t out_bytes = c.kind == Coll::AllGather ? slot_->result.size() : bytes;
        if (copies && out_bytes > 0) std::memcpy(out_, res, out_bytes);
        done_ = true;
        if (++slot_->n_released == int(slot_->arrived.size())) group_->slots.erase(seq_);
        return true;
    }

    std::string gone() const {
        for (size_t r = 0; r < slot_->arrived.size(); ++r) {
            const int wr = group_->world_ranks[r];
            if (!slot_->arrived[r] && group_->world->exited[size_t(wr)]) {
                return fmt::format("world rank {} finished without joining", wr);
            }
        }
        return {};
    }

    std::shared_ptr<FakeGroup> group_;
    std::shared_ptr<Slot> slot_;
    uint64_t seq_;
    int rank_;
    void* out_;
    std::string where_;
    double timeout_;
    int uncaught_;
    bool done_ = false;
};

class FakeRecvRequest final : public CommRequest {
  public:
    FakeRecvRequest(std::shared_ptr<FakeGroup> group, std::shared_ptr<comm::Mailbox::Recv> recv,
                    int rank, std::string where, double timeout)
        : group_(std::move(group)),
          recv_(std::move(recv)),
          rank_(rank),
          where_(std::move(where)),
          timeout_(timeout),
          uncaught_(std::uncaught_exceptions()) {}

    ~FakeRecvRequest() override {
        try {
            if (std::uncaught_exceptions() == uncaught_) wait();
        } catch (...) {
        }
        // A receive that never completed must not write into a buffer that may be gone.
        std::lock_guard lock(group_->world->mu);
        if (!recv_->done) box().cancel(*recv_);
    }

    bool test() override {
        std::lock_guard lock(group_->world->mu);
        if (ready()) return true;
        if (group_->world->aborted) throw Error(where_ + ": " + kAborted);
        return false;
    }

    void wait() override {
        FakeWorld& w = *group_->world;
        std::unique_lock lock(w.mu);
        wait_in_world(
            w, lock, where_, timeout_, [&] { return ready(); }, [&] { return gone(); });
    }

  private:
    comm::Mailbox& box() { return group_->boxes[size_t(rank_)]; }

    bool ready() {
        box().progress(*recv_);
        if (recv_->done && !recv_->error.empty()) throw Error(where_ + ": " + recv_->error);
        return recv_->done;
    }

    std::string gone() const {
        const int wr = group_->world_ranks[size_t(recv_->source)];
        if (!group_->world->exited[size_t(wr)]) return {};
        return fmt::format("world rank {} finished without sending the message (tag {})", wr,
                           recv_->tag);
    }

    std::shared_ptr<FakeGroup> group_;
    std::shared_ptr<comm::Mailbox::Recv> recv_;
    int rank_;
    std::string where_;
    double timeout_;
    int uncaught_;
};

class FakeComm final : public Communicator {
  public:
    FakeComm(std::shared_ptr<FakeGroup> group, int rank, std::string name, double timeout)
        : group_(std::move(group)), rank_(rank), name_(std::move(name)), timeout_(timeout) {}

    int rank() const override { return rank_; }
    int size() const override { return int(group_->world_ranks.size()); }
    const std::string& name() const override { return name_; }
    const std::vector<int>& world_ranks() const override { return group_->world_ranks; }
    std::string transport() const override { return "fake"; }
    void set_timeout(double seconds) override {
        comm::check_timeout(*this, seconds);
        std::lock_guard lock(group_->world->mu);
        timeout_ = seconds;
    }
    double timeout() const override {
        std::lock_guard lock(group_->world->mu);
        return timeout_;
    }

    Request iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
        comm::check_reducible("all_reduce", *this, dtype);
        return start({Coll::AllReduce, count, dtype, op, 0}, buf, count, buf);
    }
    Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                            ReduceOp op) override {
        comm::check_reducible("reduce_scatter", *this, dtype);
        const size_t total = recv_count * size_t(size());
        return start({Coll::ReduceScatter, recv_count, dtype, op, 0}, send, total, recv);
    }
    Request iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override {
        return start({Coll::AllGather, send_count, dtype, ReduceOp::Sum, 0}, send, send_count,
                     recv);
    }
    Request ibroadcast(void* buf, size_t count, DType dtype, int root) override {
        comm::check_root("broadcast", *this, root);
        return start({Coll::Broadcast, count, dtype, ReduceOp::Sum, root}, buf,
                     rank_ == root ? count : 0, buf);
    }
    void barrier() override { start({Coll::Barrier}, nullptr, 0, nullptr)->wait(); }

    void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        isend(buf, count, dtype, peer, tag);
    }
    Request isend(const void* buf, size_t count, DType dtype, int peer, int tag) override;
    Request irecv(void* buf, size_t count, DType dtype, int peer, int tag) override;
    std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  private:
    std::unique_ptr<FakeCollRequest> start(const CollCall& call, const void* in, size_t in_count,
                                           void* out);
    // Under the world lock: throws if another rank failed.
    void check_alive(std::string_view op) const {
        if (group_->world->aborted) throw Error(comm::where(op, *this) + ": " + kAborted);
    }

    std::shared_ptr<FakeGroup> group_;
    int rank_;
    std::string name_;
    double timeout_;         // guarded by the world mutex
    uint64_t next_seq_ = 0;  // guarded by the world mutex
};

std::unique_ptr<FakeCollRequest> FakeComm::start(const CollCall& call, const void* in,
                                                 size_t in_count, void* out) {
    std::string where = comm::where(coll_name(call.kind), *this);
    FakeWorld& w = *group_->world;
    std::unique_lock lock(w.mu);
    check_alive(coll_name(call.kind));
    const uint64_t seq = next_seq_++;
    std::shared_ptr<Slot>& slot = group_->slots[seq];
    if (!slot) {
        slot = std::make_shared<Slot>(call, size(), rank_);
    } else if (!(slot->call == call)) {
        throw Error(
            fmt::format("{}: group rank {} called {} as collective #{} of this group, this "
                        "rank called {} (every rank must call the same collectives in the "
                        "same order)",
                        where, slot->first_rank, slot->call.describe(), seq, call.describe()));
    }
    const auto* bytes = static_cast<const std::byte*>(in);
    slot->inputs[size_t(rank_)].assign(bytes, bytes + in_count * dtype_size(call.dtype));
    slot->arrived[size_t(rank_)] = true;
    if (++slot->n_arrived == size()) {
        finish(*slot, *group_);
        w.cv.notify_all();
    }
    return std::make_unique<FakeCollRequest>(group_, slot, seq, rank_, out, std::move(where),
                                             timeout_);
}

Request FakeComm::isend(const void* buf, size_t count, DType dtype, int peer, int tag) {
    comm::check_peer("send", *this, peer);
    comm::check_tag("send", *this, tag);
    {
        std::lock_guard lock(group_->world->mu);
        check_alive("send");
        group_->boxes[size_t(peer)].deliver(rank_, tag, buf, count, dtype);
    }
    group_->world->cv.notify_all();
    return comm::done_request();
}

Request FakeComm::irecv(void* buf, size_t count, DType dtype, int peer, int tag) {
    comm::check_peer("recv", *this, peer);
    comm::check_tag("recv", *this, tag);
    auto r = std::make_shared<comm::Mailbox::Recv>(buf, count, dtype, peer, tag);
    double timeout;
    {
        std::lock_guard lock(group_->world->mu);
        check_alive("recv");
        group_->boxes[size_t(rank_)].post(r);
        timeout = timeout_;
    }
    return std::make_unique<FakeRecvRequest>(group_, std::move(r), rank_,
                                             comm::where("recv", *this), timeout);
}

std::unique_ptr<Communicator> FakeComm::split(int color, int key, const std::string& name) {
    const int args[2] = {color, key};
    auto req = start({Coll::Split, 2, DType::I32}, args, 2, nullptr);
    req->wait();
    const Slot& s = req->slot();
    if (color < 0) return nullptr;
    return std::make_unique<FakeComm>(s.split_groups[size_t(rank_)], s.split_ranks[size_t(rank_)],
                                      name, timeout());
}

}  // namespace

void run_fake_world(int n, const std::function<void(Communicator& world)>& body) {
    ETE_CHECK(n >= 1 && n <= kMaxFakeRanks, "run_fake_world: {} ranks (expected 1..{})", n,
              kMaxFakeRanks);
    auto world = std::make_shared<FakeWorld>(n);
    std::vector<int> ranks(static_cast<size_t>(n));
    std::iota(ranks.begin(), ranks.end(), 0);
    auto group = std::make_shared<FakeGroup>(world, std::move(ranks));

    std::mutex first_mu;
    std::exception_ptr first;  // the first exception in time; later ones are usually "aborted"
    auto rank_main = [&](int r) {
        try {
            FakeComm comm(group, r, "world", kFakeDefaultTimeout);
            body(comm);
        } catch (...) {
            {
                std::lock_guard lock(first_mu);
                if (!first) first = std::current_exception();
            }
            std::lock_guard lock(world->mu);
            world->aborted = true;
        }
        {
            std::lock_guard lock(world->mu);
            world->exited[size_t(r)] = true;
        }
        world->cv.notify_all();
    };
    std::vector<std::thread> threads;
    threads.reserve(size_t(n));
    for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
    for (auto& t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

}  // namespace ete
