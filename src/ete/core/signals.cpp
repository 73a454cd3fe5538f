// ete/core/signals.cpp
#include "ete/core/signals.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>

namespace ete {

namespace {

constexpr int kHandled[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};

// Written by the handlers: lock-free atomics and sig_atomic_t only (async-signal-safe).
volatile std::sig_atomic_t g_first_stop = 0, g_stops = 0, g_interrupts = 0, g_checkpoint = 0;
std::atomic<int64_t> g_first_stop_ns{-1};
static_assert(std::atomic<int64_t>::is_always_lock_free);
bool g_installed = false;

int64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void on_signal(int sig) {
    const int saved_errno = errno;
    if (sig == SIGUSR1) {
        g_checkpoint = 1;
    } else {
        if (sig == SIGINT) g_interrupts = g_interrupts + 1;
        if (sig == SIGINT && g_interrupts >= 2) {
            // Ctrl-C twice: the user wants out now. The default action ends the process as a
            // plain SIGINT would (a save in progress leaves only a temporary directory).
            std::signal(SIGINT, SIG_DFL);
            std::raise(SIGINT);
        }
        if (g_first_stop == 0) {
            g_first_stop_ns.store(monotonic_ns());
            g_first_stop = sig;
        }
        g_stops = g_stops + 1;
    }
    errno = saved_errno;
}

sigset_t handled_set() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kHandled) sigaddset(&set, sig);
    return set;
}

}  // namespace

SignalMode signal_mode_for(int argc, char** argv) {
    // The first argument that is not an option names the command (`ete [--flag] train ...`).
    for (int i = 1; i < argc; ++i) {
        if (argv[i][0] == '-') continue;
        const bool deferred =
            std::strcmp(argv[i], "train") == 0 || std::strcmp(argv[i], "launch") == 0;
        return deferred ? SignalMode::Deferred : SignalMode::Default;
    }
    return SignalMode::Default;
}

bool install_signal_handlers(SignalMode mode) {
    const sigset_t set = handled_set();
    const bool install = mode == SignalMode::Deferred && !g_installed;
    if (install) {
        // Blocked while the handlers go in, so none meets a half-installed set.
        pthread_sigmask(SIG_BLOCK, &set, nullptr);
        for (int sig : kHandled) {
            struct sigaction sa {};
            sa.sa_handler = on_signal;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESTART;
            sigaction(sig, &sa, nullptr);
        }
        g_installed = true;
    }
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    return install;
}

sigset_t block_signals_for_exec() {
    const sigset_t set = handled_set();
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, &set, &old);
    return old;
}

void block_termination_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void uninstall_signal_handlers() {
    if (!g_installed) return;
    for (int sig : kHandled) std::signal(sig, SIG_DFL);
    g_installed = false;
}

int stop_signal() {
    return g_first_stop;
}

int stop_signal_count() {
    return g_stops;
}

double seconds_since_stop_signal() {
    const int64_t t = g_first_stop_ns.load();
    return g_first_stop == 0 || t < 0 ? -1.0 : double(monotonic_ns() - t) * 1e-9;
}

bool take_checkpoint_signal() {
    if (!g_checkpoint) return false;
    g_checkpoint = 0;
    return true;
}

void reset_signal_requests() {
    g_first_stop = 0;
    g_stops = 0;
    g_interrupts = 0;
    g_checkpoint = 0;
    g_first_stop_ns.store(-1);
}

std::string signal_name(int sig) {
    switch (sig) {
        case SIGTERM:
            return "SIGTERM";
        case SIGINT:
            return "SIGINT";
        case SIGHUP:
            return "SIGHUP";
        case SIGUSR1:
            return "SIGUSR1";
        case SIGUSR2:
            return "SIGUSR2";
        default:
            return fmt::format("signal {}", sig);
    }
}

}  // namespace ete
