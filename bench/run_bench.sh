#!/usr/bin/env bash
# bench/run_bench.sh — ETE vs PyTorch training throughput on the bench model, plus the GEMM table.
#
# Builds ete_bench_train and ete_bench_gemm (Release) if needed, then runs, in this order:
#   1. ete_bench_train --threads 2
#   2. bench/pytorch_train.py at 1 and 2 threads as installed, and at 2 threads on the OpenBLAS
#      build ETE links (PyTorch's best counts)
#   3. ete_bench_gemm --threads 2 (per-shape GEMM table and the sgemm peak at 1 and 2 threads)
# and prints a Markdown summary. PyTorch runs with OPENBLAS_CORETYPE set to the core ETE reported,
# so both use the same OpenBLAS sgemm kernel; export OPENBLAS_CORETYPE to force one for both.
#
# Environment: BUILD_DIR (default build-bench), STEPS (8), WARMUP (3), THREADS (2, for ETE and
# the GEMM table), ROUNDS (1: repeat steps 1-2 this many times, interleaved, and report the
# median over rounds), PYTHON (/usr/bin/python3, Debian's python3-torch), OUT (JSON results;
# default $BUILD_DIR/bench-results). About 3.5 minutes per round on an idle 2-core machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-bench}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-1}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$BUILD_DIR/bench-results}

log() { printf '==> %s\n' "$*" >&2; }

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    log "configuring $BUILD_DIR (Release)"
    cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DETE_BUILD_BENCH=ON \
        -DETE_BUILD_TESTS=OFF >/dev/null
fi
log "building ete_bench_train ete_bench_gemm"
ninja -C "$BUILD_DIR" ete_bench_train ete_bench_gemm >/dev/null
"$PYTHON" -c 'import torch' 2>/dev/null || {
    echo "run_bench.sh: $PYTHON cannot import torch (apt install python3-torch)" >&2
    exit 1
}

mkdir -p "$OUT"
rm -f "$OUT"/*.json
# ETE links Debian's OpenMP build of OpenBLAS (one thread pool with its own kernels). PyTorch, as
# installed, gets the pthread build through libblas.so.3, whose idle threads fight OpenMP's for
# the cores; its third run loads ETE's OpenBLAS instead (LD_LIBRARY_PATH), the same fix ETE has.
ete_blas_dir=$(dirname "$(ldd "$BUILD_DIR/bench/ete_bench_train" | awk '/libopenblas/ {print $3}')")
clean_env=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT -u LD_LIBRARY_PATH)
log "load before the run: $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    log "round $r/$ROUNDS: ETE, $THREADS threads"
    "${clean_env[@]}" "$BUILD_DIR/bench/ete_bench_train" --threads "$THREADS" --steps "$STEPS" \
        --warmup "$WARMUP" --json >"$OUT/ete_r$r.json"
    core=$("$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["openblas_core"])' \
        <"$OUT/ete_r$r.json")
    core=${OPENBLAS_CORETYPE:-$core}
    for run in system_t1 system_t2 eteblas_t2; do
        t=${run##*_t}
        blas=()
        [ "${run%_t*}" = eteblas ] && blas=(LD_LIBRARY_PATH="$ete_blas_dir")
        log "round $r/$ROUNDS: PyTorch, $t thread(s), OPENBLAS_CORETYPE=$core ${blas[*]}"
        "${clean_env[@]}" OPENBLAS_CORETYPE="$core" "${blas[@]}" "$PYTHON" \
            "$ROOT/bench/pytorch_train.py" --threads "$t" --steps "$STEPS" --warmup "$WARMUP" \
            >"$OUT/torch_${run}_r$r.json"
    done
done
log "GEMM shapes, $THREADS threads"
"${clean_env[@]}" "$BUILD_DIR/bench/ete_bench_gemm" --threads "$THREADS" --json >"$OUT/gemm.json"
log "load after the run: $(uptime)"

"$PYTHON" "$ROOT/bench/summarize.py" "$OUT"
