// ete/train/job_limits.h — what the scheduler and the launcher allow a run (internal to train/):
// the Slurm job's end time (train.checkpoint_before_end_s checkpoints ahead of it), the time a
// stop signal leaves before SIGKILL (Slurm's KillWait and the partition's GraceTime, mpirun's
// odls_base_sigkill_timeout escalation), and the record of attempts that stops a requeued job
// failing the same step forever (train.max_attempts_without_progress). docs/operations.md, Slurm.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ete {

// Pure parsers (tested): squeue's `%e` (local "YYYY-MM-DDTHH:MM:SS"; "N/A", "NONE", "Unknown"
// and garbage give nullopt) as Unix seconds; `scontrol show config`'s "KillWait = 30 sec";
// `scontrol show partition`'s "GraceTime=30".
std::optional<int64_t> parse_squeue_time(const std::string& text);
std::optional<double> parse_kill_wait(const std::string& scontrol_config);
std::optional<double> parse_grace_time(const std::string& scontrol_partition);

// The job's end time (Unix seconds): SLURM_JOB_END_TIME where Slurm sets it, else
// `squeue -h -j $SLURM_JOB_ID -o %e`. nullopt outside Slurm or without a limit.
std::optional<int64_t> slurm_job_end_time();

// The time from a stop signal to SIGKILL that the surroundings allow, with what sets it; none
// when nothing known bounds it (a plain run). From the environment and, under Slurm, scontrol.
struct StopGrace {
    double seconds = 0;
    std::string why;  // "Slurm's KillWait (30 s)", "mpirun's odls_base_sigkill_timeout ..."
};
std::optional<StopGrace> stop_grace();
// Pure: the tightest of the limits read from the environment and scontrol (tested).
// kill_wait / grace_time: from scontrol (nullopt when not under Slurm); mpirun_timeout: the
// value of OMPI_MCA_odls_base_sigkill_timeout (nullopt when not launched by Open MPI's mpirun;
// "" there means its default, 1 s).
std::optional<StopGrace> tightest_grace(std::optional<double> kill_wait,
                                        std::optional<double> grace_time,
                                        std::optional<std::string> mpirun_timeout);

// One start of the run in DIR/.ete/attempts.json.
struct Attempt {
    int64_t start_step = 0;
    std::string end = "running";  // "running" (never ended cleanly: crashed, killed, failed),
                                  // "stopped" (a signal, checkpoint saved), "diverged", "done"
    int64_t end_step = -1;
};
std::vector<Attempt> read_attempts(const std::string& run_dir);
void write_attempts(const std::string& run_dir, const std::vector<Attempt>& attempts);
// Pure: how many attempts in a row, newest first, resumed from start_step and did not end
// cleanly (tested).
int failed_attempts_at(const std::vector<Attempt>& attempts, int64_t start_step);

}  // namespace ete
