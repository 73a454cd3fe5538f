#!/usr/bin/env bash
# bench/dp_scaling.sh — data-parallel scaling of `ete train` on the bench model (≈32M parameters:
# Llama, V=8192, C=512, F=1408, L=8, H=8/4, the model of ete_bench_train).
#
# Runs, interleaved ROUNDS times:
#   one   1 process, 1 OpenMP thread, micro_batch B          (one core's worth of work)
#   dp2   `ete launch -n 2` with parallel.dp=2, micro_batch 2B: each replica runs B rows on its
#         own core (1 thread each), so the work per replica equals `one`
# and reports the median tokens/s of each (steps after WARMUP), the scaling efficiency
# dp2 / (2 × one), and the share of the dp2 step spent waiting on gradient all-reduces after
# backward (comm_wait_ms / step_ms). Extra `--set` overrides for both runs go in SETS, e.g.
# SETS="--set parallel.overlap=false".
#
# Environment: BUILD_DIR (default build), B (4), T (256), STEPS (12), WARMUP (3), ROUNDS (3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
B=${B:-4}
T=${T:-256}
STEPS=${STEPS:-12}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
SETS=${SETS:-}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

log() { printf '==> %s\n' "$*" >&2; }
[ -x "$ETE" ] || { echo "dp_scaling.sh: $ETE not built (ninja -C $BUILD_DIR ete)" >&2; exit 1; }

# A token shard of random ids (docs/formats.md: ETETOK01, u32 bytes/token, u32 vocab, u64 count).
python3 - "$WORK/toks.bin" <<'PY'
import random, struct, sys
n, v = 2_000_000, 8192
rng = random.Random(1)
with open(sys.argv[1], "wb") as f:
    f.write(b"ETETOK01" + struct.pack("<IIQ", 2, v, n))
    f.write(struct.pack(f"<{n}H", *(rng.randrange(v) for _ in range(n))))
PY
cat >"$WORK/bench.toml" <<EOF
[model]
vocab_size = 8192
hidden_size = 512
intermediate_size = 1408
num_layers = 8
num_heads = 8
num_kv_heads = 4
max_position_embeddings = $T
tie_word_embeddings = false
[train]
steps = $STEPS
seq_len = $T
grad_accum = 1
warmup_steps = 2
eval_every = 0
log_every = 1000
[data]
train = "$WORK/toks.bin"
tokenizer = ""
val_fraction = 0.0
EOF

# median over steps > WARMUP of a metrics.jsonl field (or a ratio of two fields)
median() {
    python3 - "$1" "$WARMUP" "$2" "${3:-}" <<'PY'
import json, statistics, sys
path, warm, key, den = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(path)][warm:]
vals = [r[key] / r[den] if den else r[key] for r in rows]
print(f"{statistics.median(vals):.4f}")
PY
}

one=()
dp2=()
wait_share=()
log "load before: $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS: 1 process, 1 thread, micro_batch $B"
    OMP_NUM_THREADS=1 "$ETE" train "$WORK/bench.toml" --out "$WORK/one$r" \
        --set train.micro_batch="$B" $SETS 2>/dev/null
    one+=("$(median "$WORK/one$r/metrics.jsonl" tokens_per_s)")
    log "round $r/$ROUNDS: 2 processes (dp=2), 1 thread each, micro_batch $((2 * B))"
    "$ETE" launch -n 2 -- train "$WORK/bench.toml" --out "$WORK/dp$r" \
        --set train.micro_batch=$((2 * B)) --set parallel.dp=2 $SETS 2>/dev/null
    dp2+=("$(median "$WORK/dp$r/metrics.jsonl" tokens_per_s)")
    wait_share+=("$(median "$WORK/dp$r/metrics.jsonl" comm_wait_ms step_ms)")
done
python3 - "${one[*]}" "${dp2[*]}" "${wait_share[*]}" <<'PY'
import statistics, sys
one, dp2, wait = ([float(x) for x in a.split()] for a in sys.argv[1:4])
m1, m2, w = statistics.median(one), statistics.median(dp2), statistics.median(wait)
print("| run | tokens/s (median of rounds) | per round |")
print("|---|---|---|")
print(f"| 1 process, 1 core | {m1:.0f} | {' '.join(f'{x:.0f}' for x in one)} |")
print(f"| dp=2, 2 processes × 1 core | {m2:.0f} | {' '.join(f'{x:.0f}' for x in dp2)} |")
print()
print(f"scaling efficiency dp2 / (2 × one) = {m2 / (2 * m1):.3f}")
print(f"dp=2 step time spent waiting on gradient all-reduce after backward: {100 * w:.1f}%")
PY
