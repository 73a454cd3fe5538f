#!/usr/bin/env bash
# bench/run_lora_bench.sh — the LoRA/QLoRA benchmark of docs/benchmarks.md: a ~1.1B Llama
# (bench/gen_llama_1b.py, random BF16 weights), micro-batch 1, seq 256, all-linear adapters
# r = 16: full fine-tuning, LoRA over the bf16 base and QLoRA (NF4 base), each with
# train.precision = bf16, then the same LoRA step in PyTorch 1.13 (bench/pytorch_lora.py);
# qlora_dropout (not in the default RUNS) is QLoRA with lora.dropout = 0.05.
# Prints per run: median step seconds (steps 2..N), measured peak RSS, ETE's own estimate.
#   BUILD_DIR (default build), MODEL_DIR (default /tmp/llama-1b, generated when missing),
#   STEPS (default 4), RUNS ("full lora qlora pytorch"), OUT (default /tmp/ete_lora_bench).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
MODEL_DIR=${MODEL_DIR:-/tmp/llama-1b}
STEPS=${STEPS:-4}
RUNS=${RUNS:-"full lora qlora pytorch"}
OUT=${OUT:-/tmp/ete_lora_bench}
mkdir -p "$OUT"
[ -s "$MODEL_DIR/model.safetensors" ] || /usr/bin/python3 bench/gen_llama_1b.py --out "$MODEL_DIR"
core=$("$BUILD_DIR/ete" --version | sed -n 's/.*OpenBLAS core \([A-Za-z0-9]*\).*/\1/p')
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') | OpenBLAS core $core"

ete_run() {  # name, extra --set args
    local name=$1; shift
    rm -rf "$OUT/$name"
    "$BUILD_DIR/ete" train --set model.init_from="$MODEL_DIR" --set train.steps="$STEPS" \
        --set train.micro_batch=1 --set train.seq_len=256 --set train.eval_every=0 \
        --set train.log_every=1 --set train.warmup_steps=1 --set train.precision=bf16 \
        --set data.train=data/kjv.bin --set data.tokenizer="" --set data.val_fraction=0 \
        --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 || { echo "$name: failed (see $OUT/$name.log)"; tail -3 "$OUT/$name.log"; return 0; }
    /usr/bin/python3 - "$OUT/$name" "$name" <<'PY'
import json, re, statistics, sys
d, name = sys.argv[1], sys.argv[2]
ms = [json.loads(l)["step_ms"] for l in open(d + "/metrics.jsonl")][1:]
log = open(d + ".log").read()
m = re.search(r"measured peak RSS ([0-9.]+ [MG]iB) against the estimated peak ([0-9.]+ [MG]iB) \(([-+0-9.]+)%\)", log)
est = re.search(r"memory estimate \(rank 0\): (.*)", log).group(1)
print(json.dumps({"run": name, "step_s": round(statistics.median(ms) / 1e3, 3),
                  "peak_rss": m.group(1), "estimate": m.group(2), "estimate_error_pct": float(m.group(3)),
                  "terms": est}))
PY
}

lora="--set lora.enabled=true --set lora.targets=all-linear --set lora.r=16 --set lora.alpha=32"
for r in $RUNS; do
    case $r in
        full) ete_run full ;;
        lora) ete_run lora $lora --set lora.base_format=bf16 ;;
        qlora) ete_run qlora $lora --set lora.base_format=nf4 ;;
        qlora_dropout) ete_run qlora_dropout $lora --set lora.base_format=nf4 --set lora.dropout=0.05 ;;
        pytorch) OPENBLAS_CORETYPE=$core /usr/bin/python3 bench/pytorch_lora.py --model "$MODEL_DIR" \
                     --steps $((STEPS - 1)) --warmup 1 ;;
    esac
done
