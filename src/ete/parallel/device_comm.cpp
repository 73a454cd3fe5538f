// ete/parallel/device_comm.cpp
#include "ete/parallel/device_comm.h"

#include <exception>
#include <functional>
#include <vector>

#include "ete/core/dtype.h"

namespace ete {
namespace {

using HostBytes = std::shared_ptr<std::vector<char>>;

// The inner request, then (once) the upload of what it received. The staging bytes live as long
// as the request.
class StagedRequest final : public CommRequest {
  public:
    StagedRequest(Request inner, HostBytes host, std::function<void()> on_done)
        : inner_(std::move(inner)), host_(std::move(host)), on_done_(std::move(on_done)) {}
    ~StagedRequest() override {
        // Like every request: destroying an unfinished one waits for it, unless an exception is
        // unwinding (then the inner request abandons the transfer and nothing is uploaded).
        if (done_ || std::uncaught_exceptions() > 0) return;
        try {
            wait();
        } catch (...) {
        }
    }
    void wait() override {
        if (done_) return;
        inner_->wait();
        finish();
    }
    bool test() override {
        if (done_) return true;
        if (!inner_->test()) return false;
        finish();
        return true;
    }

  private:
    void finish() {
        done_ = true;
        if (on_done_) on_done_();
    }
    Request inner_;
    HostBytes host_;
    std::function<void()> on_done_;
    bool done_ = false;
};

class DeviceCommunicator final : public Communicator {
  public:
    DeviceCommunicator(Communicator& inner, DeviceMemory& mem,
                       std::unique_ptr<Communicator> owned = nullptr)
        : inner_(inner), mem_(mem), owned_(std::move(owned)), direct_(mem.host_addressable()) {}

    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    const std::string& name() const override { return inner_.name(); }
    const std::vector<int>& world_ranks() const override { return inner_.world_ranks(); }
    std::string transport() const override { return inner_.transport(); }
    void set_timeout(double s) override { inner_.set_timeout(s); }
    double timeout() const override { return inner_.timeout(); }
    void barrier() override { inner_.barrier(); }

    // Blocking calls go to the inner transport's own blocking form when nothing is staged, so a
    // wrapper underneath (TimedCommunicator) still sees them as blocking.
    void all_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
        if (direct_) return inner_.all_reduce(buf, count, t, op);
        iall_reduce(buf, count, t, op)->wait();
    }
    void reduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
        if (direct_) return inner_.reduce_scatter(send, recv, n, t, op);
        ireduce_scatter(send, recv, n, t, op)->wait();
    }
    void reduce(void* buf, size_t count, DType t, ReduceOp op, int root) override {
        if (direct_) return inner_.reduce(buf, count, t, op, root);
        ireduce(buf, count, t, op, root)->wait();
    }
    void all_gather(const void* send, void* recv, size_t n, DType t) override {
        if (direct_) return inner_.all_gather(send, recv, n, t);
        iall_gather(send, recv, n, t)->wait();
    }
    void broadcast(void* buf, size_t count, DType t, int root) override {
        if (direct_) return inner_.broadcast(buf, count, t, root);
        ibroadcast(buf, count, t, root)->wait();
    }
    void send(const void* buf, size_t count, DType t, int peer, int tag) override {
        if (direct_) return inner_.send(buf, count, t, peer, tag);
        isend(buf, count, t, peer, tag)->wait();
    }
    void recv(void* buf, size_t count, DType t, int peer, int tag) override {
        if (direct_) return inner_.recv(buf, count, t, peer, tag);
        irecv(buf, count, t, peer, tag)->wait();
    }

    Request iall_reduce(void* buf, size_t count, DType t, ReduceOp op) override {
        if (direct_) return inner_.iall_reduce(buf, count, t, op);
        const size_t bytes = count * dtype_size(t);
        HostBytes h = download(buf, bytes);
        return staged(inner_.iall_reduce(h->data(), count, t, op), h, buf, 0, bytes);
    }
    Request ireduce_scatter(const void* send, void* recv, size_t n, DType t, ReduceOp op) override {
        if (direct_) return inner_.ireduce_scatter(send, recv, n, t, op);
        const size_t out = n * dtype_size(t), in = out * size_t(size());
        HostBytes h = download(send, in, out);  // [send | recv]
        return staged(inner_.ireduce_scatter(h->data(), h->data() + in, n, t, op), h, recv, in,
                      out);
    }
    Request ireduce(void* buf, size_t count, DType t, ReduceOp op, int root) override {
        if (direct_) return inner_.ireduce(buf, count, t, op, root);
        const size_t bytes = count * dtype_size(t);
        HostBytes h = download(buf, bytes);
        return staged(inner_.ireduce(h->data(), count, t, op, root), h, buf, 0, bytes);
    }
    // In place stays in place: the staged copy holds [send | recv] apart, and the upload of the
    // gathered recv rewrites this rank's own block with the same bytes.
    Request iall_gather(const void* send, void* recv, size_t n, DType t) override {
        if (direct_) return inner_.iall_gather(send, recv, n, t);
        const size_t in = n * dtype_size(t), out = in * size_t(size());
        HostBytes h = download(send, in, out);
        return staged(inner_.iall_gather(h->data(), h->data() + in, n, t), h, recv, in, out);
    }
    Request ibroadcast(void* buf, size_t count, DType t, int root) override {
        if (direct_) return inner_.ibroadcast(buf, count, t, root);
        const size_t bytes = count * dtype_size(t);
        HostBytes h = download(buf, bytes);
        return staged(inner_.ibroadcast(h->data(), count, t, root), h, buf, 0, bytes);
    }
    Request isend(const void* buf, size_t count, DType t, int peer, int tag) override {
        if (direct_) return inner_.isend(buf, count, t, peer, tag);
        HostBytes h = download(buf, count * dtype_size(t));
        return std::make_unique<StagedRequest>(inner_.isend(h->data(), count, t, peer, tag), h,
                                               nullptr);
    }
    Request irecv(void* buf, size_t count, DType t, int peer, int tag) override {
        if (direct_) return inner_.irecv(buf, count, t, peer, tag);
        const size_t bytes = count * dtype_size(t);
        auto h = std::make_shared<std::vector<char>>(bytes);
        return staged(inner_.irecv(h->data(), count, t, peer, tag), h, buf, 0, bytes);
    }
    std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
        std::unique_ptr<Communicator> part = inner_.split(color, key, name);
        if (!part) return nullptr;
        Communicator& ref = *part;
        return std::make_unique<DeviceCommunicator>(ref, mem_, std::move(part));
    }

  private:
    // A host buffer of in + extra bytes holding the first `in` bytes of src.
    HostBytes download(const void* src, size_t in, size_t extra = 0) {
        auto h = std::make_shared<std::vector<char>>(in + extra);
        if (in) mem_.download(h->data(), src, in);
        return h;
    }
    // The inner request, then host bytes [offset, offset + bytes) uploaded to dst.
    Request staged(Request inner, HostBytes h, void* dst, size_t offset, size_t bytes) {
        DeviceMemory& mem = mem_;
        char* src = h->data() + offset;
        return std::make_unique<StagedRequest>(std::move(inner), h, [&mem, dst, src, bytes] {
            if (bytes) mem.upload(dst, src, bytes);
        });
    }

    Communicator& inner_;
    DeviceMemory& mem_;
    std::unique_ptr<Communicator> owned_;
    bool direct_;
};

}  // namespace

std::unique_ptr<Communicator> device_communicator(Communicator& inner, DeviceMemory& mem) {
    return std::make_unique<DeviceCommunicator>(inner, mem);
}

std::unique_ptr<Communicator> device_communicator(std::unique_ptr<Communicator> inner,
                                                  DeviceMemory& mem) {
    Communicator& ref = *inner;
    return std::make_unique<DeviceCommunicator>(ref, mem, std::move(inner));
}

}  // namespace ete
