// ete/parallel/nccl/nccl_comm.cpp — the NCCL transport (nccl_comm.h), built with ETE_CUDA=ON.
//
// Every operation is enqueued on the communicator's one CUDA stream and followed by a cudaEvent;
// a request waits by polling that event and ncclCommGetAsyncError against the timeout, and on a
// timeout or an asynchronous NCCL error the communicator is aborted (ncclCommAbort) so no kernel
// keeps spinning on a peer that will not come. Blocking calls are the non-blocking call plus
// wait(), so they also wait on the host.
//
// isend/irecv are collected into one batch that is issued inside ncclGroupStart/End when a
// request of it is waited for or tested, or before the next collective: a ring of "isend right,
// irecv left, wait_all" is then one NCCL group and cannot deadlock. One thread at a time may use
// a communicator (NCCL's rule).
#include "ete/parallel/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "ete/parallel/comm_util.h"

namespace ete {
namespace {

void cuda_check(cudaError_t e, const std::string& where, const char* fn, const char* file,
                int line) {
    if (e == cudaSuccess) return;
    throw Error(
        fmt::format("{}: {} failed: {} ({}:{})", where, fn, cudaGetErrorString(e), file, line));
}
void nccl_check(ncclResult_t r, const std::string& where, const char* fn, const char* file,
                int line) {
    if (r == ncclSuccess) return;
    throw Error(
        fmt::format("{}: {} failed: {} ({}:{})", where, fn, ncclGetErrorString(r), file, line));
}
// ETE_CUDA_CALL / ETE_NCCL_CALL(where, fn, args...): call and check, naming fn and file:line.
#define ETE_CUDA_CALL(where, fn, ...) cuda_check(fn(__VA_ARGS__), (where), #fn, __FILE__, __LINE__)
#define ETE_NCCL_CALL(where, fn, ...) nccl_check(fn(__VA_ARGS__), (where), #fn, __FILE__, __LINE__)

// Reductions need NCCL's element type; I16/U16/F16/BOOL are not reduced (see comm_util.h).
bool nccl_reduce_type(DType t, ncclDataType_t* out) {
    switch (t) {
        case DType::F32:
            *out = ncclFloat32;
            return true;
        case DType::F64:
            *out = ncclFloat64;
            return true;
        case DType::BF16:
            *out = ncclBfloat16;
            return true;
        case DType::I8:
            *out = ncclInt8;
            return true;
        case DType::U8:
            *out = ncclUint8;
            return true;
        case DType::I32:
            *out = ncclInt32;
            return true;
        case DType::U32:
            *out = ncclUint32;
            return true;
        case DType::I64:
            *out = ncclInt64;
            return true;
        case DType::U64:
            *out = ncclUint64;
            return true;
        default:
            return false;
    }
}

ncclRedOp_t nccl_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::Sum:
            return ncclSum;
        case ReduceOp::Max:
            return ncclMax;
        case ReduceOp::Min:
            return ncclMin;
    }
    return ncclSum;
}

struct P2pOp {
    bool send;
    void* buf;
    size_t bytes;
    int peer;
};

// isend/irecv not yet issued; `event` is recorded once the batch went out as one NCCL group.
struct P2pBatch {
    std::vector<P2pOp> ops;
    cudaEvent_t event = nullptr;
    ~P2pBatch() {
        if (event) cudaEventDestroy(event);
    }
};

// What a communicator and its requests share (requests may outlive the communicator object).
struct NcclState {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int device = 0;
    bool aborted = false;
    std::shared_ptr<P2pBatch> open_batch;

    ~NcclState() {
        cudaSetDevice(device);
        if (comm && !aborted) ncclCommDestroy(comm);
        if (stream) cudaStreamDestroy(stream);
    }

    // Issues the open p2p batch as one NCCL group, in post order.
    void flush(const std::string& where) {
        if (!open_batch) return;
        std::shared_ptr<P2pBatch> b = std::move(open_batch);
        open_batch = nullptr;
        ETE_CUDA_CALL(where, cudaSetDevice, device);
        ETE_NCCL_CALL(where, ncclGroupStart);
        for (const P2pOp& op : b->ops) {
            if (op.send) {
                ETE_NCCL_CALL(where, ncclSend, op.buf, op.bytes, ncclUint8, op.peer, comm, stream);
            } else {
                ETE_NCCL_CALL(where, ncclRecv, op.buf, op.bytes, ncclUint8, op.peer, comm, stream);
            }
        }
        ETE_NCCL_CALL(where, ncclGroupEnd);
        ETE_CUDA_CALL(where, cudaEventCreateWithFlags, &b->event, cudaEventDisableTiming);
        ETE_CUDA_CALL(where, cudaEventRecord, b->event, stream);
    }
};

class NcclRequest final : public CommRequest {
  public:
    NcclRequest(std::shared_ptr<NcclState> state, std::shared_ptr<P2pBatch> batch,
                std::string where, double timeout)
        : state_(std::move(state)),
          batch_(std::move(batch)),
          where_(std::move(where)),
          timeout_(timeout),
          uncaught_(std::uncaught_exceptions()) {}

    ~NcclRequest() override {
        if (done_ || state_->aborted || std::uncaught_exceptions() != uncaught_) return;
        try {
            wait();
        } catch (...) {
        }
    }

    bool test() override {
        if (done_) return true;
        if (state_->aborted) throw Error(where_ + ": the communicator was aborted");
        if (!batch_->event) state_->flush(where_);
        const cudaError_t e = cudaEventQuery(batch_->event);
        if (e == cudaSuccess) return done_ = true;
        if (e != cudaErrorNotReady) cuda_check(e, where_, "cudaEventQuery", __FILE__, __LINE__);
        ncclResult_t async = ncclSuccess;
        ETE_NCCL_CALL(where_, ncclCommGetAsyncError, state_->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            abort_comm();
            throw Error(fmt::format("{}: NCCL failed: {}", where_, ncclGetErrorString(async)));
        }
        return false;
    }

    void wait() override {
        const comm::Deadline deadline(timeout_);
        comm::PollBackoff backoff;
        while (!test()) {
            if (deadline.passed()) {
                abort_comm();
                throw Error(comm::timeout_message(where_, timeout_));
            }
            backoff.pause();
        }
    }

  private:
    // The kernels of a lost peer would spin forever; abort frees them and the communicator.
    void abort_comm() {
        if (state_->aborted) return;
        state_->aborted = true;
        ncclCommAbort(state_->comm);
    }

    std::shared_ptr<NcclState> state_;
    std::shared_ptr<P2pBatch> batch_;
    std::string where_;
    double timeout_;
    int uncaught_;
    bool done_ = false;
};

struct DeviceFree {
    void operator()(int32_t* p) const { cudaFree(p); }
};
using DeviceWords = std::unique_ptr<int32_t, DeviceFree>;

class NcclComm final : public Communicator {
  public:
    NcclComm(std::shared_ptr<NcclState> state, DeviceWords scratch, std::string name,
             std::vector<int> world_ranks, int rank, double timeout)
        : state_(std::move(state)),
          scratch_(std::move(scratch)),
          name_(std::move(name)),
          world_ranks_(std::move(world_ranks)),
          rank_(rank),
          timeout_(timeout) {}

    int rank() const override { return rank_; }
    int size() const override { return int(world_ranks_.size()); }
    const std::string& name() const override { return name_; }
    const std::vector<int>& world_ranks() const override { return world_ranks_; }
    std::string transport() const override { return "nccl"; }
    void set_timeout(double seconds) override {
        comm::check_timeout(*this, seconds);
        timeout_ = seconds;
    }
    double timeout() const override { return timeout_; }

    Request iall_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
        const std::string w = begin("all_reduce");
        const ncclDataType_t t = reduce_type("all_reduce", dtype);
        ETE_NCCL_CALL(w, ncclAllReduce, buf, buf, count, t, nccl_op(op), state_->comm,
                      state_->stream);
        return finish(w);
    }
    Request ireduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                            ReduceOp op) override {
        const std::string w = begin("reduce_scatter");
        const ncclDataType_t t = reduce_type("reduce_scatter", dtype);
        ETE_NCCL_CALL(w, ncclReduceScatter, send, recv, recv_count, t, nccl_op(op), state_->comm,
                      state_->stream);
        return finish(w);
    }
    Request ireduce(void* buf, size_t count, DType dtype, ReduceOp op, int root) override {
        comm::check_root("reduce", *this, root);
        const std::string w = begin("reduce");
        const ncclDataType_t t = reduce_type("reduce", dtype);
        ETE_NCCL_CALL(w, ncclReduce, buf, buf, count, t, nccl_op(op), root, state_->comm,
                      state_->stream);
        return finish(w);
    }
    // In place (send == recv + rank·send_count) is NCCL's own in-place all-gather.
    Request iall_gather(const void* send, void* recv, size_t send_count, DType dtype) override {
        const std::string w = begin("all_gather");
        ETE_NCCL_CALL(w, ncclAllGather, send, recv, send_count * dtype_size(dtype), ncclUint8,
                      state_->comm, state_->stream);
        return finish(w);
    }
    Request ibroadcast(void* buf, size_t count, DType dtype, int root) override {
        comm::check_root("broadcast", *this, root);
        const std::string w = begin("broadcast");
        ETE_NCCL_CALL(w, ncclBroadcast, buf, buf, count * dtype_size(dtype), ncclUint8, root,
                      state_->comm, state_->stream);
        return finish(w);
    }
    // NCCL has no barrier: an all-reduce of one word is one.
    void barrier() override {
        const std::string w = begin("barrier");
        ETE_NCCL_CALL(w, ncclAllReduce, scratch_.get(), scratch_.get(), 1, ncclInt32, ncclSum,
                      state_->comm, state_->stream);
        finish(w)->wait();
    }

    Request isend(const void* buf, size_t count, DType dtype, int peer, int tag) override {
        return post(true, const_cast<void*>(buf), count, dtype, peer, tag);
    }
    Request irecv(void* buf, size_t count, DType dtype, int peer, int tag) override {
        return post(false, buf, count, dtype, peer, tag);
    }

    std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  private:
    // Checks the communicator is alive, makes its device current and issues pending p2p first
    // (NCCL orders operations on the stream as they are enqueued).
    std::string begin(std::string_view op) {
        std::string w = comm::where(op, *this);
        ETE_CHECK(!state_->aborted, "{}: the communicator was aborted after an earlier failure", w);
        state_->flush(w);
        ETE_CUDA_CALL(w, cudaSetDevice, state_->device);
        return w;
    }
    ncclDataType_t reduce_type(std::string_view op, DType dtype) const {
        comm::check_reducible(op, *this, dtype);
        ncclDataType_t t;
        ETE_CHECK(nccl_reduce_type(dtype, &t), "{}: NCCL cannot reduce {}", comm::where(op, *this),
                  dtype_name(dtype));
        return t;
    }
    Request finish(const std::string& where) {
        auto b = std::make_shared<P2pBatch>();  // an empty batch: just the completion event
        ETE_CUDA_CALL(where, cudaEventCreateWithFlags, &b->event, cudaEventDisableTiming);
        ETE_CUDA_CALL(where, cudaEventRecord, b->event, state_->stream);
        return std::make_unique<NcclRequest>(state_, std::move(b), where, timeout_);
    }
    // NCCL has no tags: per peer, sends and receives match in posting order, which is what
    // the contract promises for one tag. Different tags are not reordered.
    Request post(bool is_send, void* buf, size_t count, DType dtype, int peer, int tag) {
        const std::string_view op = is_send ? "send" : "recv";
        comm::check_peer(op, *this, peer);
        comm::check_tag(op, *this, tag);
        std::string w = comm::where(op, *this);
        ETE_CHECK(!state_->aborted, "{}: the communicator was aborted after an earlier failure", w);
        if (!state_->open_batch) state_->open_batch = std::make_shared<P2pBatch>();
        state_->open_batch->ops.push_back({is_send, buf, count * dtype_size(dtype), peer});
        return std::make_unique<NcclRequest>(state_, state_->open_batch, std::move(w), timeout_);
    }

    std::shared_ptr<NcclState> state_;
    DeviceWords scratch_;  // 2·size() device words for barrier() and split()
    std::string name_;
    std::vector<int> world_ranks_;
    int rank_;
    double timeout_;
};

std::shared_ptr<NcclState> new_state(ncclComm_t comm, int device, const std::string& where) {
    auto s = std::make_shared<NcclState>();
    s->comm = comm;
    s->device = device;
    ETE_CUDA_CALL(where, cudaStreamCreateWithFlags, &s->stream, cudaStreamNonBlocking);
    return s;
}

std::unique_ptr<NcclComm> make_comm(std::shared_ptr<NcclState> state, std::string name,
                                    std::vector<int> world_ranks, int rank, double timeout,
                                    const std::string& where) {
    const size_t bytes = 2 * world_ranks.size() * sizeof(int32_t);
    int32_t* p = nullptr;
    ETE_CUDA_CALL(where, cudaMalloc, reinterpret_cast<void**>(&p), bytes);
    DeviceWords scratch(p);
    ETE_CUDA_CALL(where, cudaMemset, p, 0, bytes);
    return std::make_unique<NcclComm>(std::move(state), std::move(scratch), std::move(name),
                                      std::move(world_ranks), rank, timeout);
}

std::unique_ptr<Communicator> NcclComm::split(int color, int key, const std::string& name) {
    // (color, key) of every rank, gathered in place on the device, give the new world ranks.
    const std::string w = begin("split");
    const int n = size();
    const int32_t mine[2] = {color, key};
    int32_t* dev = scratch_.get();
    ETE_CUDA_CALL(w, cudaMemcpy, dev + 2 * rank_, mine, sizeof mine, cudaMemcpyHostToDevice);
    ETE_NCCL_CALL(w, ncclAllGather, dev + 2 * rank_, dev, 2, ncclInt32, state_->comm,
                  state_->stream);
    finish(w)->wait();
    std::vector<int32_t> all(2 * size_t(n));
    ETE_CUDA_CALL(w, cudaMemcpy, all.data(), dev, all.size() * sizeof(int32_t),
                  cudaMemcpyDeviceToHost);

    ncclComm_t out = nullptr;
    ETE_NCCL_CALL(w, ncclCommSplit, state_->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out,
                  nullptr);
    if (color < 0) return nullptr;
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (int r = 0; r < n; ++r) {
        if (all[2 * size_t(r)] == color) members.push_back({all[2 * size_t(r) + 1], r});
    }
    std::sort(members.begin(), members.end());
    std::vector<int> world_ranks;
    int new_rank = -1;
    for (auto [k, r] : members) {
        if (r == rank_) new_rank = int(world_ranks.size());
        world_ranks.push_back(world_ranks_[size_t(r)]);
    }
    int nccl_rank = -1;
    ETE_NCCL_CALL(w, ncclCommUserRank, out, &nccl_rank);
    ETE_ASSERT(nccl_rank == new_rank);
    return make_comm(new_state(out, state_->device, w), name, std::move(world_ranks), new_rank,
                     timeout_, w);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
    const std::string w = comm::where("make_nccl_communicator", bootstrap);
    ETE_CUDA_CALL(w, cudaSetDevice, device);
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) ETE_NCCL_CALL(w, ncclGetUniqueId, &id);
    bootstrap.broadcast(&id, sizeof id, DType::U8, 0);
    ncclComm_t comm = nullptr;
    ETE_NCCL_CALL(w, ncclCommInitRank, &comm, bootstrap.size(), id, bootstrap.rank());
    return make_comm(new_state(comm, device, w), bootstrap.name(), bootstrap.world_ranks(),
                     bootstrap.rank(), bootstrap.timeout(), w);
}

}  // namespace ete
