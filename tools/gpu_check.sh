#!/usr/bin/env bash
# tools/gpu_check.sh — the one prepared command for a GPU machine (issue 13, docs/gpu.md): builds
# ETE with CUDA on all cores, runs the CUDA test cases (the backend conformance suite on "cuda",
# the CUDA backend's own tests), then the GPU benchmarks, and prints a summary table last. Logs
# and results go to $OUT when it is set (the lent GPU machine's result folder), else
# build-gpu/logs. Budget: at most 8 minutes on a 16-core H200 machine; every step has its own
# timeout, so one hang costs only its step.
#
# Dependencies: the Debian 12 build packages of run.sh. A machine without them (the lent GPU
# machine reaches no package registry) takes them from .gpu_deps/, the .deb files that
# tools/gpu_deps.sh downloads on a Debian 12 machine: they are unpacked into a private prefix
# (never into /), which the build and the tests then use.
#
#   tools/gpu_check.sh                 # on the GPU machine, from the repository root
#   ETE_CUDA_ARCH=80 tools/gpu_check.sh   # an A100 (default: 90, Hopper)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
LOG=${OUT:-$BUILD/logs}
ARCH=${ETE_CUDA_ARCH:-90}
JOBS=$(nproc)
mkdir -p "$LOG"
summary=()
t_all=$(date +%s)

# step NAME TIMEOUT_S COMMAND...: runs it with its output in $LOG/NAME.log; one summary line.
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc st
    t0=$(date +%s)
    timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    st="ok"
    [ $rc -ne 0 ] && st="FAILED (exit $rc)"
    [ $rc -eq 124 ] && st="TIMEOUT (${limit} s)"
    summary+=("$(printf '%-12s %-20s %4d s' "$name" "$st" $(($(date +%s) - t0)))")
    echo "gpu_check: $name: $st" >&2
    return $rc
}

# The dependencies from .gpu_deps/*.deb, when the machine lacks the build packages.
use_carried_deps() {
    local prefix=/tmp/ete_deps
    mkdir -p $prefix
    for f in .gpu_deps/*.deb; do dpkg -x "$f" $prefix; done
    local lib=$prefix/usr/lib/x86_64-linux-gnu
    export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    # The .pc files say prefix=/usr: the sysroot puts the prefix before their -I and -L paths.
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$lib/openblas-openmp/pkgconfig:$prefix/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export LD_LIBRARY_PATH=$lib:$lib/openblas-openmp:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export CPATH=$prefix/usr/include
    export PATH=$prefix/usr/bin:$PATH
    export OPAL_PREFIX=$prefix/usr  # Open MPI finds its own files under the prefix
    # FindMPI from explicit paths (the carried mpicxx wrapper would name /usr's).
    local ompi=$lib/openmpi
    # OpenBLAS lives in openblas-openmp/ (Debian's alternatives links are not unpacked): found
    # through its pkg-config file.
    CMAKE_EXTRA=(-DBLA_PREFER_PKGCONFIG=ON -DBLA_PKGCONFIG_BLAS=openblas
                 -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_HEADER_DIR=$ompi/include
                 -DMPI_CXX_LIB_NAMES=mpi -DMPI_mpi_LIBRARY=$ompi/lib/libmpi.so
                 -DCBLAS_INCLUDE_DIR=$prefix/usr/include/x86_64-linux-gnu/openblas-openmp)
}

CMAKE_EXTRA=()
# ETE_GPU_DEPS=carried uses .gpu_deps/ even where the packages are installed (to try that path).
if [ "${ETE_GPU_DEPS:-}" = carried ] || ! pkg-config --exists libpcre2-8 2>/dev/null ||
    [ ! -e /usr/include/fmt/format.h ]; then
    if ls .gpu_deps/*.deb >/dev/null 2>&1; then
        use_carried_deps
    else
        echo "gpu_check: the build packages are missing and .gpu_deps/ is empty: run" \
            "tools/gpu_deps.sh on a Debian 12 machine first" >&2
        exit 2
    fi
fi

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
        echo "no nvidia-smi: no GPU driver on this machine"
    nvcc --version | tail -2
    echo "$JOBS cores"
} >"$LOG/machine.txt" 2>&1

step configure 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DETE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DETE_WERROR=ON -DETE_NATIVE=OFF "${CMAKE_EXTRA[@]}" &&
    step build 300 cmake --build "$BUILD" -j "$JOBS" --target ete ete_test_backend \
        ete_test_model ete_test_train ete_test_cli ete_bench_cuda_gemm
built=$?

if [ $built -eq 0 ]; then
    # The CUDA cases: the conformance suite's /cuda instances and the CUDA backend tests.
    step tests 120 "$BUILD/tests/ete_test_backend" --gtest_filter='*/cuda:CudaBackend.*' \
        --gtest_output="json:$LOG/tests.json"
    # The PyTorch goldens (logits, loss, every gradient, 10 AdamW steps) on the GPU, in fp32 and
    # (the precision tests) bf16.
    step goldens 120 "$BUILD/tests/ete_test_model" \
        --gtest_filter='Models/GoldenTest.*cuda*:Goldens/Precision.*cuda*' \
        --gtest_output="json:$LOG/goldens.json"
    # The trainer: bit-exact resume on the GPU, losses beside the CPU's, and two ranks sharing
    # the GPU through the staged MPI communicator (dp, tp, pp = 2) against one rank.
    step trainer 120 "$BUILD/tests/ete_test_train" --gtest_filter='CudaTrainer.*' \
        --gtest_output="json:$LOG/trainer.json"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        step ranks 120 "$BUILD/tests/ete_test_cli" \
        --gtest_filter='ParallelTrain.TwoRanksOnOneGpuMatchOneRank' \
        --gtest_output="json:$LOG/ranks.json"
    step gemm_bench 90 "$BUILD/bench/ete_bench_cuda_gemm" --json "$LOG/gemm.json"
fi

echo
echo "== gpu_check summary ($(($(date +%s) - t_all)) s in all; logs in $LOG)"
head -1 "$LOG/machine.txt"
printf '%s\n' "${summary[@]}"
for f in tests goldens trainer ranks; do
    [ -s "$LOG/$f.json" ] || continue
    python3 - "$LOG/$f.json" "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
cases = [(s["name"], t) for s in j["testsuites"] for t in s["testsuite"]]
skipped = sum(t.get("result") == "SKIPPED" for _, t in cases)
print(f"{sys.argv[2]}: {len(cases)} cases, {len(cases) - skipped - j['failures']} passed, "
      f"{j['failures']} failed, {skipped} skipped" + ("  <- NOTHING RAN" if skipped == len(cases) else ""))
for name, t in cases:
    if t.get("failures"):
        print("  FAILED", name + "." + t["name"])
PY
done
if [ -s "$LOG/gemm.json" ]; then
    python3 - "$LOG/gemm.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for c in j["cases"]:
    print(f"  {c['name']:<22} {c['tflops']:7.1f} TFLOP/s")
PY
fi
