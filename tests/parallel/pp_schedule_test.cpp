// tests/parallel/pp_schedule_test.cpp — the 1F1B schedule as data: every micro-batch gets one
// forward and one backward per stage with its transfers in order, the activations held stay
// within max_in_flight, hand-written schedules, and an event simulation of all stages together
// that never deadlocks and takes exactly the theoretical bubble.
#include "ete/parallel/pp_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "test_util.h"

namespace ete {
namespace {

// Index of the one action (op, micro) in the list; fails the test unless there is exactly one.
long index_of(const std::vector<PipeAction>& a, PipeOp op, int micro) {
    const long n = std::count(a.begin(), a.end(), PipeAction{op, micro});
    EXPECT_EQ(n, 1) << "op " << int(op) << " micro " << micro;
    return std::find(a.begin(), a.end(), PipeAction{op, micro}) - a.begin();
}

TEST(PpSchedule, EveryMicroBatchGetsOneForwardAndBackwardWithItsTransfersInOrder) {
    for (int p = 1; p <= 5; ++p) {
        for (int m = 1; m <= 9; ++m) {
            for (int s = 0; s < p; ++s) {
                SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m << " s=" << s);
                const auto a = schedule_1f1b(s, p, m);
                const bool first = s == 0, last = s == p - 1;
                // Exactly F, B and the transfers the stage has peers for, nothing else.
                EXPECT_EQ(long(a.size()), m * (2L + (first ? 0 : 2) + (last ? 0 : 2)));
                for (int i = 0; i < m; ++i) {
                    const long f = index_of(a, PipeOp::Forward, i);
                    const long b = index_of(a, PipeOp::Backward, i);
                    EXPECT_LT(f, b);
                    if (!first) {
                        EXPECT_LT(index_of(a, PipeOp::RecvAct, i), f);
                    }
                    if (!first) {
                        EXPECT_GT(index_of(a, PipeOp::SendGrad, i), b);
                    }
                    if (!last) {
                        EXPECT_GT(index_of(a, PipeOp::SendAct, i), f);
                    }
                    if (!last) {
                        EXPECT_LT(index_of(a, PipeOp::RecvGrad, i), b);
                    }
                }
                for (const PipeAction& x : a) {
                    EXPECT_GE(x.micro, 0);
                    EXPECT_LT(x.micro, m);
                    if (first) {
                        EXPECT_TRUE(x.op != PipeOp::RecvAct && x.op != PipeOp::SendGrad);
                    }
                    if (last) {
                        EXPECT_TRUE(x.op != PipeOp::SendAct && x.op != PipeOp::RecvGrad);
                    }
                }
            }
        }
    }
}

// Forwards done minus backwards done peaks at exactly max_in_flight (so the bound is tight).
TEST(PpSchedule, ActivationsHeldPeakAtMaxInFlight) {
    for (int p = 1; p <= 5; ++p) {
        for (int m = 1; m <= 9; ++m) {
            for (int s = 0; s < p; ++s) {
                int held = 0, peak = 0;
                for (const PipeAction& x : schedule_1f1b(s, p, m)) {
                    if (x.op == PipeOp::Forward) peak = std::max(peak, ++held);
                    if (x.op == PipeOp::Backward) --held;
                }
                EXPECT_EQ(held, 0);
                EXPECT_EQ(peak, max_in_flight(s, p, m)) << "p=" << p << " m=" << m << " s=" << s;
                EXPECT_EQ(peak, std::min(p - s, m));
            }
        }
    }
}

TEST(PpSchedule, HandWrittenTwoStagesFourMicroBatches) {
    EXPECT_EQ(format_schedule(schedule_1f1b(0, 2, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(1, 2, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(0, 2, 4), true),
              "F0 Sa0 F1 Sa1 Rg0 B0 F2 Sa2 Rg1 B1 F3 Sa3 Rg2 B2 Rg3 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(1, 2, 4), true),
              "Ra0 F0 B0 Sg0 Ra1 F1 B1 Sg1 Ra2 F2 B2 Sg2 Ra3 F3 B3 Sg3");
}

TEST(PpSchedule, HandWrittenFourStagesFourMicroBatches) {
    EXPECT_EQ(format_schedule(schedule_1f1b(0, 4, 4)), "F0 F1 F2 F3 B0 B1 B2 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(1, 4, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(2, 4, 4)), "F0 F1 B0 F2 B1 F3 B2 B3");
    EXPECT_EQ(format_schedule(schedule_1f1b(3, 4, 4)), "F0 B0 F1 B1 F2 B2 F3 B3");
    // A middle stage with every transfer.
    EXPECT_EQ(format_schedule(schedule_1f1b(2, 4, 4), true),
              "Ra0 F0 Sa0 Ra1 F1 Sa1 Rg0 B0 Sg0 Ra2 F2 Sa2 Rg1 B1 Sg1 Ra3 F3 Sa3 Rg2 B2 Sg2 "
              "Rg3 B3 Sg3");
}

TEST(PpSchedule, FewerMicroBatchesThanStages) {
    EXPECT_EQ(format_schedule_table(4, 2),
              "stage 0: F0 F1 B0 B1\n"
              "stage 1: F0 F1 B0 B1\n"
              "stage 2: F0 F1 B0 B1\n"
              "stage 3: F0 B0 F1 B1\n");
    EXPECT_EQ(format_schedule(schedule_1f1b(0, 1, 3), true), "F0 B0 F1 B1 F2 B2");
}

TEST(PpSchedule, TheoreticalBubble) {
    EXPECT_DOUBLE_EQ(bubble_fraction_theory(4, 8), 3.0 / 11.0);
    EXPECT_DOUBLE_EQ(bubble_fraction_theory(2, 1), 0.5);
    EXPECT_EQ(bubble_fraction_theory(1, 5), 0.0);
}

TEST(PpSchedule, BadArgumentsName) {
    EXPECT_EQ(error_of([] { schedule_1f1b(0, 0, 4); }),
              "pp schedule: num_stages must be >= 1, got 0");
    EXPECT_EQ(error_of([] { schedule_1f1b(0, 2, 0); }),
              "pp schedule: num_micro (micro-batches per step) must be >= 1, got 0");
    EXPECT_EQ(error_of([] { schedule_1f1b(2, 2, 4); }),
              "pp schedule: stage must be in [0, 2), got 2");
    EXPECT_EQ(error_of([] { schedule_1f1b(-1, 2, 4); }),
              "pp schedule: stage must be in [0, 2), got -1");
    EXPECT_EQ(error_of([] { max_in_flight(3, 3, 1); }),
              "pp schedule: stage must be in [0, 3), got 3");
    EXPECT_EQ(error_of([] { bubble_fraction_theory(2, -1); }),
              "pp schedule: num_micro (micro-batches per step) must be >= 1, got -1");
}

// All stages together, each walking its list in order: sends are issued at once (non-blocking),
// a receive blocks until the peer issued the matching send, F costs t_f and B costs t_b time
// units, transfers are free. Returns the step's length, or -1 when no stage can move (deadlock).
long simulate(const std::vector<std::vector<PipeAction>>& lists, long t_f, long t_b) {
    const int p = int(lists.size());
    std::vector<size_t> pc(size_t(p), 0);
    std::vector<long> clock(size_t(p), 0);
    std::map<std::tuple<bool, int, int>, long> sent;  // (grad, from stage, micro) -> send time
    for (bool moved = true; moved;) {
        moved = false;
        for (int s = 0; s < p; ++s) {
            for (size_t& i = pc[size_t(s)]; i < lists[size_t(s)].size(); ++i) {
                const PipeAction a = lists[size_t(s)][i];
                long& t = clock[size_t(s)];
                if (a.op == PipeOp::RecvAct || a.op == PipeOp::RecvGrad) {
                    const bool grad = a.op == PipeOp::RecvGrad;
                    auto it = sent.find({grad, grad ? s + 1 : s - 1, a.micro});
                    if (it == sent.end()) break;  // blocked until the peer sends
                    t = std::max(t, it->second);
                } else if (a.op == PipeOp::SendAct || a.op == PipeOp::SendGrad) {
                    sent[{a.op == PipeOp::SendGrad, s, a.micro}] = t;
                } else {
                    t += a.op == PipeOp::Forward ? t_f : t_b;
                }
                moved = true;
            }
        }
    }
    for (int s = 0; s < p; ++s) {
        if (pc[size_t(s)] != lists[size_t(s)].size()) return -1;
    }
    return *std::max_element(clock.begin(), clock.end());
}

std::vector<std::vector<PipeAction>> all_stages(int p, int m) {
    std::vector<std::vector<PipeAction>> lists;
    for (int s = 0; s < p; ++s) lists.push_back(schedule_1f1b(s, p, m));
    return lists;
}

TEST(PpSchedule, AllStagesTogetherNeverDeadlockAndTakeTheTheoreticalBubble) {
    for (int p = 1; p <= 5; ++p) {
        for (int m = 1; m <= 9; ++m) {
            for (long t_b : {1L, 2L}) {  // backward as costly as forward, and twice (typical)
                SCOPED_TRACE(::testing::Message() << "p=" << p << " m=" << m << " t_b=" << t_b);
                const long step = simulate(all_stages(p, m), 1, t_b);
                ASSERT_GE(step, 0) << "deadlock";
                EXPECT_EQ(step, (m + p - 1) * (1 + t_b));
                // Every stage computes m (t_f + t_b) of the step; the rest is the bubble.
                const double bubble = 1.0 - double(m * (1 + t_b)) / double(step);
                EXPECT_NEAR(bubble, bubble_fraction_theory(p, m), 1e-12);  // double rounding
            }
        }
    }
}

// The simulation does detect a deadlock: stage 0 waiting for a gradient before its first send.
TEST(PpSchedule, SimulationDetectsADeadlock) {
    auto lists = all_stages(2, 2);
    auto& s0 = lists[0];
    const auto rg0 = std::find(s0.begin(), s0.end(), PipeAction{PipeOp::RecvGrad, 0});
    std::rotate(s0.begin(), rg0, rg0 + 1);  // RecvGrad 0 moved to the front
    EXPECT_EQ(format_schedule(s0, true), "Rg0 F0 Sa0 F1 Sa1 B0 Rg1 B1");
    EXPECT_EQ(simulate(lists, 1, 1), -1);
}

}  // namespace
}  // namespace ete
