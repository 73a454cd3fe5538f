#!/usr/bin/env bash
# bench/core_bench.sh — which OpenBLAS core trains fastest on this CPU, and does ETE's default
# pick it (docs/numerics.md, "The kernel choices")? Side by side, interleaved over ROUNDS rounds:
# ETE fp32 on each model of MODELS with its own choice ("auto": OPENBLAS_CORETYPE unset) and with
# every core of CORES forced; then PyTorch fp32 (bench/pytorch_train.py, 2 threads, on the
# OpenBLAS build ETE links, and as installed at 1 and 2 threads) at the core ETE picked, and ETE
# bf16 (which the OpenBLAS core does not touch) as a control. Prints a Markdown table of medians.
#
# Environment: BUILD_DIR (default build), ROUNDS (3), STEPS (8), WARMUP (3), THREADS (2),
# MODELS ("llama-bench gpt2-124m"), CORES (default: Haswell and SkylakeX, plus Cooperlake where
# the CPU has AVX512-BF16), TORCH (1; 0 skips the PyTorch runs), PYTHON (/usr/bin/python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
MODELS=${MODELS:-llama-bench gpt2-124m}
TORCH=${TORCH:-1}
PYTHON=${PYTHON:-/usr/bin/python3}
if [ -z "${CORES:-}" ]; then
    CORES="Haswell"
    grep -qw avx512bw /proc/cpuinfo && CORES="$CORES SkylakeX"
    grep -qw avx512_bf16 /proc/cpuinfo && CORES="$CORES Cooperlake"
fi
ete=$BUILD_DIR/bench/ete_bench_train
[ -x "$ete" ] || { echo "core_bench.sh: build $ete first (cmake -DETE_BUILD_BENCH=ON $BUILD_DIR && cmake --build $BUILD_DIR)" >&2; exit 1; }
ete_blas_dir=$(dirname "$(ldd "$ete" | awk '/libopenblas/ {print $3}')")
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT -u LD_LIBRARY_PATH
       -u OPENBLAS_CORETYPE -u ETE_OPENBLAS_FIXED)
args=(--steps "$STEPS" --warmup "$WARMUP")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log() { printf '==> %s\n' "$*" >&2; }
field() { "$PYTHON" -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }

log "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); cores: auto $CORES; $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        for c in auto $CORES; do
            env=("${clean[@]}")
            [ "$c" != auto ] && env+=(OPENBLAS_CORETYPE="$c")
            log "round $r: ETE $m fp32, core $c"
            "${env[@]}" "$ete" --model "$m" --threads "$THREADS" "${args[@]}" --json \
                >"$out/ete_${m}_${c}_$r.json"
        done
        log "round $r: ETE $m bf16"
        "${clean[@]}" "$ete" --model "$m" --precision bf16 --threads "$THREADS" "${args[@]}" \
            --json >"$out/ete_${m}_bf16_$r.json"
        [ "$TORCH" = 1 ] || continue
        core=$(field "$out/ete_${m}_auto_$r.json" openblas_core)
        for run in eteblas_t2 system_t1 system_t2; do
            blas=()
            [[ $run == eteblas* ]] && blas=(LD_LIBRARY_PATH="$ete_blas_dir")
            log "round $r: PyTorch $m fp32 $run, core $core"
            "${clean[@]}" OPENBLAS_CORETYPE="$core" "${blas[@]}" "$PYTHON" \
                "$ROOT/bench/pytorch_train.py" --model "$m" --precision fp32 \
                --threads "${run##*_t}" "${args[@]}" >"$out/torch_${m}_${run}_$r.json"
        done
    done
done
log "$(uptime)"
"$PYTHON" - "$out" "$ROUNDS" "$MODELS" "auto $CORES" "$TORCH" <<'EOF'
import json, statistics, sys
out, rounds, models, cores, torch = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5] == "1"
def tps(name):
    v = [json.load(open(f"{out}/{name}_{r}.json"))["tokens_per_s"] for r in range(1, rounds + 1)]
    return statistics.median(v), v
for m in models:
    auto_core = json.load(open(f"{out}/ete_{m}_auto_1.json"))["openblas_core"]
    print(f"\n{m}, fp32 tokens/s (median of {rounds} interleaved rounds; each round's value)\n")
    print("| run | OpenBLAS core | tokens/s | rounds | vs best ETE core |")
    print("|---|---|---:|---|---:|")
    rows = {c: tps(f"ete_{m}_{c}") for c in cores}
    best = max(v[0] for v in rows.values())
    for c, (med, v) in rows.items():
        label = f"ETE default ({auto_core})" if c == "auto" else f"ETE, OPENBLAS_CORETYPE={c}"
        core = auto_core if c == "auto" else c
        print(f"| {label} | {core} | {med:.0f} | {', '.join(f'{x:.0f}' for x in v)} | {med / best:.3f} |")
    med, v = tps(f"ete_{m}_bf16")
    print(f"| ETE bf16 (control) | {auto_core} | {med:.0f} | {', '.join(f'{x:.0f}' for x in v)} | |")
    if torch:
        for run, label in [("eteblas_t2", "PyTorch fp32, ETE's OpenBLAS build, 2 threads"),
                           ("system_t1", "PyTorch fp32 as installed, 1 thread"),
                           ("system_t2", "PyTorch fp32 as installed, 2 threads")]:
            med, v = tps(f"torch_{m}_{run}")
            print(f"| {label} | {auto_core} | {med:.0f} | {', '.join(f'{x:.0f}' for x in v)} | |")
        ete = rows["auto"][0]
        inst = max(tps(f"torch_{m}_system_t1")[0], tps(f"torch_{m}_system_t2")[0])
        print(f"\nETE default / PyTorch as installed (best of 1, 2 threads), same core: {ete / inst:.2f}x; "
              f"/ PyTorch on ETE's OpenBLAS build: {ete / tps(f'torch_{m}_eteblas_t2')[0]:.2f}x")
EOF
