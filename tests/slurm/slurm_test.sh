#!/usr/bin/env bash
# End-to-end test of ETE's signal handling under Slurm, on a private single-node
# cluster (tests/slurm/cluster.sh: munge + slurmctld + slurmd as root).
#
#   tests/slurm/slurm_test.sh            # from the repository root
#
# Environment:
#   ETE=path/to/ete     binary under test (default: build/ete)
#   KILL_WAIT=10        Slurm KillWait: TERM -> KILL, and how long a cancelled
#                       job blocks the node (COMPLETING)
#   CRED_EXPIRE=5       requeue hold: a requeued job may restart this much later
#   SKIP_TIME_LIMIT=1   drop the time_limit case (it alone takes ~70-90 s, but
#                       it runs concurrently with the others)
#   KEEP=1              keep the work directory (always kept after a failure)
#
# Prints one line per case, "PASS name" or "FAIL name: why", then
# "N passed, M failed"; exit 0 only if nothing failed, 77 (skip) when the cluster
# cannot run here.  Details of each case are in WORK/<case>/ (job.sh,
# slurm.out, run/ = the --out dir); Slurm's logs are in WORK/cluster/log/.
#
# Slurm behaviour this relies on is documented in tests/slurm/FINDINGS.md:
#  * scancel / time limit / requeue: slurmstepd sends SIGCONT+SIGTERM to every
#    process of the job (the ranks, srun, mpirun, the batch shell), SIGKILL
#    KillWait seconds later.
#  * The batch shell traps TERM (not CONT: bash drops one of two trapped
#    signals that arrive back to back) and waits for its command in a loop, so
#    it survives the TERM and records the command's exit code in a file
#    (accounting is off, sacct has nothing).
#  * mpirun in a batch script: `exec` it, else the job escapes Slurm.

set -u

REPO=$(pwd)
[ -f "$REPO/tests/slurm/cluster.sh" ] || { echo "run from the repository root" >&2; exit 2; }
ETE=${ETE:-$REPO/build/ete}
case $ETE in /*) ;; *) ETE=$REPO/$ETE ;; esac
[ -x "$ETE" ] || { echo "SKIP: no ete binary at $ETE"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (private Slurm runs as root)"; exit 77; }

export KILL_WAIT=${KILL_WAIT:-10} CRED_EXPIRE=${CRED_EXPIRE:-5}
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset ETE_FAULT

# Short path: unix sockets of munge/slurm live under it (< 108 bytes).
WORK=$(mktemp -d /tmp/ete-slurm.XXXXXX)
CLUSTER=$WORK/cluster
T_START=$SECONDS
PASSED=0
FAILED=0

cleanup() {
    "$REPO/tests/slurm/cluster.sh" down "$CLUSTER" >/dev/null 2>&1
    if [ "$FAILED" -gt 0 ] || [ "${KEEP:-0}" = 1 ]; then
        echo "logs kept in $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT      # run the EXIT trap (cluster down) on ^C / kill too
trap 'exit 143' TERM HUP

up_out=$("$REPO/tests/slurm/cluster.sh" up "$CLUSTER" 2>"$WORK/cluster-up.err")
up_rc=$?
if [ "$up_rc" = 77 ]; then echo "$up_out" | head -n1; exit 77; fi
if [ "$up_rc" != 0 ]; then
    echo "cluster.sh up failed ($up_rc): $(tail -n1 "$WORK/cluster-up.err")"
    FAILED=1; exit 1
fi
export SLURM_CONF=$CLUSTER/slurm.conf

# The corpus: the repository's own docs (committed, so a fresh clone has it; data/ is the demo's
# and absent there), a 512-token BPE trained on it, and its token shard.
DATA=$WORK/data
mkdir -p "$DATA"
cat "$REPO"/README.md "$REPO"/docs/*.md >"$DATA/corpus.txt"
if ! "$ETE" tokenizer train --vocab-size 512 --out "$DATA/tokenizer.json" "$DATA/corpus.txt" \
        >"$DATA/prep.log" 2>&1 ||
   ! "$ETE" tokenize --tokenizer "$DATA/tokenizer.json" --out "$DATA/corpus.bin" \
        "$DATA/corpus.txt" >>"$DATA/prep.log" 2>&1; then
    echo "preparing the corpus failed:"; sed 's/^/    /' "$DATA/prep.log" | tail -n 8
    FAILED=1; exit 1
fi

# The tiny model every case trains; absolute data paths (jobs run anywhere).
TRAIN=(--set model.hidden_size=64 --set model.intermediate_size=128
    --set model.num_layers=2 --set model.num_heads=4 --set model.num_kv_heads=2
    --set train.eval_every=0
    --set "data.train=$DATA/corpus.bin" --set "data.tokenizer=$DATA/tokenizer.json")
STEPS=12              # length of every "full" run: the references use it too
SLOW=slow@ms=1500     # ETE_FAULT making each step last >= 1.5 s

# ---------------------------------------------------------------- helpers

pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
# fail NAME WHY: also shows the end of the case's job output (CI keeps no files).
fail() {
    echo "FAIL $1: $2"; FAILED=$((FAILED + 1))
    [ -s "${D:-}/slurm.out" ] && tail -n 8 "$D/slurm.out" | sed 's/^/    | /'
    return 0
}

# wait_for SECONDS CMD...: poll CMD every 0.2 s; 1 on timeout.
wait_for() {
    local limit=$1 end; shift
    end=$((SECONDS + limit))
    until "$@"; do
        [ "$SECONDS" -ge "$end" ] && return 1
        sleep 0.2
    done
}

job_state() { squeue -h -j "$1" -o %T 2>/dev/null | head -n1; }

# Done: not pending/running/completing (gone from squeue counts as done).
job_done() {
    case $(job_state "$1") in
        PENDING|CONFIGURING|RUNNING|COMPLETING|REQUEUE*|RESIZING|SUSPENDED|STOPPED|SIGNALING) return 1 ;;
    esac
    return 0
}
job_running() { [ "$(job_state "$1")" = RUNNING ]; }

# metrics_lines DIR: steps logged so far in DIR/metrics.jsonl.
metrics_lines() { local n=0; [ -f "$1/metrics.jsonl" ] && n=$(wc -l <"$1/metrics.jsonl"); echo "$n"; }
at_least_lines() { [ "$(metrics_lines "$1")" -ge "$2" ]; }
last_step() {
    [ -s "$1/metrics.jsonl" ] && tail -n1 "$1/metrics.jsonl" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["step"])'
}

# committed_checkpoints DIR: steps (ascending) of DIR/checkpoints/step_N that
# are committed (hold state.json).
committed_checkpoints() {
    local f
    for f in "$1"/checkpoints/step_*/state.json; do
        [ -f "$f" ] || continue
        f=${f%/state.json}; echo $((10#${f##*/step_}))
    done | sort -n
}
newest_checkpoint() { committed_checkpoints "$1" | tail -n1; }

# losses_equal A B RTOL: the runs' metrics.jsonl hold the same steps and their
# losses agree within RTOL (0 = bit-identical).  Prints why not.
losses_equal() {
    python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
def load(p):
    with open(p) as f:
        return [(r["step"], r["loss"]) for r in map(json.loads, f) if r]
a, b, rtol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
if [s for s, _ in a] != [s for s, _ in b]:
    sys.exit(f"steps differ: {[s for s, _ in a]} vs {[s for s, _ in b]}")
for (s, x), (_, y) in zip(a, b):
    if abs(x - y) > rtol * abs(y):
        sys.exit(f"step {s}: loss {x!r} vs {y!r}")
EOF
}

# new_case NAME: fresh WORK/NAME with an empty run dir; sets D.
new_case() { D=$WORK/$1; rm -rf "$D"; mkdir -p "$D/run"; }

# write_job FILE BODY: a batch script with the common prologue.  In BODY,
# `run CMD...` runs CMD in the background and waits for it through any number
# of trapped TERMs, returning its exit code.
write_job() {
    cat >"$1" <<EOF
#!/bin/bash
# generated by tests/slurm/slurm_test.sh
cd $(printf %q "$REPO") || exit 1
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ETE=$(printf %q "$ETE")
TRAIN=($(printf '%q ' "${TRAIN[@]}"))
echo "batch: start job \$SLURM_JOB_ID restart \${SLURM_RESTART_COUNT:-0} at \$EPOCHREALTIME"
# builtins only in the trap (a forked subshell would get the TERM as well)
trap 'echo "batch: SIGTERM at \$EPOCHREALTIME"; echo "\$EPOCHREALTIME" >>"$D/term_at"' TERM
run() {
    "\$@" &
    local pid=\$!
    while kill -0 "\$pid" 2>/dev/null; do wait "\$pid"; done
    wait "\$pid"
}
$2
EOF
    chmod +x "$1"
}

# submit [SBATCH OPTIONS...]: submit D/job.sh (2 tasks), print the job id.
submit() {
    sbatch --parsable -n 2 -J "ete-${D##*/}" --open-mode=append \
        --output="$D/slurm.out" "$@" "$D/job.sh" | cut -d';' -f1
}

# rc_is FILE CODE: FILE holds exit code CODE.
rc_is() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
rc_of() { cat "$1" 2>/dev/null || echo none; }

# stop_checks [nolog]: after a stop by signal, D/run must hold a committed
# checkpoint at the last logged step, and the log the commit line (not with
# `nolog`).  Prints why not and returns 1.
stop_checks() {
    local last ckpt
    last=$(last_step "$D/run")
    ckpt=$(newest_checkpoint "$D/run")
    [ -n "$last" ] || { echo "no step logged"; return 1; }
    [ "$ckpt" = "$last" ] || { echo "newest committed checkpoint '${ckpt}' is not the last logged step $last"; return 1; }
    [ "${1:-}" = nolog ] || grep -q "checkpoint committed .* after SIGTERM" "$D/slurm.out" ||
        { echo "no 'checkpoint committed ... after SIGTERM' line in slurm.out"; return 1; }
}

SRUN="srun -n 2 --mpi=pmix"

# ---------------------------------------------------------------- cases

# 8 (submitted first, checked last). time_limit: `-t 1` job with slow steps
# and checkpoint_before_end_s=50: a checkpoint ~10 s in (before the limit),
# then SIGTERM at the limit (60 s + up to 30 s for slurmctld's periodic check):
# the current step finishes, a checkpoint is committed, exit 4.
TL_JOB=
start_time_limit() {
    new_case time_limit; TL_DIR=$D
    write_job "$D/job.sh" "export ETE_FAULT=$SLOW
run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=100 \\
    --set train.checkpoint_before_end_s=50
echo \$? >$D/rc"
    # partition high: the pre-emption case below must pre-empt its own job, never this one
    TL_JOB=$(submit -t 1 --no-requeue -p high)
}
check_time_limit() {
    local name=time_limit why last ckpts term before=0 c m
    D=$TL_DIR
    wait_for 150 job_done "$TL_JOB" || { fail $name "job $TL_JOB still $(job_state "$TL_JOB") after 150 s"; return; }
    rc_is "$D/rc" 4 || { fail $name "srun exit code $(rc_of "$D/rc"), expected 4"; return; }
    why=$(stop_checks) || { fail $name "$why"; return; }
    term=$(head -n1 "$D/term_at" 2>/dev/null)
    [ -n "$term" ] || { fail $name "the batch shell saw no SIGTERM"; return; }
    # a committed checkpoint older than the SIGTERM (the before-end one)
    ckpts=$(committed_checkpoints "$D/run")
    for c in $ckpts; do
        m=$(stat -c %Y "$D/run/checkpoints/step_$(printf %08d "$c")/state.json")
        [ "$m" -lt "${term%.*}" ] && before=$((before + 1))
    done
    [ "$before" -ge 1 ] || { fail $name "no checkpoint committed before the SIGTERM (committed: $(tr "\n" " " <<<"$ckpts"))"; return; }
    grep -q "time limit is .* away: checkpointing now" "$D/slurm.out" ||
        { fail $name "no 'time limit is ... away: checkpointing now' line"; return; }
    pass $name
}

# Waits for two logged steps in $D/run, scancels the job and waits for it to end; prints why not.
scancel_after_two_steps() {
    local job=$1
    wait_for 60 at_least_lines "$D/run" 2 || { echo "fewer than 2 steps after 60 s (job $(job_state "$job"))"; return 1; }
    scancel "$job"
    wait_for 40 job_done "$job" || { echo "job $job still $(job_state "$job") 40 s after scancel"; return 1; }
}

# 0. 1-process reference, run directly (outside Slurm).
REF1=$WORK/ref1
if ! "$ETE" train --out "$REF1" "${TRAIN[@]}" --set train.steps=$STEPS >"$WORK/ref1.log" 2>&1; then
    echo "the 1-process reference run (outside Slurm) failed; every case needs it:"
    tail -n 8 "$WORK/ref1.log" | sed 's/^/    | /'
    FAILED=1; exit 1
fi

# 1. srun_basics: a 2-rank srun job completes (exit 0, final/), with the
# 1-process losses within 1e-4 relative. Estimate: dp = 2 only reorders the fp32
# sums of the gradients (and of the loss): per element a relative change of at
# most gamma_prob(n) = 6 sqrt(n) u ~ 1.6e-5 for n ~ 2048 summed terms (u = 2^-24,
# tests/numerics.h); AdamW's update m/sqrt(v) is scale-free, so each of the 12
# steps moves a weight by at most lr (1e-3) x that, ~2e-7 over the run, far
# below what changes a loss of ~4-10 by 1e-4 relative. The C++ parity tests
# (tests/cli/parallel_fixture.h, parity_tolerance) hold the same runs tighter,
# under every kernel choice. Its run dir is the 2-rank reference of the
# resume cases.
REF2=
case_srun_basics() {
    local name=srun_basics job why
    new_case $name
    write_job "$D/job.sh" "run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS
echo \$? >$D/rc"
    job=$(submit --no-requeue)
    wait_for 60 job_done "$job" || { fail $name "job $job still $(job_state "$job") after 60 s"; return; }
    rc_is "$D/rc" 0 || { fail $name "srun exit code $(rc_of "$D/rc")"; return; }
    [ -d "$D/run/final" ] || { fail $name "no final/"; return; }
    [ "$(metrics_lines "$D/run")" = $STEPS ] || { fail $name "$(metrics_lines "$D/run") metrics lines, expected $STEPS"; return; }
    why=$(losses_equal "$D/run" "$REF1" 1e-4 2>&1) || { fail $name "2 ranks vs 1 process: $why"; return; }
    REF2=$D/run
    pass $name
}

# 2. scancel_srun: scancel an srun job mid-step: the ranks finish the step,
# commit a checkpoint at it and exit 4.  Then `--resume auto` in a new job
# continues to the end with the uninterrupted 2-rank run's losses, bit for bit.
case_scancel_srun() {
    local name=scancel_srun job why
    new_case $name
    write_job "$D/job.sh" "export ETE_FAULT=$SLOW
run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS
echo \$? >$D/rc"
    job=$(submit --no-requeue)
    why=$(scancel_after_two_steps "$job") || { fail $name "$why"; return; }
    rc_is "$D/rc" 4 || { fail $name "srun exit code $(rc_of "$D/rc") after scancel, expected 4"; return; }
    why=$(stop_checks) || { fail $name "$why"; return; }
    [ "$(last_step "$D/run")" -lt $STEPS ] || { fail $name "the run finished before the scancel"; return; }
    [ -n "$REF2" ] || { fail $name "stop OK; no 2-rank reference (srun_basics failed) to check the resume"; return; }

    # resume, without the slow fault
    write_job "$D/job.sh" "run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS --resume auto
echo \$? >$D/rc2"
    job=$(submit --no-requeue)
    wait_for 60 job_done "$job" || { fail $name "resume job $job still $(job_state "$job") after 60 s"; return; }
    rc_is "$D/rc2" 0 || { fail $name "resumed run's exit code $(rc_of "$D/rc2")"; return; }
    [ -d "$D/run/final" ] || { fail $name "resumed run: no final/"; return; }
    why=$(losses_equal "$D/run" "$REF2" 0 2>&1) || { fail $name "resumed vs uninterrupted: $why"; return; }
    pass $name
}

# 3. scancel_mpirun: `exec mpirun` with the long sigkill timeout; the ranks get
# the TERM from slurmstepd and checkpoint.  (exec: no exit code to record.
# mpirun stops forwarding the ranks' output once it has the TERM itself, so
# the "checkpoint committed" line never reaches slurm.out: not checked.)
case_scancel_mpirun() {
    local name=scancel_mpirun job why
    new_case $name
    write_job "$D/job.sh" "export ETE_FAULT=$SLOW
exec mpirun -n 2 --oversubscribe --mca odls_base_sigkill_timeout 60 \\
    \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS"
    job=$(submit --no-requeue)
    why=$(scancel_after_two_steps "$job") || { fail $name "$why"; return; }
    why=$(stop_checks nolog) || { fail $name "$why"; return; }
    pass $name
}

# 4. scancel_launch: `ete launch -n 2` (mpirun shielded from TERM, SIGUSR2 to
# the ranks): checkpoint, and exit code 4 through ete launch.
case_scancel_launch() {
    local name=scancel_launch job why
    new_case $name
    write_job "$D/job.sh" "export ETE_FAULT=$SLOW
run \$ETE launch -n 2 -- train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS
echo \$? >$D/rc"
    job=$(submit --no-requeue)
    why=$(scancel_after_two_steps "$job") || { fail $name "$why"; return; }
    rc_is "$D/rc" 4 || { fail $name "ete launch exit code $(rc_of "$D/rc") after scancel, expected 4"; return; }
    why=$(stop_checks) || { fail $name "$why"; return; }
    pass $name
}

# 5. usr1_startup: SIGUSR1 to the step's tasks (`scancel -s USR1`: job steps
# only, not the batch shell) while ete is still starting (banner printed, no
# step yet): not killed, a checkpoint after the first step, run completes.
banner_printed() { grep -q "^ete train:" "$D/slurm.out" 2>/dev/null; }
case_usr1_startup() {
    local name=usr1_startup job lines n
    new_case $name
    write_job "$D/job.sh" "export ETE_FAULT=$SLOW
run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=4
echo \$? >$D/rc"
    job=$(submit --no-requeue)
    # The banner comes after MPI init: every rank has its handlers by then.
    wait_for 60 banner_printed || { fail $name "no 'ete train:' banner after 60 s (job $(job_state "$job"))"; return; }
    lines=$(metrics_lines "$D/run")
    scancel -s USR1 "$job" || { fail $name "scancel -s USR1 failed"; return; }
    wait_for 60 job_done "$job" || { fail $name "job $job still $(job_state "$job") after 60 s"; return; }
    [ "$lines" = 0 ] || { fail $name "test timing: step $lines was already logged when USR1 was sent"; return; }
    rc_is "$D/rc" 0 || { fail $name "srun exit code $(rc_of "$D/rc") after USR1, expected 0"; return; }
    [ -d "$D/run/final" ] || { fail $name "no final/"; return; }
    n=$(committed_checkpoints "$D/run" | wc -l)
    [ "$n" -ge 1 ] || { fail $name "no committed checkpoint besides final/"; return; }
    pass $name
}

# 6. requeue_resume: `scontrol requeue` a --requeue job mid-run: it checkpoints
# and stops; Slurm restarts it (SLURM_RESTART_COUNT=1) and ete resumes on its
# own (no --resume in the script), ending with the uninterrupted losses.
# Slurm holds a requeued job for cred_expire (CRED_EXPIRE) seconds and then
# starts it only at its next periodic scheduling pass (up to ~30 s more): once
# the hold is over, `scontrol update StartTime=now` makes it start at once.
eligible() {   # the job's EligibleTime has passed
    local t
    t=$(scontrol show job "$1" 2>/dev/null | grep -o 'EligibleTime=[^ ]*' | cut -d= -f2)
    t=${t%%$'\n'*}  # a requeued job can be listed twice: its first record
    [ -n "$t" ] && [ "$t" != Unknown ] && [ "$(date -d "$t" +%s)" -le "$(date +%s)" ]
}
poke_requeued() {   # start the requeued job JOB once its hold is over
    if [ "$(job_state "$1")" = PENDING ] && eligible "$1"; then
        scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
    fi
    return 0
}
restarted_and_done() { poke_requeued "$1"; [ -f "$D/rc.1" ] && job_done "$1"; }
case_requeue_resume() {
    local name=requeue_resume job why
    new_case $name
    write_job "$D/job.sh" "# the first attempt is slow, the restarted one is not
[ \"\${SLURM_RESTART_COUNT:-0}\" = 0 ] && export ETE_FAULT=$SLOW
run $SRUN \$ETE train --out $D/run \"\${TRAIN[@]}\" --set train.steps=$STEPS
echo \$? >$D/rc.\${SLURM_RESTART_COUNT:-0}"
    job=$(submit --requeue)
    wait_for 60 at_least_lines "$D/run" 2 || { fail $name "fewer than 2 steps after 60 s (job $(job_state "$job"))"; return; }
    scontrol requeue "$job" || { fail $name "scontrol requeue failed"; return; }
    wait_for $((CRED_EXPIRE + 90)) restarted_and_done "$job" ||
        { fail $name "no finished restart after $((CRED_EXPIRE + 90)) s (job $(job_state "$job"), rc.0=$(rc_of "$D/rc.0"))"; return; }
    rc_is "$D/rc.0" 4 || { fail $name "first attempt's exit code $(rc_of "$D/rc.0"), expected 4"; return; }
    rc_is "$D/rc.1" 0 || { fail $name "restarted attempt's exit code $(rc_of "$D/rc.1")"; return; }
    grep -q "SLURM_RESTART_COUNT=1.*--resume auto" "$D/slurm.out" ||
        { fail $name "the restarted run did not log 'Slurm requeue (SLURM_RESTART_COUNT=1): --resume auto'"; return; }
    [ -d "$D/run/final" ] || { fail $name "no final/"; return; }
    [ -n "$REF2" ] || { fail $name "no 2-rank reference (srun_basics failed)"; return; }
    why=$(losses_equal "$D/run" "$REF2" 0 2>&1) || { fail $name "requeued vs uninterrupted: $why"; return; }
    pass $name
}

# 7. preempt_requeue: the shipped examples/slurm/srun.sbatch, --requeue in
# partition low (GraceTime 30 s), pre-empted by a job in high: srun's tasks get
# SIGTERM at once, checkpoint at the last step and exit 4.  Slurm requeues only
# a job still running when GraceTime is over (FINDINGS.md, 5): the script must
# requeue itself.  The requeued attempt resumes by itself and ends with the
# uninterrupted losses.  Sizes: the node has 8 CPUs, the time_limit job holds
# 2 (in high: not pre-emptable), this one 4 (-c 2), the pre-emptor asks for 5:
# it fits only once this job is gone, with or without the time_limit job.
committed_after_sigterm() { grep -q "checkpoint committed .* after SIGTERM" "$D/slurm.out" 2>/dev/null; }
resumed_and_done() {   # the requeued attempt logged its resume and the job ended
    poke_requeued "$1"
    grep -q "SLURM_RESTART_COUNT=1.*--resume auto" "$D/slurm.out" && job_done "$1"
}
case_preempt_requeue() {
    local name=preempt_requeue job why
    new_case $name
    # the example reads its settings from a config file: the same run as TRAIN
    cat >"$D/tiny.toml" <<EOF
[model]
hidden_size = 64
intermediate_size = 128
num_layers = 2
num_heads = 4
num_kv_heads = 2
[train]
eval_every = 0
steps = $STEPS
[data]
train = "$DATA/corpus.bin"
tokenizer = "$DATA/tokenizer.json"
EOF
    # The example's #SBATCH lines ask for 2 nodes x 16 CPUs and 24G: one node here.
    job=$(ETE=$ETE CONFIG=$D/tiny.toml RUN_DIR=$D/run ETE_FAULT=$SLOW \
        sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -c 2 --mem=100 -J ete-$name \
        --output="$D/slurm.out" "$REPO/examples/slurm/srun.sbatch" | cut -d';' -f1)
    [ -n "$job" ] || { fail $name "sbatch examples/slurm/srun.sbatch failed"; return; }
    wait_for 60 at_least_lines "$D/run" 2 || { fail $name "fewer than 2 steps after 60 s (job $(job_state "$job"))"; return; }
    sbatch -Q -p high -n 5 -J ete-preemptor -o /dev/null --wrap true ||
        { fail $name "could not submit the pre-empting job"; return; }
    # A requeued job is held CRED_EXPIRE s: the stopped attempt's files stay as it left them.
    wait_for 40 committed_after_sigterm ||
        { fail $name "no 'checkpoint committed ... after SIGTERM' 40 s after the pre-empting job (job $(job_state "$job"))"; return; }
    why=$(stop_checks) || { fail $name "$why"; return; }
    [ "$(last_step "$D/run")" -lt $STEPS ] || { fail $name "the run finished before the pre-emption"; return; }
    wait_for $((CRED_EXPIRE + 90)) resumed_and_done "$job" ||
        { fail $name "no resumed attempt that finished after $((CRED_EXPIRE + 90)) s (job $(job_state "$job")): not requeued?"; return; }
    [ -d "$D/run/final" ] || { fail $name "no final/"; return; }
    [ -n "$REF2" ] || { fail $name "no 2-rank reference (srun_basics failed)"; return; }
    why=$(losses_equal "$D/run" "$REF2" 0 2>&1) || { fail $name "requeued vs uninterrupted: $why"; return; }
    pass $name
}

# ---------------------------------------------------------------- run

[ "${SKIP_TIME_LIMIT:-0}" = 1 ] || start_time_limit
case_srun_basics
case_scancel_srun
case_scancel_mpirun
case_scancel_launch
case_usr1_startup
case_requeue_resume
case_preempt_requeue
[ -z "$TL_JOB" ] || check_time_limit

echo "($((SECONDS - T_START)) s)" >&2
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
