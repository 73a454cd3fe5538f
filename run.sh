#!/usr/bin/env bash
# ETE quickstart driver. Two commands on a fresh Debian 12 machine:
#   ./run.sh demo   install what is missing, build, prepare the KJV corpus, train a tokenizer and a
#                   small Llama on CPU, save it as an HF model dir, print a generated sample
#   ./run.sh test   install what is missing, build (warnings as errors), run the whole test suite,
#                   then the unit tests again under address/undefined sanitizers, then fuzz the
#                   safetensors reader for FUZZ_SECONDS (default 60)
# Environment: BUILD_DIR (default build), JOBS (default nproc), ETE_SKIP_INSTALL=1 to skip apt.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
BUILD_PKGS=(cmake ninja-build g++ pkg-config libopenblas-dev libopenblas0-openmp nlohmann-json3-dev
            libtomlplusplus-dev libcli11-dev libfmt-dev libpcre2-dev libopenmpi-dev openmpi-bin
            libdnnl-dev)
TEST_PKGS=(libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev)
DEMO_PKGS=(bible-kjv)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

install_missing() {
    [ "${ETE_SKIP_INSTALL:-0}" = 1 ] && return 0
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing: ${missing[*]}"
    local sudo=()
    [ "$(id -u)" -ne 0 ] && sudo=(sudo)
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}

build() {  # build DIR [cmake args...]
    local dir=$1; shift
    log "building in $dir"
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

demo() {
    install_missing "${BUILD_PKGS[@]}" "${DEMO_PKGS[@]}"
    build "$BUILD_DIR" -DETE_BUILD_TESTS=OFF -DETE_BUILD_BENCH=OFF
    local ete="$BUILD_DIR/ete"
    mkdir -p data
    if [ ! -s data/kjv.txt ]; then
        log "preparing the King James Bible corpus (bible-kjv)"
        # One verse per line, without the "Ge1:1" references.
        bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' \
            > data/kjv.txt.tmp && mv data/kjv.txt.tmp data/kjv.txt
    fi
    [ -s data/tokenizer.json ] ||
        "$ete" tokenizer train data/kjv.txt --vocab-size 4096 --out data/tokenizer.json
    [ -s data/kjv.bin ] ||
        "$ete" tokenize data/kjv.txt --tokenizer data/tokenizer.json --out data/kjv.bin
    log "training the default small Llama (ete train, embedded default config)"
    # --resume auto: a demo stopped with Ctrl-C (which saves a checkpoint) continues where it was.
    "$ete" train --out runs/demo --resume auto
    log "sample from runs/demo/final"
    "$ete" generate --model runs/demo/final --prompt "And God said" --max-new-tokens 120 \
        --temperature 0.8 --top-k 40 --seed 1
}

run_tests() {
    install_missing "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}"
    build "$BUILD_DIR" -DETE_WERROR=ON
    log "ctest ($BUILD_DIR)"
    (cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS")
    build "$BUILD_DIR-asan" -DETE_WERROR=ON -DETE_SANITIZE=ON -DETE_BUILD_BENCH=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
    log "unit tests under address/undefined sanitizers ($BUILD_DIR-asan)"
    (cd "$BUILD_DIR-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$JOBS" \
        -LE slow)
    log "fuzzing the safetensors reader for ${FUZZ_SECONDS:-60}s ($BUILD_DIR-fuzz)"
    FUZZ_BUILD_DIR="$BUILD_DIR-fuzz" fuzz/run_fuzz.sh
}

case "${1:-}" in
    demo) demo ;;
    test) run_tests ;;
    *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
