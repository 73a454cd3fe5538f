// tests/parallel/pp_executor_test.cpp — the 1F1B executor on the in-process fake world: a toy
// pipelined model gives the same outputs, input gradients and weight gradients as running it
// sequentially, for p = 1..4 and m = 1, 3, 8, with the smallest buffer rings pp_executor.h allows;
// receives are posted one compute ahead and waited for just before their consumer; sends are
// waited for before their buffer is rewritten; argument errors name what is wrong.
//
// The transport is wrapped in StrictComm, which makes misuse visible on the eager fake: a
// receive's buffer is poisoned (NaN) when it is posted and filled only when it is waited for, and
// a send fails the test if its buffer changed before it was waited for.
#include "ete/parallel/pp_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>

#include "ete/parallel/fake_comm.h"
#include "test_util.h"

namespace ete {
namespace {

// "a3" / "g3": the activation or gradient message of micro-batch 3 (tags below kMaxTag here).
std::string tag_name(int tag) {
    return (tag % 2 ? "g" : "a") + std::to_string(tag / 2);
}

class StrictRecv final : public CommRequest {
  public:
    StrictRecv(Request inner, std::vector<float> staging, float* buf, std::string name,
               std::vector<std::string>* log)
        : inner_(std::move(inner)),
          staging_(std::move(staging)),
          buf_(buf),
          name_(std::move(name)),
          log_(log) {}
    void wait() override {
        inner_->wait();
        if (done_) return;
        done_ = true;
        std::memcpy(buf_, staging_.data(), staging_.size() * sizeof(float));
        if (log_) log_->push_back("wait " + name_);
    }
    bool test() override {
        if (!inner_->test()) return false;
        wait();
        return true;
    }

  private:
    Request inner_;
    std::vector<float> staging_;
    float* buf_;
    std::string name_;
    std::vector<std::string>* log_;
    bool done_ = false;
};

class StrictSend final : public CommRequest {
  public:
    StrictSend(Request inner, const float* buf, size_t count, std::string name,
               std::vector<std::string>* log)
        : inner_(std::move(inner)),
          buf_(buf),
          snapshot_(buf, buf + count),
          name_(std::move(name)),
          log_(log) {}
    ~StrictSend() override {
        if (!done_) ADD_FAILURE() << "send " << name_ << " was never waited for";
    }
    void wait() override {
        inner_->wait();
        if (done_) return;
        done_ = true;
        EXPECT_EQ(std::memcmp(buf_, snapshot_.data(), snapshot_.size() * sizeof(float)), 0)
            << "the buffer of send " << name_ << " changed while the send was in flight";
        if (log_) log_->push_back("sent " + name_);
    }
    bool test() override {
        wait();  // the fake's sends are eager
        return true;
    }

  private:
    Request inner_;
    const float* buf_;
    std::vector<float> snapshot_;
    std::string name_;
    std::vector<std::string>* log_;
    bool done_ = false;
};

// Forwards everything to `inner`; F32 point-to-point goes through StrictRecv/StrictSend.
class StrictComm final : public Communicator {
  public:
    StrictComm(Communicator& inner, std::vector<std::string>* log) : in_(inner), log_(log) {}
    int rank() const override { return in_.rank(); }
    int size() const override { return in_.size(); }
    const std::string& name() const override { return in_.name(); }
    const std::vector<int>& world_ranks() const override { return in_.world_ranks(); }
    std::string transport() const override { return "strict+" + in_.transport(); }
    void set_timeout(double s) override { in_.set_timeout(s); }
    double timeout() const override { return in_.timeout(); }
    void all_reduce(void* b, size_t n, DType t, ReduceOp op) override {
        in_.all_reduce(b, n, t, op);
    }
    Request iall_reduce(void* b, size_t n, DType t, ReduceOp op) override {
        return in_.iall_reduce(b, n, t, op);
    }
    void reduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
        in_.reduce_scatter(s, r, n, t, op);
    }
    Request ireduce_scatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
        return in_.ireduce_scatter(s, r, n, t, op);
    }
    void all_gather(const void* s, void* r, size_t n, DType t) override {
        in_.all_gather(s, r, n, t);
    }
    Request iall_gather(const void* s, void* r, size_t n, DType t) override {
        return in_.iall_gather(s, r, n, t);
    }
    void broadcast(void* b, size_t n, DType t, int root) override { in_.broadcast(b, n, t, root); }
    Request ibroadcast(void* b, size_t n, DType t, int root) override {
        return in_.ibroadcast(b, n, t, root);
    }
    void send(const void* b, size_t n, DType t, int peer, int tag) override {
        isend(b, n, t, peer, tag)->wait();
    }
    void recv(void* b, size_t n, DType t, int peer, int tag) override {
        irecv(b, n, t, peer, tag)->wait();
    }
    Request isend(const void* b, size_t n, DType t, int peer, int tag) override {
        EXPECT_EQ(t, DType::F32);
        if (log_) log_->push_back("send " + tag_name(tag));
        return std::make_unique<StrictSend>(in_.isend(b, n, t, peer, tag),
                                            static_cast<const float*>(b), n, tag_name(tag), log_);
    }
    Request irecv(void* b, size_t n, DType t, int peer, int tag) override {
        EXPECT_EQ(t, DType::F32);
        if (log_) log_->push_back("post " + tag_name(tag));
        float* buf = static_cast<float*>(b);
        std::fill(buf, buf + n, std::numeric_limits<float>::quiet_NaN());
        std::vector<float> staging(n);
        Request r = in_.irecv(staging.data(), n, t, peer, tag);  // vector data does not move
        return std::make_unique<StrictRecv>(std::move(r), std::move(staging), buf, tag_name(tag),
                                            log_);
    }
    void barrier() override { in_.barrier(); }
    std::unique_ptr<Communicator> split(int c, int k, const std::string& n) override {
        return in_.split(c, k, n);
    }

  private:
    Communicator& in_;
    std::vector<std::string>* log_;
};

// The toy model: stage s computes y = x·w_s + s elementwise (n floats); the last stage's loss is
// ½·Σy², so its d_y = y. Backward: d_x = d_y·w_s, d_w_s += Σ x·d_y (needs the saved input).
// The sequential reference and the stages call these same functions, so results match exactly.
constexpr float kWeights[] = {1.5f, 0.5f, 2.0f, 0.75f};

void toy_forward(int s, const float* x, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * kWeights[s] + float(s);
}
void toy_backward(int s, const float* x, const float* d_y, float* d_x, float* d_w, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        d_x[i] = d_y[i] * kWeights[s];
        *d_w += x[i] * d_y[i];
    }
}
std::vector<float> toy_input(int micro, size_t n) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(micro) + 0.25f * float(i);
    return x;
}

struct ToyResult {
    std::vector<std::vector<float>> y;    // per micro-batch: the last stage's output
    std::vector<std::vector<float>> d_x;  // per micro-batch: d of stage 0's input
    std::vector<float> d_w;               // per stage
};

ToyResult toy_sequential(int p, int m, size_t n) {
    ToyResult r{{}, {}, std::vector<float>(size_t(p), 0.0f)};
    for (int j = 0; j < m; ++j) {
        std::vector<std::vector<float>> xs(size_t(p) + 1);  // xs[s]: input of stage s
        xs[0] = toy_input(j, n);
        for (int s = 0; s < p; ++s) {
            xs[size_t(s) + 1].resize(n);
            toy_forward(s, xs[size_t(s)].data(), xs[size_t(s) + 1].data(), n);
        }
        std::vector<float> d = xs[size_t(p)], d_x(n);
        r.y.push_back(d);
        for (int s = p - 1; s >= 0; --s) {
            toy_backward(s, xs[size_t(s)].data(), d.data(), d_x.data(), &r.d_w[size_t(s)], n);
            d = d_x;
        }
        r.d_x.push_back(d);
    }
    return r;
}

// One stage of the toy model, with buffer rings of the given sizes (pp_executor.h: act_in needs
// max_in_flight + 1, grad_in 2, the send buffers 1).
struct ToyStage {
    ToyStage(int stage, int p, int m, size_t n, int act_in_ring, int grad_in_ring)
        : s(stage),
          last(stage == p - 1),
          n(n),
          act_in(size_t(act_in_ring), std::vector<float>(n)),
          grad_in(size_t(grad_in_ring), std::vector<float>(n)),
          act_out(n),
          grad_out(n),
          y(size_t(m), std::vector<float>(n)),
          d_x(size_t(m), std::vector<float>(n)) {
        for (int j = 0; j < m; ++j) inputs.push_back(toy_input(j, n));
    }
    float* input(int j) { return s == 0 ? inputs[size_t(j)].data() : ring(act_in, j); }
    static float* ring(std::vector<std::vector<float>>& r, int j) {
        return r[size_t(j) % r.size()].data();
    }

    PipeCallbacks callbacks(std::vector<std::string>* log) {
        PipeCallbacks cb;
        cb.forward = [this, log](int j) {
            if (log) log->push_back("F" + std::to_string(j));
            toy_forward(s, input(j), last ? y[size_t(j)].data() : act_out.data(), n);
        };
        cb.backward = [this, log](int j) {
            if (log) log->push_back("B" + std::to_string(j));
            const float* d_y = last ? y[size_t(j)].data() : ring(grad_in, j);
            toy_backward(s, input(j), d_y, s == 0 ? d_x[size_t(j)].data() : grad_out.data(), &d_w,
                         n);
        };
        cb.act_in = [this](int j) { return ring(act_in, j); };
        cb.grad_in = [this](int j) { return ring(grad_in, j); };
        cb.act_out = [this](int) { return act_out.data(); };
        cb.grad_out = [this](int) { return grad_out.data(); };
        cb.act_count = n;
        return cb;
    }

    int s;
    bool last;
    size_t n;
    std::vector<std::vector<float>> inputs, act_in, grad_in;
    std::vector<float> act_out, grad_out;
    std::vector<std::vector<float>> y, d_x;  // last stage's outputs; stage 0's input gradients
    float d_w = 0;
};

class PpExecutorToy : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PpExecutorToy, MatchesSequentialWithSmallestBufferRings) {
    const auto [p, m] = GetParam();
    constexpr size_t n = 7;
    const ToyResult want = toy_sequential(p, m, n);
    run_fake_world(p, [&, p = p, m = m](Communicator& world) {
        const int s = world.rank();
        ToyStage st(s, p, m, n, max_in_flight(s, p, m) + 1, 2);
        StrictComm pp(world, nullptr);
        const PipeStats stats = run_pipeline(schedule_1f1b(s, p, m), pp, s, p, st.callbacks({}));
        EXPECT_EQ(stats.forwards, m);
        EXPECT_EQ(stats.backwards, m);
        // Exact: the same float operations in the same order as the sequential reference.
        EXPECT_EQ(st.d_w, want.d_w[size_t(s)]) << "stage " << s;
        for (int j = 0; j < m; ++j) {
            if (s == p - 1) {
                EXPECT_EQ(st.y[size_t(j)], want.y[size_t(j)]) << "micro " << j;
            }
            if (s == 0) {
                EXPECT_EQ(st.d_x[size_t(j)], want.d_x[size_t(j)]) << "micro " << j;
            }
        }
    });
}

INSTANTIATE_TEST_SUITE_P(P1To4M138, PpExecutorToy,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(1, 3, 8)));

// The reference itself: output 2 of micro 1 through stages 0 and 1 (w = 1.5, 0.5; bias 0, 1).
TEST(PpExecutor, ToyReferenceByHand) {
    const ToyResult r = toy_sequential(2, 2, 3);
    const float x = 1.0f + 0.25f * 2;              // 1.5
    const float y = (x * 1.5f + 0.0f) * 0.5f + 1;  // 2.125
    EXPECT_EQ(r.y[1][2], y);
    EXPECT_EQ(r.d_x[1][2], y * 0.5f * 1.5f);  // d_y = y, through both weights
}

// Each stage's exact sequence of transfers and computes for p = 2, m = 3 (see pp_executor.h):
// receives posted before the compute preceding them, waited for just before their consumer; a
// send waited for just before the compute that rewrites its (single) buffer, the rest at the end.
TEST(PpExecutor, PostsReceivesOneComputeAheadAndWaitsSendsBeforeReuse) {
    std::vector<std::string> logs[2];
    run_fake_world(2, [&](Communicator& world) {
        const int s = world.rank();
        ToyStage st(s, 2, 3, 4, 3, 2);
        std::vector<std::string>& log = logs[s];
        StrictComm pp(world, &log);
        run_pipeline(schedule_1f1b(s, 2, 3), pp, s, 2, st.callbacks(&log));
    });
    auto joined = [](const std::vector<std::string>& v) {
        std::string out;
        for (const auto& e : v) out += (out.empty() ? "" : " ") + e;
        return out;
    };
    EXPECT_EQ(joined(logs[0]),
              "F0 send a0 post g0 sent a0 F1 send a1 wait g0 B0 post g1 sent a1 F2 send a2 "
              "post g2 wait g1 B1 wait g2 B2 sent a2");
    EXPECT_EQ(joined(logs[1]),
              "post a0 wait a0 F0 post a1 B0 send g0 wait a1 F1 post a2 sent g0 B1 send g1 "
              "wait a2 F2 sent g1 B2 send g2 sent g2");
}

// The strict harness does see a receive posted into a buffer still in use: with an act_in ring
// one smaller than pp_executor.h asks for, the last stage's next activation lands (poisoned) in
// the input that backward still reads.
TEST(PpExecutor, ActInRingOneTooSmallIsCaughtByTheHarness) {
    float last_d_w = 0;
    run_fake_world(2, [&](Communicator& world) {
        const int s = world.rank();
        ToyStage st(s, 2, 3, 4, max_in_flight(s, 2, 3), 2);
        StrictComm pp(world, nullptr);
        run_pipeline(schedule_1f1b(s, 2, 3), pp, s, 2, st.callbacks(nullptr));
        if (s == 1) last_d_w = st.d_w;
    });
    EXPECT_TRUE(std::isnan(last_d_w)) << last_d_w;
}

TEST(PpExecutor, PendingReceiveIntoTheSameBufferThrows) {
    // Stage 0, p = 2, m = 2: RecvGrad 1 is posted before RecvGrad 0 is waited for (cooldown).
    EXPECT_EQ(error_of([] {
                  run_fake_world(2, [](Communicator& world) {
                      const int s = world.rank();
                      ToyStage st(s, 2, 2, 4, 2, 1);
                      run_pipeline(schedule_1f1b(s, 2, 2), world, s, 2, st.callbacks(nullptr));
                  });
              }),
              "pp executor: stage 0: RecvGrad of micro-batch 1 lands in the buffer of micro-batch "
              "0, whose receive is still pending; give in-flight micro-batches distinct buffers");
}

TEST(PpExecutor, ArgumentErrorsNameTheProblem) {
    run_fake_world(2, [](Communicator& world) {
        const int s = world.rank();
        ToyStage st(s, 2, 2, 4, 3, 2);
        const auto actions = schedule_1f1b(s, 2, 2);
        EXPECT_EQ(error_of([&] { run_pipeline(actions, world, s, 3, st.callbacks(nullptr)); }),
                  "pp executor: the pp group world has 2 ranks, expected num_stages = 3");
        EXPECT_EQ(error_of([&] { run_pipeline(actions, world, 1 - s, 2, st.callbacks(nullptr)); }),
                  fmt::format("pp executor: stage {} runs on rank {} of the pp group world, "
                              "expected rank {}",
                              1 - s, s, 1 - s));
        PipeCallbacks cb = st.callbacks(nullptr);
        cb.act_count = 0;
        EXPECT_EQ(error_of([&] { run_pipeline(actions, world, s, 2, cb); }),
                  "pp executor: act_count (floats per activation message) must be > 0");
        cb = st.callbacks(nullptr);
        (s == 0 ? cb.grad_in : cb.act_in) = nullptr;
        EXPECT_EQ(error_of([&] { run_pipeline(actions, world, s, 2, cb); }),
                  s == 0 ? "pp executor: stage 0 needs the grad_in callback for RecvGrad"
                         : "pp executor: stage 1 needs the act_in callback for RecvAct");
        cb = st.callbacks(nullptr);
        cb.backward = nullptr;
        EXPECT_EQ(error_of([&] { run_pipeline(actions, world, s, 2, cb); }),
                  fmt::format("pp executor: stage {} needs the backward callback", s));
        // A transfer the stage has no peer for (the other end of the pipe's op).
        const std::vector<PipeAction> wrong = {{s == 0 ? PipeOp::RecvAct : PipeOp::SendAct, 0}};
        EXPECT_EQ(error_of([&] { run_pipeline(wrong, world, s, 2, st.callbacks(nullptr)); }),
                  s == 0 ? "pp executor: stage 0 of 2 has no peer for RecvAct of micro-batch 0"
                         : "pp executor: stage 1 of 2 has no peer for SendAct of micro-batch 0");
        EXPECT_EQ(
            error_of([&] {
                run_pipeline({{PipeOp::Forward, -1}}, world, s, 2, st.callbacks(nullptr));
            }),
            fmt::format("pp executor: stage {}: Forward of micro-batch -1, expected >= 0", s));
    });
}

TEST(PpExecutor, StatsAndMeasuredBubble) {
    PipeStats st;
    EXPECT_EQ(st.measured_bubble(), 0.0);  // nothing measured
    st.compute_s = 3;
    st.total_s = 4;
    EXPECT_EQ(st.measured_bubble(), 0.25);
    run_fake_world(3, [](Communicator& world) {
        const int s = world.rank();
        ToyStage toy(s, 3, 4, 16, 4, 2);
        const PipeStats ps =
            run_pipeline(schedule_1f1b(s, 3, 4), world, s, 3, toy.callbacks(nullptr));
        // Parts are disjoint intervals of the call.
        EXPECT_GT(ps.total_s, 0.0);
        EXPECT_LE(ps.compute_s + ps.recv_wait_s + ps.send_wait_s, ps.total_s);
        EXPECT_GE(ps.measured_bubble(), 0.0);
        EXPECT_LT(ps.measured_bubble(), 1.0);
    });
}

TEST(PpExecutor, TagsFromMicroBatchAndDirection) {
    EXPECT_EQ(pipe_tag(0, false), 0);
    EXPECT_EQ(pipe_tag(0, true), 1);
    EXPECT_EQ(pipe_tag(5, true), 11);
    EXPECT_EQ(pipe_tag(16383, true), kMaxTag);
    EXPECT_EQ(pipe_tag(16384, false), 0);  // wraps, keeping the direction bit
    EXPECT_EQ(pipe_tag(1 << 30, true), 1);
    EXPECT_EQ(error_of([] { pipe_tag(-1, false); }),
              "pp executor: micro-batch must be >= 0, got -1");
}

}  // namespace
}  // namespace ete
