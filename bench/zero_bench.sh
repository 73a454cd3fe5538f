#!/usr/bin/env bash
# bench/zero_bench.sh — ZeRO stages side by side (issue 31): `ete train` on the bench model over
# DP data-parallel ranks (`ete launch -n DP`, one core's share each), micro-batch B rows per
# replica, GRAD_ACCUM micro-batches per step, each stage of STAGES interleaved over ROUNDS. Prints
# a Markdown table of medians: tokens/s, the peak RSS of the largest rank (the trainer's
# "memory: measured peak RSS" line after step 3) beside the estimate it printed at start, both
# against stage 0, and the largest rank's peak over the whole run, the save of final/ included
# (getrusage of the launcher's children).
#
# Environment: BUILD_DIR (default build), DP (2), B (1), GRAD_ACCUM (1), T (256), STEPS (8),
# WARMUP (3), ROUNDS (3), STAGES ("0 1 2"), SETS (extra --set overrides for every run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
DP=${DP:-2}
B=${B:-1}
GRAD_ACCUM=${GRAD_ACCUM:-1}
T=${T:-256}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
STAGES=${STAGES:-0 1 2}
SETS=${SETS:-}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
log() { printf '==> %s\n' "$*" >&2; }
[ -x "$ETE" ] || { echo "zero_bench.sh: $ETE not built (ninja -C $BUILD_DIR ete)" >&2; exit 1; }

python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 2000000 8192
# shellcheck source=bench/bench_toml.sh
source "$ROOT/bench/bench_toml.sh"
write_bench_toml "$WORK/bench.toml" "$T" "$STEPS" "$WORK/toks.bin"
log "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); dp=$DP B=$B grad_accum=$GRAD_ACCUM; $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    for s in $STAGES; do
        log "round $r/$ROUNDS: stage $s"
        # shellcheck disable=SC2086  # SETS is words
        python3 "$ROOT/bench/peak_rss.py" "$WORK/s${s}_$r.peak" \
            "$ETE" launch -n "$DP" -- train "$WORK/bench.toml" --out "$WORK/s${s}_$r" \
            --set parallel.dp="$DP" --set parallel.zero_stage="$s" \
            --set train.micro_batch=$((DP * B)) --set train.grad_accum="$GRAD_ACCUM" \
            --set train.log_every=1 $SETS > "$WORK/s${s}_$r.log" 2>&1 ||
            { cat "$WORK/s${s}_$r.log" >&2; exit 1; }
    done
done
log "$(uptime)"
python3 - "$WORK" "$ROUNDS" "$STAGES" "$WARMUP" <<'PY'
import json, re, statistics, sys
work, rounds, stages, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
med = statistics.median
UNIT = {"MiB": 1, "GiB": 1024}
def mib(num, unit): return float(num) * UNIT[unit]
rows, base = [], {}
for s in stages:
    tps, rss, est, run = [], [], [], []
    for r in range(1, rounds + 1):
        steps = [json.loads(l) for l in open(f"{work}/s{s}_{r}/metrics.jsonl")][warm:]
        tps.append(med([x["tokens_per_s"] for x in steps]))
        m = re.search(r"measured peak RSS ([\d.]+) (MiB|GiB) against the estimated peak "
                      r"([\d.]+) (MiB|GiB)", open(f"{work}/s{s}_{r}.log").read())
        rss.append(mib(m.group(1), m.group(2)))
        est.append(mib(m.group(3), m.group(4)))
        run.append(float(open(f"{work}/s{s}_{r}.peak").read()) / 1024)
    rows.append((s, med(tps), tps, med(rss), med(est), med(run)))
    if s == "0": base = {"tps": med(tps), "rss": med(rss)}
print("| ZeRO stage | tokens/s | per round | peak RSS MiB (largest rank) | estimate MiB | "
      "tokens/s vs stage 0 | RSS vs stage 0 | whole run's peak MiB (final/ saved) |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for s, t, ts, r, e, w in rows:
    rel = lambda x, k: f"{x / base[k]:.3f}" if base else "—"
    print(f"| {s} | {t:.0f} | {' '.join(f'{x:.0f}' for x in ts)} | {r:.0f} | {e:.0f} | "
          f"{rel(t, 'tps')} | {rel(r, 'rss')} | {w:.0f} |")
PY
