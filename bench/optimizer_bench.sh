#!/usr/bin/env bash
# bench/optimizer_bench.sh — 8-bit AdamW against AdamW (issue 31), side by side: ete_bench_train on
# MODEL in fp32 and bf16 with each optimizer, interleaved over ROUNDS rounds. Prints a Markdown
# table of medians: step time, the optimizer's part of it, the process's peak RSS and the
# optimizer state's bytes per parameter as allocated (Optimizer::state_bytes).
#
# Environment: BUILD_DIR (default build), ROUNDS (3), STEPS (8), WARMUP (3), THREADS (2),
# MODEL (llama-bench), PYTHON (python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
MODEL=${MODEL:-llama-bench}
PYTHON=${PYTHON:-python3}
ete=$BUILD_DIR/bench/ete_bench_train
[ -x "$ete" ] || { echo "optimizer_bench.sh: build $ete first (cmake -DETE_BUILD_BENCH=ON $BUILD_DIR && cmake --build $BUILD_DIR)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log() { printf '==> %s\n' "$*" >&2; }
runs="fp32:adamw fp32:adamw8bit bf16:adamw bf16:adamw8bit"
log "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); $MODEL; $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    for run in $runs; do
        log "round $r: $MODEL ${run%%:*} ${run##*:}"
        "$ete" --model "$MODEL" --precision "${run%%:*}" --optimizer "${run##*:}" \
            --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" --json \
            > "$out/${run/:/_}_$r.json"
    done
done
log "$(uptime)"
"$PYTHON" - "$out" "$ROUNDS" "$runs" "$MODEL" <<'PY'
import json, statistics, sys
out, rounds, runs, model = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
def load(run):
    return [json.load(open(f"{out}/{run.replace(':', '_')}_{r}.json")) for r in range(1, rounds + 1)]
med = lambda xs: statistics.median(xs)
base = {}
print(f"\n{model}: medians of {rounds} interleaved rounds (each round: the median of its steps)\n")
print("| precision, optimizer | step ms | rounds | optimizer ms | peak RSS MiB | state B/param | step vs AdamW | RSS vs fp32 AdamW |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for run in runs:
    js = load(run)
    step = med([j["median_step_ms"] for j in js])
    opt = med([j["parts_median_ms"]["adamw"] for j in js])
    rss = med([j["peak_rss_mib"] for j in js])
    prec, kind = run.split(":")
    if kind == "adamw": base[prec] = step
    if run == "fp32:adamw": base["rss"] = rss
    each = ", ".join("%.0f" % j["median_step_ms"] for j in js)
    print(f"| {prec}, {kind} | {step:.1f} | {each} | "
          f"{opt:.1f} | {rss:.0f} | {js[0]['optimizer_bytes_per_param']:.3f} | "
          f"{step / base[prec]:.3f} | {rss / base['rss']:.3f} |")
PY
