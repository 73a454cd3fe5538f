// ete/train/progress.cpp
#include "ete/train/progress.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ete/core/error.h"
#include "ete/core/file_util.h"
#include "ete/core/log.h"

namespace ete {

Progress::Progress(const std::string& path, int64_t total_steps, int64_t log_every)
    : total_(total_steps), log_every_(log_every), tty_(::isatty(STDERR_FILENO) != 0) {
    if (!path.empty()) {
        path_ = path;
        // Never through a link planted in the run dir (its target would be appended to), and
        // only into a regular file of our own.
        metrics_ =
            ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
        ETE_CHECK(metrics_ >= 0, "metrics file '{}': cannot open for writing ({})", path,
                  errno == ELOOP ? "a symbolic link: ETE never writes through one, remove it"
                                 : std::strerror(errno));
        struct stat st {};
        const bool regular = ::fstat(metrics_, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1;
        if (!regular) {
            ::close(metrics_);
            metrics_ = -1;
            throw_error(fmt::format(
                "metrics file '{}': expected a regular file of its own (not a device, FIFO or a "
                "hard link to another file)",
                path));
        }
    }
}

Progress::~Progress() {
    if (metrics_ >= 0) ::close(metrics_);
}

// One whole line or nothing: a short or failed write (ENOSPC, EIO) is cut back off the file.
void Progress::append(const std::string& line, int64_t step) {
    const int err = append_whole(metrics_, line);
    if (err == 0) {
        if (failing_) log_warn("metrics file '{}': appending again from step {}", path_, step);
        failing_ = false;
        return;
    }
    ++lost_;
    if (!failing_) {
        log_warn(
            "metrics file '{}': cannot append step {} ({}); training goes on, lines are lost "
            "until writes succeed",
            path_, step, std::strerror(err));
    }
    failing_ = true;
}

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    auto t = int64_t(s + 0.5);
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

nlohmann::json metrics_json(const StepMetrics& m) {
    nlohmann::json j = {{"step", m.step},      {"loss", m.loss},
                        {"lr", m.lr},          {"grad_norm", m.grad_norm},
                        {"tokens", m.tokens},  {"tokens_per_s", m.tokens_per_s},
                        {"step_ms", m.step_ms}};
    if (m.val_loss) j["val_loss"] = *m.val_loss;
    if (m.comm_wait_ms) j["comm_wait_ms"] = *m.comm_wait_ms;
    if (m.buckets) j["buckets"] = *m.buckets;
    if (m.buckets_early) j["buckets_early"] = *m.buckets_early;
    if (m.pp_bubble) j["pp_bubble"] = *m.pp_bubble;
    if (m.tp_comm_ms) j["tp_comm_ms"] = *m.tp_comm_ms;
    if (m.loss_scale) j["loss_scale"] = *m.loss_scale;
    if (m.skipped) j["skipped"] = *m.skipped;
    if (m.skip_causes.is_object()) j["skip_causes"] = m.skip_causes;
    if (m.lora_rank) j["lora_rank"] = *m.lora_rank;
    if (m.straggler_score) j["straggler_score"] = *m.straggler_score;
    if (m.straggler_rank) j["straggler_rank"] = *m.straggler_rank;
    if (m.rank_change) j["rank_change"] = *m.rank_change;
    if (m.pp_bubble_theory) j["pp_bubble_theory"] = *m.pp_bubble_theory;
    return j;
}

void Progress::record(const StepMetrics& m, double elapsed_s, int64_t steps_run) {
    if (metrics_ >= 0) append(metrics_json(m).dump() + "\n", m.step);
    double eta = elapsed_s / double(std::max<int64_t>(steps_run, 1)) * double(total_ - m.step);
    std::string line = fmt::format(
        "step: {}/{} | loss: {:.4f} | lr: {:.3e} | grad_norm: {:.3f} | tok/s: {:.0f} | eta: {}",
        m.step, total_, m.loss, m.lr, m.grad_norm, m.tokens_per_s, format_duration(eta));
    if (m.val_loss) line += fmt::format(" | val_loss: {:.4f}", *m.val_loss);
    if (m.lora_rank) line += fmt::format(" | rank: {}", *m.lora_rank);
    if (m.loss_scale) line += fmt::format(" | loss_scale: {:g}", *m.loss_scale);
    if (m.skipped && *m.skipped) line += " (skipped)";
    if (tty_) {
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
        live_ = true;
        if (m.val_loss) {
            std::fputc('\n', stderr);
            live_ = false;
        }
    } else if (m.step % log_every_ == 0 || m.step == total_ || m.step == 1 || m.val_loss) {
        std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
}

void Progress::message(const std::string& line) {
    if (live_) std::fputc('\n', stderr);
    live_ = false;
    std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::finish() {
    if (live_) std::fputc('\n', stderr);
    live_ = false;
}

}  // namespace ete
