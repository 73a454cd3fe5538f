// ete/parallel/timed_comm.h — a Communicator that forwards to another and adds up the wall time
// its blocking calls take (for the step metrics: how long tensor-parallel all-reduces hold up
// compute). Non-blocking calls are forwarded untimed; split() returns the inner group's split.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ete/parallel/communicator.h"

namespace ete {

class TimedCommunicator : public Communicator {
  public:
    explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}

    double seconds() const { return seconds_; }  // since construction or the last reset()
    int64_t calls() const { return calls_; }
    void reset() { seconds_ = 0, calls_ = 0; }

    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    const std::string& name() const override { return inner_.name(); }
    const std::vector<int>& world_ranks() const override { return inner_.world_ranks(); }
    std::string transport() const override { return inner_.transport(); }
    void set_timeout(double s) override { inner_.set_timeout(s); }
    double timeout() const override { return inner_.timeout(); }

    void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
        timed([&] { inner_.all_reduce(buf, count, dtype, op); });
    }
    Request iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
        return inner_.iall_reduce(buf, count, dtype, op);
    }
    void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
        timed([&] { inner_.reduce_scatter(send, recv, n, t, op); });
    }
    Request ireduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
        return inner_.ireduce_scatter(send, recv, n, t, op);
    }
    void reduce(void* buf, size_t count, DType dtype, ReduceOp op, int root) override {
        timed([&] { inner_.reduce(buf, count, dtype, op, root); });
    }
    Request ireduce(void* buf, size_t count, DType dtype, ReduceOp op, int root) override {
        return inner_.ireduce(buf, count, dtype, op, root);
    }
    void all_gather(const void* send, void* recv, size_t n, DType t) override {
        timed([&] { inner_.all_gather(send, recv, n, t); });
    }
    Request iall_gather(const void* send, void* recv, size_t n, DType t) override {
        return inner_.iall_gather(send, recv, n, t);
    }
    void broadcast(void* buf, size_t count, DType dtype, int root) override {
        timed([&] { inner_.broadcast(buf, count, dtype, root); });
    }
    Request ibroadcast(void* buf, size_t count, DType dtype, int root) override {
        return inner_.ibroadcast(buf, count, dtype, root);
    }
    void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        timed([&] { inner_.send(buf, count, dtype, peer, tag); });
    }
    void recv(void* buf, size_t count, DType dtype, int peer, int tag) override {
        timed([&] { inner_.recv(buf, count, dtype, peer, tag); });
    }
    Request isend(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        return inner_.isend(buf, count, dtype, peer, tag);
    }
    Request irecv(void* buf, size_t count, DType dtype, int peer, int tag) override {
        return inner_.irecv(buf, count, dtype, peer, tag);
    }
    void barrier() override {
        timed([&] { inner_.barrier(); });
    }
    std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
        return inner_.split(color, key, name);
    }

  private:
    template <typename F>
    void timed(F&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++calls_;
    }

    Communicator& inner_;
    double seconds_ = 0;
    int64_t calls_ = 0;
};

}  // namespace ete
