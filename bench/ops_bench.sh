#!/usr/bin/env bash
# bench/ops_bench.sh — what operations cost (docs/benchmarks.md, Operations):
#
#   overhead  the bench model (≈32M-parameter Llama, docs/benchmarks.md) on 2 ranks (dp = 2, one
#             core each), monitoring off (monitor.watchdog = false, no Prometheus, no TensorBoard,
#             no straggler gather) against on (flight recorder + watchdog, Prometheus scraped every
#             second, TensorBoard, the straggler gather every step), interleaved over ROUNDS;
#             median step time of the steps after WARMUP. Target: on/off <= 1.01.
#   latency   a tiny 2-rank run whose rank 1 hangs (ETE_FAULT): seconds from the stuck
#             collective's start to the first report naming the rank, against
#             parallel.hang_warn_s. Target: <= warn + 1 s.
#
# Environment: BUILD_DIR (default build), B (4), T (256), STEPS (12), WARMUP (3), ROUNDS (3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
B=${B:-4} T=${T:-256} STEPS=${STEPS:-12} WARMUP=${WARMUP:-3} ROUNDS=${ROUNDS:-3}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
SCRAPER=
trap 'rm -rf "$WORK"; [ -n "$SCRAPER" ] && kill "$SCRAPER" 2>/dev/null; true' EXIT
[ -x "$ETE" ] || { echo "ops_bench.sh: $ETE not built" >&2; exit 1; }

python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 1000000 8192
model() {  # model C F L H KV T
    printf '[model]\nvocab_size = 8192\nhidden_size = %s\nintermediate_size = %s\n' "$1" "$2"
    printf 'num_layers = %s\nnum_heads = %s\nnum_kv_heads = %s\n' "$3" "$4" "$5"
    printf 'max_position_embeddings = %s\ntie_word_embeddings = false\n' "$6"
}
data() { printf '[data]\ntrain = "%s"\ntokenizer = ""\nval_fraction = 0.0\n' "$WORK/toks.bin"; }
{ model 512 1408 8 8 4 "$T"
  printf '[train]\nsteps = %s\nseq_len = %s\nmicro_batch = %s\n' "$STEPS" "$T" $((2 * B))
  printf 'warmup_steps = 2\neval_every = 0\nlog_every = 1000\n'
  data; } >"$WORK/bench.toml"
{ model 64 128 1 4 2 32
  printf '[train]\nsteps = 10\nseq_len = 32\nmicro_batch = 2\neval_every = 0\n'
  data; } >"$WORK/tiny.toml"
export OMP_NUM_THREADS=1
step_ms() {  # metrics.jsonl -> the median step_ms after WARMUP
    python3 -c '
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1])][int(sys.argv[2]):]
print(statistics.median(ms))' "$1" "$WARMUP"
}
PORT=19471
(while true; do curl -s -o /dev/null "http://127.0.0.1:$PORT/metrics" || true; sleep 1; done) &
SCRAPER=$!
off=() on=()
for r in $(seq 1 "$ROUNDS"); do
    "$ETE" launch -n 2 -- train "$WORK/bench.toml" --out "$WORK/off$r" \
        --set monitor.watchdog=false --set monitor.straggler_every=0 >/dev/null 2>&1
    off+=("$(step_ms "$WORK/off$r/metrics.jsonl")")
    "$ETE" launch -n 2 -- train "$WORK/bench.toml" --out "$WORK/on$r" \
        --set monitor.prometheus_port=$PORT --set monitor.tensorboard=true \
        --set monitor.straggler_every=1 >/dev/null 2>&1
    on+=("$(step_ms "$WORK/on$r/metrics.jsonl")")
    echo "round $r: off ${off[-1]} ms, on ${on[-1]} ms" >&2
done
python3 -c '
import statistics, sys
n = len(sys.argv) // 2
off, on = [float(x) for x in sys.argv[1:n + 1]], [float(x) for x in sys.argv[n + 1:]]
a, b = statistics.median(off), statistics.median(on)
print(f"overhead: median step {a:.1f} ms off, {b:.1f} ms on: on/off {b / a:.4f}")' \
    "${off[@]}" "${on[@]}"
for warn in 1 2 4; do
    out=$(ETE_FAULT="hang@step=3,rank=1" "$ETE" launch -n 2 -- train "$WORK/tiny.toml" \
        --out "$WORK/hang$warn" --set parallel.timeout_s=$((warn + 3)) \
        --set parallel.hang_warn_s=$warn 2>&1 || true)
    waited=$(printf '%s\n' "$out" | grep -m1 -o 'has waited [0-9.]* s' | grep -o '[0-9.]*' || echo '?')
    echo "latency: hang_warn_s $warn: first report after $waited s (target <= $((warn + 1)) s)"
done
