#!/usr/bin/env bash
# Slurm signalling experiments (see FINDINGS.md).  Needs a cluster from
# cluster.sh (SLURM_CONF exported) with enough CPUs to run them in parallel.
#
#   exp.sh OUTDIR NAME     run one experiment, print its time line
#
# Every experiment writes OUTDIR/NAME/events.log: lines from siglog.py (tasks),
# from the traced batch shell ("batch"), from procmon.py ("mon": when each
# process of the job appeared/vanished, seen from outside the job) and MARK
# lines (what the driver did).  procmon.py report prints it relative to the
# first MARK.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SIGLOG=$HERE/siglog.py
MON=$HERE/procmon.py
OUT=$1 NAME=$2
D=$OUT/$NAME; rm -rf "$D"; mkdir -p "$D"; LOG=$D/events.log; : >"$LOG"
AFTER_TERM=${AFTER_TERM:-45}     # tasks keep running this long after SIGTERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TASK="/usr/bin/python3 $SIGLOG task $LOG 300 $AFTER_TERM"
MPIRUN="mpirun --oversubscribe -n 2"

mark() { echo "$(date +%s.%3N) MARK r=- pid=0 ppid=0 pgid=0 $*" >>"$LOG"; }

# mkbatch MODE CMD... -> $D/job.sh
#  traced: batch shell traps+logs signals, runs CMD in background and waits
#          (wait returns on a trapped signal, so the shell survives SIGTERM).
#          CONT is NOT trapped: bash 5.2 here drops one of two different
#          trapped signals arriving back to back (Slurm sends CONT+TERM).
#  plain:  CMD in the foreground, no traps (what a naive job script does)
#  exec:   exec CMD
mkbatch() {
    local mode=$1; shift
    {
        echo '#!/bin/bash'
        echo "LOG=$LOG"
        # no forks in log(): it also runs from signal traps
        echo 'PGID=$(ps -o pgid= -p $$ | tr -d " ")'
        echo 'log() { echo "$EPOCHREALTIME batch r=- pid=$$ ppid=$PPID pgid=$PGID $*" >>"$LOG"; }'
        echo 'log "start SLURM_JOB_ID=$SLURM_JOB_ID SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT-unset} SLURM_JOB_END_TIME=${SLURM_JOB_END_TIME-unset} squeue_e=$(squeue -h -j $SLURM_JOB_ID -o %e) squeue_L=$(squeue -h -j $SLURM_JOB_ID -o %L)"'
        echo "echo \"run \${SLURM_RESTART_COUNT-0} of job \$SLURM_JOB_ID\""
        [ -n "${PRE:-}" ] && echo "$PRE"
        case $mode in
            traced)
                echo 'for s in TERM INT HUP USR1 USR2; do trap "log sig=$s" $s; done'
                echo "$* &"
                echo 'P=$!; while kill -0 $P 2>/dev/null; do wait $P; done; log "exit (child rc=$?)"' ;;
            plain) echo "$*"; echo 'log "exit rc=$?"' ;;
            exec)  echo "exec $*" ;;
        esac
    } >"$D/job.sh"
    chmod +x "$D/job.sh"
}

# submit SBATCH_ARGS... -> JID ; starts the outside monitor
submit() {
    JID=$(sbatch --parsable -o "$D/slurm-%j.out" "$@" "$D/job.sh") || exit 1
    mark "submitted job $JID: sbatch $*"
    timeout 400 /usr/bin/python3 "$MON" watch "$JID" "$LOG" 390 &
    MONPID=$!
}
# wait until N task 'start' lines are in the log (bounded)
wait_tasks() {
    local n=$1 i
    for i in $(seq 1 300); do
        [ "$(grep -c ' task .* start' "$LOG")" -ge "$n" ] && return 0; sleep 0.1
    done
    mark "TIMEOUT waiting for $n tasks"
}
# wait until job JID has left the queue / is no longer R/CG (bounded)
wait_gone() {
    local limit=$1 i st
    for i in $(seq 1 $((limit * 5))); do
        st=$(squeue -h -j "$JID" -o %T 2>/dev/null)
        case $st in RUNNING|COMPLETING|PENDING|CONFIGURING|REQUEUED*|SUSPENDED) ;; *) break ;; esac
        sleep 0.2
    done
    mark "job $JID state now: '${st}' ($(scontrol show job $JID 2>/dev/null | grep -o 'JobState=[A-Z_]* Reason=[^ ]*'))"
}
finish() {
    # the monitor stops by itself once every process it saw is gone (bounded)
    local i; for i in $(seq 1 900); do kill -0 "$MONPID" 2>/dev/null || break; sleep 0.1; done
    kill "$MONPID" 2>/dev/null; wait "$MONPID" 2>/dev/null
    grep -h . "$D"/slurm-*.out 2>/dev/null | sed 's/^/  [slurm-out] /'
    /usr/bin/python3 "$MON" report "$LOG"
}

scancel_case() {   # $1 = mode, rest = command
    local mode=$1; shift
    mkbatch "$mode" "$@"; submit -p high -n2
    wait_tasks 2; sleep 2
    mark "scancel $JID"; scancel "$JID"
    wait_gone 120; finish
}

case $NAME in
    scancel_srun_traced)   scancel_case traced srun -n2 $TASK ;;
    scancel_srun_plain)    scancel_case plain  srun -n2 $TASK ;;
    scancel_mpirun_traced) scancel_case traced $MPIRUN $TASK ;;
    scancel_mpirun_plain)  scancel_case plain  $MPIRUN $TASK ;;
    scancel_mpirun_exec)   scancel_case exec   $MPIRUN $TASK ;;
    scancel_mpirun_plain_k60) scancel_case plain $MPIRUN --mca odls_base_sigkill_timeout 60 $TASK ;;
    scancel_mpirun_exec_k60)  scancel_case exec  $MPIRUN --mca odls_base_sigkill_timeout 60 $TASK ;;
    timelimit_srun)        # 1 minute limit, traced shell
        mkbatch traced srun -n2 $TASK; submit -p high -n2 -t 1
        wait_tasks 2; mark "tasks running (limit 1 min)"; wait_gone 200; finish ;;
    timelimit_update)      # shorten the limit of a running job
        mkbatch traced srun -n2 $TASK; submit -p high -n2 -t 10
        wait_tasks 2; sleep 5
        mark "scontrol update TimeLimit=0:20 (job running ~5 s)"
        scontrol update JobId="$JID" TimeLimit=0:20
        mark "after update: squeue %e=$(squeue -h -j $JID -o %e) %L=$(squeue -h -j $JID -o %L)"
        wait_gone 200; finish ;;
    signal_usr1)
        mkbatch traced srun -n2 $TASK; submit -p high -n2 -t 1 --signal=USR1@30
        wait_tasks 2; mark "tasks running"; wait_gone 200; finish ;;
    signal_b_usr1)
        mkbatch traced srun -n2 $TASK; submit -p high -n2 -t 1 --signal=B:USR1@30
        wait_tasks 2; mark "tasks running"; wait_gone 200; finish ;;
    signal_usr1_mpirun)
        mkbatch traced $MPIRUN $TASK; submit -p high -n2 -t 1 --signal=B:USR1@30
        wait_tasks 2; mark "tasks running"; wait_gone 200; finish ;;
    requeue_self_append|requeue_self_trunc)   # scontrol requeue from inside
        om=append; [ "$NAME" = requeue_self_trunc ] && om=truncate
        PRE='if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then log "requeueing myself"; scontrol requeue $SLURM_JOB_ID; log "scontrol requeue rc=$?"; sleep 5; log "still alive 5 s after requeue"; else log "second run, exiting"; exit 0; fi' \
            mkbatch traced srun -n2 $TASK
        submit -p high -n2 --open-mode=$om
        wait_gone 300; finish ;;
    preempt)               # low --requeue job preempted by an exclusive high job
        mkbatch traced srun -n2 $TASK
        submit -p low -n2 --requeue --open-mode=append
        LOWJID=$JID; wait_tasks 2; sleep 2
        HJ=$(sbatch --parsable -p high --exclusive -o /dev/null --wrap 'sleep 15')
        mark "submitted high job $HJ (exclusive, sleep 15)"
        # wait for the second run of the low job (bounded)
        for i in $(seq 1 1500); do
            [ "$(grep -c 'batch .* start' "$LOG")" -ge 2 ] && break; sleep 0.2
        done
        mark "low job state: $(squeue -h -j $LOWJID -o '%T %r') restarts=$(scontrol show job $LOWJID | grep -o 'Restarts=[0-9]*')"
        sleep 3; scancel "$LOWJID"; mark "scancel $LOWJID (cleanup)"; wait_gone 60; finish ;;
    *) echo "unknown experiment $NAME" >&2; exit 2 ;;
esac
