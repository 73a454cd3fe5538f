// ete/parallel/self_comm.cpp — the single-rank communicator: collectives are copies or no-ops
// (argument checks still run, so code that is wrong on a group of one fails here too); messages to
// self are buffered and matched by tag, and another thread of the process may send them.
#include "ete/parallel/self_comm.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>

#include "ete/parallel/comm_util.h"

namespace ete {
namespace {

// The buffered messages; shared with receive requests, which may outlive the communicator.
struct SelfBox {
    std::mutex mu;
    std::condition_variable cv;
    comm::Mailbox box;
};

class SelfRecvRequest final : public CommRequest {
  public:
    SelfRecvRequest(std::shared_ptr<SelfBox> box, std::shared_ptr<comm::Mailbox::Recv> recv,
                    std::string where, double timeout)
        : box_(std::move(box)),
          recv_(std::move(recv)),
          where_(std::move(where)),
          timeout_(timeout),
          uncaught_(std::uncaught_exceptions()) {}

    ~SelfRecvRequest() override {
        // Waits unless an exception is unwinding past it; never lets the buffer be written later.
        try {
            if (std::uncaught_exceptions() == uncaught_) wait();
        } catch (...) {
        }
        std::lock_guard lock(box_->mu);
        if (!recv_->done) box_->box.cancel(*recv_);
    }

    bool test() override {
        std::lock_guard lock(box_->mu);
        return finished();
    }

    void wait() override {
        comm::Deadline deadline(timeout_);
        std::unique_lock lock(box_->mu);
        while (!finished()) {
            if (deadline.forever()) {
                box_->cv.wait(lock);
            } else if (box_->cv.wait_until(lock, deadline.at()) == std::cv_status::timeout &&
                       !finished()) {
                throw Error(comm::timeout_message(where_, timeout_));
            }
        }
    }

  private:
    bool finished() {
        box_->box.progress(*recv_);
        if (recv_->done && !recv_->error.empty()) throw Error(where_ + ": " + recv_->error);
        return recv_->done;
    }

    std::shared_ptr<SelfBox> box_;
    std::shared_ptr<comm::Mailbox::Recv> recv_;
    std::string where_;
    double timeout_;
    int uncaught_;
};

class SelfComm final : public Communicator {
  public:
    explicit SelfComm(std::string name, double timeout)
        : name_(std::move(name)), timeout_(timeout), box_(std::make_shared<SelfBox>()) {}

    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    const std::vector<int>& world_ranks() const override { return world_ranks_; }
    std::string transport() const override { return "self"; }
    void set_timeout(double seconds) override {
        comm::check_timeout(*this, seconds);
        timeout_ = seconds;
    }
    double timeout() const override { return timeout_; }

    void all_reduce(void*, size_t, DType dtype, ReduceOp) override {
        comm::check_reducible("all_reduce", *this, dtype);
    }
    Request iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
        all_reduce(buf, count, dtype, op);
        return comm::done_request();
    }
    void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                        ReduceOp) override {
        comm::check_reducible("reduce_scatter", *this, dtype);
        copy(recv, send, recv_count, dtype);
    }
    Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                            ReduceOp op) override {
        reduce_scatter(send, recv, recv_count, dtype, op);
        return comm::done_request();
    }
    void all_gather(const void* send, void* recv, size_t send_count, DType dtype) override {
        copy(recv, send, send_count, dtype);
    }
    Request iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override {
        all_gather(send, recv, send_count, dtype);
        return comm::done_request();
    }
    Request ibroadcast(void*, size_t, DType, int root) override {
        comm::check_root("broadcast", *this, root);
        return comm::done_request();
    }

    void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        isend(buf, count, dtype, peer, tag);
    }
    Request isend(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        comm::check_peer("send", *this, peer);
        comm::check_tag("send", *this, tag);
        {
            std::lock_guard lock(box_->mu);
            box_->box.deliver(0, tag, buf, count, dtype);
        }
        box_->cv.notify_all();
        return comm::done_request();
    }
    Request irecv(void* buf, size_t count, DType dtype, int peer, int tag) override {
        comm::check_peer("recv", *this, peer);
        comm::check_tag("recv", *this, tag);
        auto r = std::make_shared<comm::Mailbox::Recv>(buf, count, dtype, peer, tag);
        {
            std::lock_guard lock(box_->mu);
            box_->box.post(r);
        }
        return std::make_unique<SelfRecvRequest>(box_, std::move(r), comm::where("recv", *this),
                                                 timeout_.load());
    }

    void barrier() override {}

    std::unique_ptr<Communicator> split(int color, int, const std::string& name) override {
        if (color < 0) return nullptr;
        return std::make_unique<SelfComm>(name, timeout_);
    }

  private:
    static void copy(void* dst, const void* src, size_t count, DType dtype) {
        if (count > 0 && dst != src) std::memmove(dst, src, count * dtype_size(dtype));
    }

    std::string name_;
    std::vector<int> world_ranks_{0};
    std::atomic<double> timeout_;
    std::shared_ptr<SelfBox> box_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() {
    return std::make_unique<SelfComm>("world", 0.0);
}

}  // namespace ete
