#!/usr/bin/env bash
# bench/run_bench.sh — ETE vs PyTorch training throughput, fp32 and bf16, on the bench Llama and
# GPT-2 124M, plus the GEMM tables.
#
# Builds ete_bench_train, ete_bench_gemm and ete_bench_dnnl (Release) if needed, then runs per
# round, per model (MODELS): ETE fp32 and bf16 at THREADS threads; PyTorch fp32 and bf16 autocast
# at 1 and 2 threads with the OpenBLAS as installed, and fp32 at 2 threads on the OpenBLAS build
# ETE links (PyTorch's best counts); and, when BASELINE names another build's ete_bench_train, that
# build's fp32 run of the bench Llama (a refactor must cost nothing: both run in the same rounds).
# Then the fp32 GEMM table (ete_bench_gemm) and the bf16 GEMM peak (ete_bench_dnnl, 2048^3), and
# a Markdown summary (bench/summarize.py). PyTorch runs with OPENBLAS_CORETYPE set to the core ETE
# reported, so both use the same sgemm kernel.
#
# Environment: BUILD_DIR (default build-bench), STEPS (8), WARMUP (3), THREADS (2), ROUNDS (1;
# rounds interleave every run, the summary takes medians over rounds), MODELS ("llama-bench
# gpt2-124m"), BASELINE (unset), PYTHON (/usr/bin/python3, Debian's python3-torch), OUT (JSON
# results; default $BUILD_DIR/bench-results). About 9 minutes per round on an idle 2-core machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
MODELS=${MODELS:-llama-bench gpt2-124m}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$BUILD_DIR/bench-results}

log() { printf '==> %s\n' "$*" >&2; }

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    log "configuring $BUILD_DIR (Release)"
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DETE_BUILD_BENCH=ON \
        -DETE_BUILD_TESTS=OFF >/dev/null
fi
log "building ete_bench_train ete_bench_gemm ete_bench_dnnl"
ninja -C "$BUILD_DIR" ete_bench_train ete_bench_gemm ete_bench_dnnl >/dev/null
"$PYTHON" -c 'import torch' 2>/dev/null || {
    echo "run_bench.sh: $PYTHON cannot import torch (apt install python3-torch)" >&2
    exit 1
}

mkdir -p "$OUT"
rm -f "$OUT"/*.json
# ETE links Debian's OpenMP build of OpenBLAS (one thread pool with its own kernels). PyTorch, as
# installed, gets the pthread build through libblas.so.3, whose idle threads fight OpenMP's for
# the cores; one of its runs loads ETE's OpenBLAS instead (LD_LIBRARY_PATH), the same fix ETE has.
ete=$BUILD_DIR/bench/ete_bench_train
ete_blas_dir=$(dirname "$(ldd "$ete" | awk '/libopenblas/ {print $3}')")
clean_env=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT -u LD_LIBRARY_PATH)
args=(--steps "$STEPS" --warmup "$WARMUP")
log "load before the run: $(uptime)"
core=""
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        for p in fp32 bf16; do
            log "round $r/$ROUNDS: ETE $m $p, $THREADS threads"
            "${clean_env[@]}" "$ete" --model "$m" --precision "$p" --threads "$THREADS" \
                "${args[@]}" --json >"$OUT/ete_${m}_${p}_r$r.json"
        done
        if [ -n "${BASELINE:-}" ] && [ "$m" = llama-bench ]; then
            log "round $r/$ROUNDS: baseline $BASELINE (fp32 $m)"
            "${clean_env[@]}" "$BASELINE" --threads "$THREADS" "${args[@]}" --json \
                >"$OUT/base_${m}_fp32_r$r.json"
        fi
        core=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["openblas_core"])' \
            <"$OUT/ete_${m}_fp32_r$r.json")
        core=${OPENBLAS_CORETYPE:-$core}
        for run in fp32_system_t1 fp32_system_t2 bf16_system_t1 bf16_system_t2 fp32_eteblas_t2; do
            p=${run%%_*}
            t=${run##*_t}
            blas=()
            [[ $run == *eteblas* ]] && blas=(LD_LIBRARY_PATH="$ete_blas_dir")
            log "round $r/$ROUNDS: PyTorch $m $p, $t thread(s), core $core ${blas[*]}"
            "${clean_env[@]}" OPENBLAS_CORETYPE="$core" "${blas[@]}" "$PYTHON" \
                "$ROOT/bench/pytorch_train.py" --model "$m" --precision "$p" --threads "$t" \
                "${args[@]}" >"$OUT/torch_${m}_${run}_r$r.json"
        done
    done
done
log "GEMM tables, $THREADS threads"
"${clean_env[@]}" "$BUILD_DIR/bench/ete_bench_gemm" --threads "$THREADS" --json >"$OUT/gemm.json"
"${clean_env[@]}" "$BUILD_DIR/bench/ete_bench_dnnl" --threads 1 "$THREADS" --only 2048 --json \
    >"$OUT/dnnl.json"
log "load after the run: $(uptime)"

"$PYTHON" "$ROOT/bench/summarize.py" "$OUT"
