// ete/train/trainer_job.cpp — the Trainer and the scheduler around it (job_limits.h): the attempt
// record that stops a job failing the same step forever, the checkpoint ahead of a Slurm time
// limit, the warning when a stop signal leaves too little time, a stop before the first step.
#include <fmt/chrono.h>

#include <ctime>

#include "ete/core/error.h"
#include "ete/core/log.h"
#include "ete/core/signals.h"
#include "ete/train/job_limits.h"
#include "ete/train/trainer_impl.h"

namespace ete {

void Trainer::begin_attempt(int64_t start_step) {
    int32_t failed = 0;
    if (dist_.main()) {
        std::vector<Attempt> attempts = read_attempts(out_);
        failed = failed_attempts_at(attempts, start_step);
        if (cfg_.max_attempts_without_progress == 0 ||
            failed < cfg_.max_attempts_without_progress) {
            attempts.push_back({start_step, "running", -1});
            write_attempts(out_, attempts);
            failed = 0;
        }
    }
    if (dist_.world->size() > 1) dist_.world->all_reduce(&failed, 1, DType::I32, ReduceOp::Max);
    ETE_CHECK(failed == 0,
              "no progress in {} attempts: each started from step {} and ended without a clean "
              "stop or a newer checkpoint (crashed, killed or failed; their logs say why). Fix the "
              "cause, then resume with --set train.max_attempts_without_progress=0 or delete "
              "{}/.ete/attempts.json",
              failed, start_step, out_);
}

void Trainer::end_attempt(const char* how, int64_t step) {
    if (!dist_.main()) return;
    std::vector<Attempt> attempts = read_attempts(out_);
    if (attempts.empty()) return;
    attempts.back().end = how;
    attempts.back().end_step = step;
    write_attempts(out_, attempts);
}

bool Trainer::end_checkpoint_due() {
    if (cfg_.checkpoint_before_end_s <= 0 || !dist_.main()) return false;
    // Read at the first step and every 5 minutes after (one squeue call where the variable is
    // missing): `scontrol update TimeLimit=` may move the end.
    if (!job_end_known_ || seconds_since(job_end_read_) >= 300) {
        const std::optional<int64_t> end = slurm_job_end_time();
        if (end != job_end_) end_checkpoint_done_ = false;
        if (end && !job_end_known_)
            log_info(
                "the job ends at {} (Slurm): a checkpoint {:.0f} s ahead of it "
                "(train.checkpoint_before_end_s)",
                fmt::format("{:%Y-%m-%d %H:%M:%S}", fmt::localtime(std::time_t(*end))),
                cfg_.checkpoint_before_end_s);
        job_end_ = end;
        job_end_known_ = true;
        job_end_read_ = Clock::now();
    }
    if (!job_end_ || end_checkpoint_done_) return false;
    const double left = double(*job_end_) - double(std::time(nullptr));
    if (left > cfg_.checkpoint_before_end_s) return false;
    end_checkpoint_done_ = true;
    log_info("the job's time limit is {:.0f} s away: checkpointing now", left);
    return true;
}

void Trainer::check_stop_grace(double step_s) {
    if (!dist_.main() || grace_warned_) return;
    if (!grace_read_) {  // scontrol twice under Slurm: once a run
        grace_ = stop_grace();
        grace_read_ = true;
    }
    const std::optional<StopGrace>& g = grace_;
    if (!g) return;
    const double need = step_s + last_save_s_;
    if (need <= g->seconds) return;
    grace_warned_ = true;
    log_warn(
        "a stop signal may not leave time to checkpoint: a step takes {:.1f} s{} but {} — raise "
        "it (Slurm: KillWait, GraceTime; mpirun: --mca odls_base_sigkill_timeout S) or rely on "
        "train.checkpoint_minutes and train.checkpoint_before_end_s (docs/operations.md, Slurm)",
        step_s, last_save_s_ > 0 ? fmt::format(" and a checkpoint {:.1f} s", last_save_s_) : "",
        g->why);
}

bool Trainer::stop_before_first_step(StopSignals& signals, TrainSummary& sum) {
    int32_t sig = signals.pending();
    if (dist_.world->size() > 1) dist_.world->all_reduce(&sig, 1, DType::I32, ReduceOp::Max);
    if (sig == 0) return false;
    log_info("received {} while starting: stopping before step {} (nothing new to save)",
             signals.pending() ? signal_name(signals.pending()) : "a stop request on another rank",
             sum.start_step + 1);
    end_attempt("stopped", sum.start_step);
    sum.interrupted = true;
    return true;
}

}  // namespace ete
