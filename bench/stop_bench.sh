#!/usr/bin/env bash
# bench/stop_bench.sh — the time from SIGTERM to a committed checkpoint (docs/operations.md,
# Slurm): ROUNDS runs of `ete train CONFIG` each get a SIGTERM at a random moment of step 3..5;
# the run logs "checkpoint committed X s after SIGTERM" and the step and checkpoint times. Prints
# each round and the median, with the step time and checkpoint time beside it.
#   CONFIG (default examples/llama_bench.toml), SET (extra --set args, e.g. "--set
#   model.init_from=/tmp/llama-1b --set train.precision=bf16"), RANKS (1, or N for `ete launch
#   -n N`: the ranks then time from the SIGUSR2 the launcher turns the SIGTERM into), ROUNDS
#   (default 5), BUILD_DIR (default build), OUT (default /tmp/ete_stop_bench).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CONFIG=${CONFIG:-examples/llama_bench.toml}
SET=${SET:-}
RANKS=${RANKS:-1}
ROUNDS=${ROUNDS:-5}
OUT=${OUT:-/tmp/ete_stop_bench}
mkdir -p "$OUT"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') | $CONFIG $SET | ranks $RANKS"
lines() { [ -f "$1/metrics.jsonl" ] && wc -l < "$1/metrics.jsonl" || echo 0; }
for r in $(seq 1 "$ROUNDS"); do
    run="$OUT/r$r"
    rm -rf "$run"
    cmd=("$BUILD_DIR/ete" train "$CONFIG" --out "$run" --set train.log_every=1 --set train.eval_every=0)
    [ "$RANKS" -gt 1 ] && cmd=("$BUILD_DIR/ete" launch -n "$RANKS" -- "${cmd[@]:1}")
    # shellcheck disable=SC2086
    "${cmd[@]}" $SET > "$run.log" 2>&1 &
    pid=$!
    until [ "$(lines "$run")" -ge 3 ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    step_s=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])['step_ms']/1e3)" "$run/metrics.jsonl")
    sleep "$(python3 -c "import random,sys; print(random.uniform(0, float(sys.argv[1])))" "$step_s")"
    kill -TERM "$pid"
    rc=0; wait "$pid" || rc=$?
    committed=$(sed -n 's/.*checkpoint committed \([0-9.]*\) s after SIG[A-Z0-9]*.*/\1/p' "$run.log" | head -1)
    save=$(sed -n 's/^checkpoint: .*(\([0-9.]*\)s)$/\1/p' "$run.log" | tail -1)
    echo "round $r: exit $rc | step ${step_s} s | checkpoint ${save:-?} s | SIGTERM -> committed ${committed:-none} s"
    echo "$committed" >> "$OUT/committed.txt"
done
python3 - "$OUT/committed.txt" "$ROUNDS" <<'PY'
import statistics, sys
v = [float(x) for x in open(sys.argv[1]).read().split()[-int(sys.argv[2]):] if x]
print(f"SIGTERM -> committed: median {statistics.median(v):.2f} s, max {max(v):.2f} s over {len(v)} rounds")
PY
