#!/usr/bin/env bash
# bench/plan_validation.sh — the planner's predicted step time against the measured one on this
# machine (issue 32 item 6): for every layout of the bench model (bench_toml.sh: Llama, V 8192,
# C 512, L 8, ~32M parameters, T 256) on 1, 2 and 4 ranks, in fp32 and bf16,
#   predicted: `ete launch -n N -- plan --cluster local --layout <that layout> --json` — the job
#              measured as parallel.auto measures it (docs/planner.md), the cost model's total
#   measured:  `ete launch -n N -- train` with the layout, the median step_ms of the steps after
#              WARMUP
# side by side in one run, as a Markdown table with the error (predicted / measured − 1).
#
# Environment: BUILD_DIR (default build), STEPS (8), WARMUP (3), B (micro-batch rows, 4),
# LAYOUTS (default: all below; "N dp tp pp grad_accum" entries separated by ';'),
# PRECISIONS ("fp32 bf16"). About 6 minutes on an idle 2-core machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
B=${B:-4}
T=256
PRECISIONS=${PRECISIONS:-fp32 bf16}
LAYOUTS=${LAYOUTS:-"1 1 1 1 1;2 2 1 1 1;2 1 2 1 1;2 1 1 2 4;4 4 1 1 1;4 2 2 1 1;4 2 1 2 4;4 1 2 2 4"}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$ETE" ] || { echo "plan_validation.sh: $ETE not built" >&2; exit 1; }

python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 2000000 8192
# shellcheck source=bench/bench_toml.sh
source "$ROOT/bench/bench_toml.sh"
write_bench_toml "$WORK/bench.toml" "$T" "$STEPS" "$WORK/toks.bin"

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(date -u +%F)"
echo
echo "| ranks | dp | tp | pp | micro-batches | precision | predicted s | measured s | error |"
echo "|---:|---:|---:|---:|---:|---|---:|---:|---:|"
IFS=';' read -ra rows <<< "$LAYOUTS"
for row in "${rows[@]}"; do
    read -r n dp tp pp ga <<< "$row"
    for p in $PRECISIONS; do
        layout="dp=$dp,tp=$tp,pp=$pp,micro_batch=$B,grad_accum=$ga,recompute=none,zero_stage=0"
        layout+=",precision=$p,method=full"
        pred=$("$ETE" launch -n "$n" -- plan --model "$WORK/bench.toml" --cluster local \
            --seq "$T" --global-batch $((B * ga)) --layout "$layout" --json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["best"]["predicted_step_s"])')
        out="$WORK/run_${n}_${dp}_${tp}_${pp}_$p"
        "$ETE" launch -n "$n" -- train "$WORK/bench.toml" --out "$out" \
            --set parallel.dp="$dp" --set parallel.tp="$tp" --set parallel.pp="$pp" \
            --set train.micro_batch="$B" --set train.grad_accum="$ga" \
            --set train.precision="$p" > "$out.log" 2>&1
        meas=$(python3 - "$out/metrics.jsonl" "$WARMUP" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
print(statistics.median(r["step_ms"] for r in rows) / 1e3)
PY
)
        python3 -c "import sys; n,dp,tp,pp,ga,p,a,b=sys.argv[1:]; a=float(a); b=float(b); \
print(f'| {n} | {dp} | {tp} | {pp} | {ga} | {p} | {a:.3f} | {b:.3f} | {100*(a/b-1):+.0f}% |')" \
            "$n" "$dp" "$tp" "$pp" "$ga" "$p" "$pred" "$meas"
    done
done
