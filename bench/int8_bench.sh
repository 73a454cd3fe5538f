#!/usr/bin/env bash
# bench/int8_bench.sh — integer-model eval throughput against fp32 eval of the same model, same
# threads (docs/benchmarks.md, Integer model): the bench model (≈32M-parameter Llama, untied head)
# after STEPS training steps, quantized W8A8 (every decoder linear and the LM head: weights per
# channel, their inputs per tensor from a calibration on CALIB batches), evaluated on one B x T
# batch by `ete eval --repeat` (median of REPEAT forwards, the first — which creates kernels and
# packs weights — included), fp32 and int8 interleaved over ROUNDS. Target: int8 / fp32 throughput >= 3 on a CPU with AVX512-VNNI or AMX.
#
# Environment: BUILD_DIR (default build), B (8), T (256), STEPS (2), CALIB (4), REPEAT (5),
# ROUNDS (3), THREADS (nproc), MODEL (llama-bench, or gpt2-124m: GPT-2 small, 50257-token tied
# head, in integers too).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
B=${B:-8} T=${T:-256} STEPS=${STEPS:-2} CALIB=${CALIB:-4} REPEAT=${REPEAT:-5} ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
ETE=$BUILD_DIR/ete
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -x "$ETE" ] || { echo "int8_bench.sh: $ETE not built" >&2; exit 1; }

MODEL=${MODEL:-llama-bench}
case "$MODEL" in
llama-bench)
    V=8192
    MODEL_TOML='vocab_size = 8192\nhidden_size = 512\nintermediate_size = 1408\nnum_layers = 8\nnum_heads = 8\nnum_kv_heads = 4\ntie_word_embeddings = false\n' ;;
gpt2-124m)
    V=50257
    MODEL_TOML='arch = "gpt2"\nvocab_size = 50257\nhidden_size = 768\nintermediate_size = 3072\nnum_layers = 12\nnum_heads = 12\nnum_kv_heads = 12\n' ;;
*) echo "int8_bench.sh: MODEL=$MODEL: expected llama-bench or gpt2-124m" >&2; exit 1 ;;
esac
python3 "$ROOT/bench/random_tokens.py" "$WORK/toks.bin" 400000 "$V"
{ printf "[model]\n$MODEL_TOML"
  printf 'max_position_embeddings = %s\n' "$T"
  printf '[train]\nsteps = %s\nseq_len = %s\nmicro_batch = 4\n' "$STEPS" "$T"
  printf 'warmup_steps = 1\neval_every = 0\nlog_every = 1000\nmemory_check = false\n'
  printf '[data]\ntrain = "%s"\ntokenizer = ""\nval_fraction = 0.0\n' "$WORK/toks.bin"
} >"$WORK/bench.toml"
"$ETE" train "$WORK/bench.toml" --out "$WORK/run" >/dev/null 2>&1
"$ETE" quantize --scheme w8a8 --linears all-linear,lm_head --model "$WORK/run/final" \
    --calib "$WORK/toks.bin" --calib-batches "$CALIB" --batch 4 --seq "$T" --out "$WORK/int8" >&2
forward_s() {
    "$ETE" eval --model "$1" --tokens "$WORK/toks.bin" --batch "$B" --seq "$T" \
        --repeat "$REPEAT" --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.loads(sys.stdin.read())["forward_s"])'
}
echo "$MODEL on $(lscpu | sed -n 's/^Model name: *//p'), $OMP_NUM_THREADS threads, B=$B T=$T" >&2
echo "ISA: $(grep -o -w -E 'avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')" >&2
fp=() q=()
for r in $(seq 1 "$ROUNDS"); do
    fp+=("$(forward_s "$WORK/run/final")")
    q+=("$(forward_s "$WORK/int8")")
    echo "round $r: fp32 ${fp[-1]} s, int8 ${q[-1]} s" >&2
done
python3 -c '
import statistics, sys
n = (len(sys.argv) - 2) // 2
tok = int(sys.argv[1])
a = statistics.median(float(x) for x in sys.argv[2:n + 2])
b = statistics.median(float(x) for x in sys.argv[n + 2:])
print(f"eval: fp32 {tok / a:.0f} tok/s, int8 {tok / b:.0f} tok/s: int8/fp32 {a / b:.2f}")' \
    "$((B * T))" "${fp[@]}" "${q[@]}"
