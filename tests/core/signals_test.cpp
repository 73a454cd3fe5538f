// The process's signal handling (core/signals.h): train and launch record stop and checkpoint
// requests from the first instruction of main; repeated SIGTERMs never end the process; a second
// SIGINT does.
#include "ete/core/signals.h"

#include <gtest/gtest.h>

#include <csignal>

namespace ete {
namespace {

SignalMode mode_of(std::vector<const char*> args) {
    args.insert(args.begin(), "ete");
    return signal_mode_for(int(args.size()), const_cast<char**>(args.data()));
}

TEST(Signals, TrainAndLaunchDeferEveryOtherCommandKeepsTheDefaults) {
    EXPECT_EQ(mode_of({"train", "cfg.toml"}), SignalMode::Deferred);
    EXPECT_EQ(mode_of({"--quiet", "train"}), SignalMode::Deferred);
    EXPECT_EQ(mode_of({"launch", "-n", "2", "--", "train"}), SignalMode::Deferred);
    EXPECT_EQ(mode_of({"generate", "train"}), SignalMode::Default);  // a prompt named "train"
    EXPECT_EQ(mode_of({"export"}), SignalMode::Default);
    EXPECT_EQ(mode_of({"--version"}), SignalMode::Default);
    EXPECT_EQ(mode_of({}), SignalMode::Default);
}

class SignalsInstalled : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(install_signal_handlers(SignalMode::Deferred));
        EXPECT_FALSE(install_signal_handlers(SignalMode::Deferred));  // idempotent
        reset_signal_requests();
    }
    void TearDown() override {
        uninstall_signal_handlers();
        reset_signal_requests();
    }
};

// Slurm's two SIGTERMs at a time limit and mpirun's after them: recorded, never fatal; the first
// one's number and time are kept.
TEST_F(SignalsInstalled, RepeatedTerminationRequestsAreCountedNotFatal) {
    EXPECT_EQ(stop_signal(), 0);
    EXPECT_LT(seconds_since_stop_signal(), 0);
    ASSERT_EQ(std::raise(SIGTERM), 0);
    ASSERT_EQ(std::raise(SIGTERM), 0);
    ASSERT_EQ(std::raise(SIGHUP), 0);
    ASSERT_EQ(std::raise(SIGUSR2), 0);
    EXPECT_EQ(stop_signal(), SIGTERM);
    EXPECT_EQ(stop_signal_count(), 4);
    EXPECT_GE(seconds_since_stop_signal(), 0);
    EXPECT_LT(seconds_since_stop_signal(), 60);
    EXPECT_FALSE(take_checkpoint_signal());  // stops are not checkpoint requests
    reset_signal_requests();
    EXPECT_EQ(stop_signal(), 0);
    EXPECT_EQ(stop_signal_count(), 0);
}

TEST_F(SignalsInstalled, CheckpointRequestsAreConsumed) {
    ASSERT_EQ(std::raise(SIGUSR1), 0);
    ASSERT_EQ(std::raise(SIGUSR1), 0);
    EXPECT_TRUE(take_checkpoint_signal());
    EXPECT_FALSE(take_checkpoint_signal());
    EXPECT_EQ(stop_signal(), 0);  // SIGUSR1 is no stop
}

// Signals left blocked by the parent (or by a re-exec of the binary) are unblocked and a pending
// one is delivered to the handler, not lost.
TEST_F(SignalsInstalled, ABlockedPendingSignalArrivesOnceInstalled) {
    uninstall_signal_handlers();
    sigset_t old = block_signals_for_exec();
    ASSERT_EQ(std::raise(SIGTERM), 0);  // pending: blocked
    ASSERT_TRUE(install_signal_handlers(SignalMode::Deferred));
    EXPECT_EQ(stop_signal(), SIGTERM);
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, &old, &now);
    EXPECT_FALSE(sigismember(&now, SIGTERM));
}

using SignalsDeathTest = SignalsInstalled;

// A second Ctrl-C ends the process at once, by SIGINT's default action; one alone does not.
TEST_F(SignalsDeathTest, ASecondInterruptEndsTheProcess) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            std::raise(SIGINT);
            if (stop_signal() != SIGINT) std::_Exit(3);
            std::raise(SIGINT);
            std::_Exit(0);  // not reached
        },
        ::testing::KilledBySignal(SIGINT), "");
    EXPECT_EXIT(
        {
            std::raise(SIGTERM);
            std::raise(SIGTERM);
            std::raise(SIGINT);
            std::_Exit(stop_signal() == SIGTERM && stop_signal_count() == 3 ? 7 : 8);
        },
        ::testing::ExitedWithCode(7), "");
}

}  // namespace
}  // namespace ete
