#!/usr/bin/env bash
# bench/qat_bench.sh — what quantization-aware training costs per step (docs/benchmarks.md, QAT):
# the bench model (≈32M-parameter Llama, docs/benchmarks.md) on one process with THREADS threads,
# plain training against QAT (W8A8: weights per channel, every linear's input and every norm's
# output per tensor, observers on), in fp32 and bf16, interleaved over ROUNDS; the median step time
# of the steps after WARMUP. Target: QAT / plain <= 1.10.
#
# Environment: BUILD_DIR (default build), B (4), T (256), STEPS (10), WARMUP (3), ROUNDS (3),
# THREADS (nproc).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
B=${B:-4} T=${T:-256} STEPS=${STEPS:-10} WARMUP=${WARMUP:-3} ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$ETE" ] || { echo "qat_bench.sh: $ETE not built" >&2; exit 1; }

python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 1000000 8192
{ printf '[model]\nvocab_size = 8192\nhidden_size = 512\nintermediate_size = 1408\n'
  printf 'num_layers = 8\nnum_heads = 8\nnum_kv_heads = 4\n'
  printf 'max_position_embeddings = %s\ntie_word_embeddings = false\n' "$T"
  printf '[train]\nsteps = %s\nseq_len = %s\nmicro_batch = %s\n' "$STEPS" "$T" "$B"
  printf 'warmup_steps = 2\neval_every = 0\nlog_every = 1000\n'
  printf '[data]\ntrain = "%s"\ntokenizer = ""\nval_fraction = 0.0\n' "$WORK/toks.bin"
} >"$WORK/bench.toml"
step_ms() {  # metrics.jsonl -> the median step_ms after WARMUP
    python3 -c '
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1])][int(sys.argv[2]):]
print(statistics.median(ms))' "$1" "$WARMUP"
}
QAT=(--set qat.enabled=true --set qat.points=weight,linear_in,post_norm)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $OMP_NUM_THREADS threads, B=$B T=$T" >&2
for precision in fp32 bf16; do
    plain=() qat=()
    for r in $(seq 1 "$ROUNDS"); do
        "$ETE" train "$WORK/bench.toml" --out "$WORK/p$precision$r" \
            --set train.precision=$precision >/dev/null 2>&1
        plain+=("$(step_ms "$WORK/p$precision$r/metrics.jsonl")")
        "$ETE" train "$WORK/bench.toml" --out "$WORK/q$precision$r" \
            --set train.precision=$precision "${QAT[@]}" >/dev/null 2>&1
        qat+=("$(step_ms "$WORK/q$precision$r/metrics.jsonl")")
        echo "$precision round $r: plain ${plain[-1]} ms, qat ${qat[-1]} ms" >&2
    done
    python3 -c '
import statistics, sys
p = sys.argv[1]
n = (len(sys.argv) - 2) // 2
a = statistics.median(float(x) for x in sys.argv[2:n + 2])
b = statistics.median(float(x) for x in sys.argv[n + 2:])
print(f"{p}: median step {a:.1f} ms plain, {b:.1f} ms qat: qat/plain {b / a:.3f}")' \
        "$precision" "${plain[@]}" "${qat[@]}"
done
