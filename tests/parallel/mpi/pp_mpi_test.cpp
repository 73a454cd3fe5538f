// tests/parallel/mpi/pp_mpi_test.cpp — the 1F1B executor over real MPI processes (np 2, 3, 4, one
// stage per process): a toy pipelined model gives exactly the outputs, input gradients and weight
// gradients of running it sequentially, with messages large enough (256 KiB) for MPI's
// rendezvous protocol, so a send completes only once its receive is posted, and single send
// buffers, so the executor must wait for each send before rewriting its buffer.
#include <gtest/gtest.h>

#include <vector>

#include "ete/parallel/pp_executor.h"
#include "mpi_test_env.h"

namespace ete::testing {
namespace {

// The toy model of tests/parallel/pp_executor_test.cpp: stage s computes y = x·w_s + s; the last
// stage's loss is ½·Σy² (d_y = y); d_x = d_y·w_s, d_w_s += Σ x·d_y. Same functions in the
// reference and the stages, so the results match exactly.
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
    for (size_t i = 0; i < n; ++i) x[i] = float(micro) + 0.25f * float(i % 16);
    return x;
}

// Sequential reference for stage `stage`: its d_w, and (per micro-batch) the last stage's output
// and stage 0's input gradient.
struct Reference {
    float d_w = 0;
    std::vector<std::vector<float>> y, d_x;
};
Reference reference(int stage, int p, int m, size_t n) {
    Reference r;
    std::vector<float> d_ws(size_t(p), 0.0f);
    for (int j = 0; j < m; ++j) {
        std::vector<std::vector<float>> xs(size_t(p) + 1, std::vector<float>(n));
        xs[0] = toy_input(j, n);
        for (int s = 0; s < p; ++s)
            toy_forward(s, xs[size_t(s)].data(), xs[size_t(s) + 1].data(), n);
        std::vector<float> d = xs[size_t(p)], d_x(n);
        r.y.push_back(d);
        for (int s = p - 1; s >= 0; --s) {
            toy_backward(s, xs[size_t(s)].data(), d.data(), d_x.data(), &d_ws[size_t(s)], n);
            d = d_x;
        }
        r.d_x.push_back(d);
    }
    r.d_w = d_ws[size_t(stage)];
    return r;
}

// One stage's buffers, as small as pp_executor.h allows: act_in max_in_flight + 1, grad_in 2,
// one buffer per send direction.
struct ToyStage {
    ToyStage(int stage, int p, int m, size_t n)
        : s(stage),
          last(stage == p - 1),
          n(n),
          act_in(static_cast<size_t>(max_in_flight(stage, p, m)) + 1, std::vector<float>(n)),
          grad_in(2, std::vector<float>(n)),
          act_out(n),
          grad_out(n),
          y(static_cast<size_t>(m), std::vector<float>(n)),
          d_x(static_cast<size_t>(m), std::vector<float>(n)) {
        for (int j = 0; j < m; ++j) inputs.push_back(toy_input(j, n));
    }
    static float* slot(std::vector<std::vector<float>>& r, int j) {
        return r[size_t(j) % r.size()].data();
    }
    float* input(int j) { return s == 0 ? inputs[size_t(j)].data() : slot(act_in, j); }

    PipeCallbacks callbacks() {
        PipeCallbacks cb;
        cb.forward = [this](int j) {
            toy_forward(s, input(j), last ? y[size_t(j)].data() : act_out.data(), n);
        };
        cb.backward = [this](int j) {
            const float* d_y = last ? y[size_t(j)].data() : slot(grad_in, j);
            toy_backward(s, input(j), d_y, s == 0 ? d_x[size_t(j)].data() : grad_out.data(), &d_w,
                         n);
        };
        cb.act_in = [this](int j) { return slot(act_in, j); };
        cb.grad_in = [this](int j) { return slot(grad_in, j); };
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

void run_toy_pipeline(Communicator& pp, int m, size_t n) {
    const int p = pp.size(), s = pp.rank();
    ToyStage st(s, p, m, n);
    const PipeStats stats = run_pipeline(schedule_1f1b(s, p, m), pp, s, p, st.callbacks());
    EXPECT_EQ(stats.forwards, m);
    EXPECT_EQ(stats.backwards, m);
    const Reference want = reference(s, p, m, n);
    EXPECT_EQ(st.d_w, want.d_w) << "stage " << s;
    for (int j = 0; j < m; ++j) {
        if (st.last) {
            EXPECT_EQ(st.y[size_t(j)], want.y[size_t(j)]) << "micro " << j;
        }
        if (s == 0) {
            EXPECT_EQ(st.d_x[size_t(j)], want.d_x[size_t(j)]) << "micro " << j;
        }
    }
}

// The pp group is the world with ranks reversed, so stage (group rank) != world rank.
std::unique_ptr<Communicator> reversed_pp_group() {
    Communicator& w = mpi_world();
    auto pp = w.split(0, w.size() - 1 - w.rank(), "pp");
    pp->set_timeout(30);  // a deadlock fails the test with a message instead of hanging
    return pp;
}

// Suite MpiComm: the np 2/3/4 runs select "MpiComm.*".
TEST(MpiComm, PipelineToyModelMatchesSequential) {
    auto pp = reversed_pp_group();
    constexpr size_t kRendezvous = size_t(1) << 16;  // 256 KiB per message
    for (int m : {1, 6}) {
        SCOPED_TRACE(::testing::Message() << "m=" << m);
        run_toy_pipeline(*pp, m, kRendezvous);
    }
    run_toy_pipeline(*pp, 9, 3);  // small (eager) messages
    pp->barrier();
}

}  // namespace
}  // namespace ete::testing
