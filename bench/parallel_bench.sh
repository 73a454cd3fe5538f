#!/usr/bin/env bash
# bench/parallel_bench.sh — data, tensor and pipeline parallelism of `ete train` on the bench model
# (≈32M parameters: Llama, V=8192, C=512, F=1408, L=8, H=8/4, the model of ete_bench_train), every
# rank on one core (OMP_NUM_THREADS=1), interleaved over ROUNDS, medians of steps after WARMUP:
#
#   one    1 process, micro_batch B                    (one core's worth of work)
#   dp2    2 processes, parallel.dp=2, micro_batch 2B  (each replica runs B rows: same work each)
#   tp2    2 processes, parallel.tp=2, micro_batch B   (the same model and batch as dp2's replica,
#          split across 2 ranks)
#   pp2/m  2 processes, parallel.pp=2, micro_batch B, grad_accum m for m in PP_MICRO (1F1B)
#
# Reports tokens/s, DP scaling efficiency dp2 / (2 × one) and the share of the dp2 step blocked on
# gradient all-reduce after backward, tp2's share of the step in tensor-parallel all-reduces, and
# the pipeline bubble (mean over stages of 1 − compute/step) beside (p−1)/(m+p−1). Extra `--set`
# overrides for every run go in SETS (e.g. SETS="--set parallel.overlap=false").
#
# Environment: BUILD_DIR (default build), B (4), T (256), STEPS (10), WARMUP (3), ROUNDS (3),
# PP_MICRO ("4 8 16"), PP_STEPS (4). About 10 minutes on an idle 2-core machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
B=${B:-4}
T=${T:-256}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
PP_MICRO=${PP_MICRO:-4 8 16}
PP_STEPS=${PP_STEPS:-4}
SETS=${SETS:-}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

log() { printf '==> %s\n' "$*" >&2; }
[ -x "$ETE" ] || { echo "parallel_bench.sh: $ETE not built (ninja -C $BUILD_DIR ete)" >&2; exit 1; }

python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 2000000 8192
# shellcheck source=bench/bench_toml.sh
source "$ROOT/bench/bench_toml.sh"
write_bench_toml "$WORK/bench.toml" "$T" "$STEPS" "$WORK/toks.bin"

# median over steps > WARMUP of a metrics.jsonl field (or a ratio of two fields)
median() {
    python3 - "$1" "${WARM:-$WARMUP}" "$2" "${3:-}" <<'PY'
import json, statistics, sys
path, warm, key, den = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(path)][warm:]
vals = [r[key] / r[den] if den else r[key] for r in rows]
print(f"{statistics.median(vals):.4f}")
PY
}

one=()
dp2=()
dp_wait=()
tp2=()
tp_comm=()
log "load before: $(uptime)"
run1() { OMP_NUM_THREADS=1 "$ETE" train "$WORK/bench.toml" --out "$1" "${@:2}" $SETS 2>/dev/null; }
run2() { "$ETE" launch -n 2 -- train "$WORK/bench.toml" --out "$1" "${@:2}" $SETS 2>/dev/null; }
for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS: one, dp2, tp2"
    run1 "$WORK/one$r" --set train.micro_batch="$B"
    one+=("$(median "$WORK/one$r/metrics.jsonl" tokens_per_s)")
    run2 "$WORK/dp$r" --set train.micro_batch=$((2 * B)) --set parallel.dp=2
    dp2+=("$(median "$WORK/dp$r/metrics.jsonl" tokens_per_s)")
    dp_wait+=("$(median "$WORK/dp$r/metrics.jsonl" comm_wait_ms step_ms)")
    run2 "$WORK/tp$r" --set train.micro_batch="$B" --set parallel.tp=2
    tp2+=("$(median "$WORK/tp$r/metrics.jsonl" tokens_per_s)")
    tp_comm+=("$(median "$WORK/tp$r/metrics.jsonl" tp_comm_ms step_ms)")
done
pp_rows=""
for m in $PP_MICRO; do
    log "pp=2, m=$m"
    run2 "$WORK/pp$m" --set train.micro_batch="$B" --set parallel.pp=2 --set train.grad_accum="$m" \
        --set train.steps="$PP_STEPS"
    pp_rows+="$m $(WARM=1 median "$WORK/pp$m/metrics.jsonl" pp_bubble)"
    pp_rows+=" $(WARM=1 median "$WORK/pp$m/metrics.jsonl" pp_bubble_theory)"
    pp_rows+=" $(WARM=1 median "$WORK/pp$m/metrics.jsonl" tokens_per_s);"
done
python3 - "${one[*]}" "${dp2[*]}" "${dp_wait[*]}" "${tp2[*]}" "${tp_comm[*]}" "$pp_rows" <<'PY'
import statistics, sys
one, dp2, wait, tp2, tpc = ([float(x) for x in a.split()] for a in sys.argv[1:6])
med = statistics.median
m1, m2, mt = med(one), med(dp2), med(tp2)
def row(name, xs):
    print(f"| {name} | {med(xs):.0f} | {' '.join(f'{x:.0f}' for x in xs)} |")
print("| run | tokens/s (median of rounds) | per round |")
print("|---|---|---|")
row("one: 1 process, 1 core, micro_batch B", one)
row("dp2: 2 processes × 1 core, micro_batch 2B", dp2)
row("tp2: 2 processes × 1 core, micro_batch B", tp2)
print()
print(f"- DP scaling efficiency dp2 / (2 × one) = {m2 / (2 * m1):.3f}; "
      f"dp2 step blocked on gradient all-reduce after backward: {100 * med(wait):.1f}%")
print(f"- tp2 vs one (same model and micro-batch, 2 cores vs 1): {mt / m1:.2f}× "
      f"(efficiency {mt / (2 * m1):.3f}); tp2 / dp2 on the same 2 cores: {mt / m2:.2f}; "
      f"tp all-reduces take {100 * med(tpc):.1f}% of the tp2 step")
print()
print("| pp=2, micro-batches m | measured bubble | theory (p−1)/(m+p−1) | tokens/s |")
print("|---|---|---|---|")
for r in sys.argv[6].strip(";").split(";"):
    m, b, t, tps = r.split()
    print(f"| {m} | {float(b):.3f} | {float(t):.3f} | {float(tps):.0f} |")
PY
