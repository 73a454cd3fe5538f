#!/usr/bin/env bash
# ETE quickstart driver. Two commands on a fresh Debian 12 machine:
#   ./run.sh demo   install what is missing, build, prepare the KJV corpus, train a tokenizer and a
#                   small Llama on CPU, save it as an HF model dir, print a generated sample, then
#                   QLoRA-fine-tune it to name the book of a verse (answers before and after)
#   ./run.sh test   install what is missing, build (warnings as errors), run the whole test suite,
#                   then every numerics-bearing test again under the kernel choices of other CPUs,
#                   then the unit tests again under address/undefined sanitizers, then fuzz the
#                   safetensors, tokenizer.json and model dir readers for FUZZ_SECONDS of CPU time
#                   (default 60, a third each, side by side: 30 s on 2 cores)
# Environment: BUILD_DIR (default build), JOBS (default nproc), ETE_SKIP_INSTALL=1 to skip apt.
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# The Release test passes run one test more than there are cores: a test waiting on its ranks, a
# timer or a child leaves its core idle (the pass kept 2 cores ~80% busy at -j2); at -j3 the
# Release pass took 161 instead of 204 s and the numerics one 116 instead of 127 s (2-core Zen 5).
# The sanitizer pass stays at JOBS: its instrumented processes took 374 instead of 335 s at 3.
CTEST_JOBS=$((JOBS + 1))
BUILD_PKGS=(cmake ninja-build g++ pkg-config libopenblas-dev libopenblas0-openmp nlohmann-json3-dev
            libtomlplusplus-dev libcli11-dev libfmt-dev libpcre2-dev libopenmpi-dev openmpi-bin
            libdnnl-dev libxxhash-dev libhwloc-dev)
TEST_PKGS=(libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
           prometheus python3-prometheus-client python3-protobuf protobuf-compiler python3-crcmod
           slurm-wlm munge)
DEMO_PKGS=(bible-kjv)

# Each step with the time since run.sh started (minutes:seconds).
log() { printf '\033[1m==> [%d:%02d] %s\033[0m\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

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

# Unity batches (ETE_UNITY): a build from scratch takes about a third less time (CMakeLists.txt).
build() {  # build DIR [cmake args...]
    local dir=$1; shift
    log "building in $dir"
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DETE_UNITY=ON "$@" >/dev/null
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
    qlora_demo "$ete"
}

# SFT records "<verse>\nBook:" -> " <book>" from the KJV; every 20th verse (and Psalm 150:6, the
# demo's question) is held out in data/kjv_books_val.jsonl.
books_sft() {
    bible -f 'Gen1:1-Rev22:21' | awk '
    BEGIN {
      n = split("Ge:Genesis Exo:Exodus Lev:Leviticus Num:Numbers Deu:Deuteronomy Josh:Joshua " \
        "Jdgs:Judges Ruth:Ruth 1Sm:1_Samuel 2Sm:2_Samuel 1Ki:1_Kings 2Ki:2_Kings 1Chr:1_Chronicles " \
        "2Chr:2_Chronicles Ezra:Ezra Neh:Nehemiah Est:Esther Job:Job Psa:Psalms Prv:Proverbs " \
        "Eccl:Ecclesiastes SSol:Song_of_Solomon Isa:Isaiah Jer:Jeremiah Lam:Lamentations " \
        "Eze:Ezekiel Dan:Daniel Hos:Hosea Joel:Joel Amos:Amos Obad:Obadiah Jonah:Jonah Mic:Micah " \
        "Nahum:Nahum Hab:Habakkuk Zep:Zephaniah Hag:Haggai Zec:Zechariah Mal:Malachi Mat:Matthew " \
        "Mark:Mark Luke:Luke John:John Acts:Acts Rom:Romans 1Cor:1_Corinthians 2Cor:2_Corinthians " \
        "Gal:Galatians Eph:Ephesians Phi:Philippians Col:Colossians 1Th:1_Thessalonians " \
        "2Th:2_Thessalonians 1Tim:1_Timothy 2Tim:2_Timothy Titus:Titus Phmn:Philemon Heb:Hebrews " \
        "Jas:James 1Pet:1_Peter 2Pet:2_Peter 1Jn:1_John 2Jn:2_John 3Jn:3_John Jude:Jude " \
        "Rev:Revelation", pairs, " ")
      for (i = 1; i <= n; i++) { split(pairs[i], kv, ":"); gsub("_", " ", kv[2]); name[kv[1]] = kv[2] }
    }
    {
      ref = $1; text = substr($0, length(ref) + 2); book = ref; sub(/[0-9]+:[0-9]+$/, "", book)
      rec = sprintf("{\"prompt\": \"%s\\nBook:\", \"completion\": \" %s\"}", text, name[book])
      if (NR % 20 == 0 || ref == "Psa150:6") print rec > "data/kjv_books_val.jsonl.tmp"
      else print rec > "data/kjv_books_train.jsonl.tmp"
    }'
    mv data/kjv_books_val.jsonl.tmp data/kjv_books_val.jsonl
    mv data/kjv_books_train.jsonl.tmp data/kjv_books_train.jsonl
}

qlora_demo() {
    local ete=$1 question
    [ -s data/kjv_books_train.jsonl ] && [ -s data/kjv_books_val.jsonl ] || books_sft
    question=$(printf '%s\nBook:' "Let every thing that hath breath praise the LORD. Praise ye the LORD.")
    log "QLoRA: which book is a verse from? Held-out verse (Psalm 150:6), base model:"
    "$ete" generate --model runs/demo/final --prompt "$question" --max-new-tokens 4 --temperature 0
    echo
    "$ete" eval --model runs/demo/final --jsonl data/kjv_books_val.jsonl --json
    log "fine-tuning LoRA adapters over the NF4-quantized base (examples/qlora_books.toml)"
    "$ete" train examples/qlora_books.toml --out runs/demo-qlora --resume auto
    log "the same verse, base + adapter (runs/demo-qlora/final, a PEFT adapter dir):"
    "$ete" generate --model runs/demo/final --adapter runs/demo-qlora/final --prompt "$question" \
        --max-new-tokens 4 --temperature 0
    echo
    "$ete" eval --model runs/demo/final --adapter runs/demo-qlora/final \
        --jsonl data/kjv_books_val.jsonl --json
}

# -DETE_CUDA=ON where the CUDA toolkit is installed (nvcc on PATH or in /usr/local/cuda): the
# CUDA backend then compiles with warnings as errors, and its tests skip without a GPU.
cuda_flags() {
    local nvcc
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
    [ -n "$nvcc" ] && echo "-DETE_CUDA=ON -DCMAKE_CUDA_COMPILER=$nvcc"
    return 0
}

# The kernel choices other CPUs make, as environment settings of this one (docs/numerics.md): a
# CPU with AVX2 but no AVX-512 or VNNI (Zen 2/3, Haswell..Skylake clients) runs OpenBLAS's
# Haswell kernels and oneDNN's AVX2 ones; an AVX-512 CPU without VNNI or BF16 (Skylake-SP)
# OpenBLAS's SkylakeX kernels and oneDNN's avx512_core ones; and the 16-bit GEMM engine that this
# CPU does not pick by itself (ete --version says which it picks). Where the CPU has AVX-512 the
# last two are one profile (one pass of the numerics tests fewer, ~90 s of CI): with sgemm for
# 16-bit GEMMs it is exactly what a Skylake-SP runs (no native bf16: ETE picks sgemm there).
kernel_profiles() {
    local ete=$1 gemm16=ETE_GEMM16=onednn
    "$ete" --version 2>/dev/null | grep -q "bf16 GEMMs: oneDNN" && gemm16=ETE_GEMM16=sgemm
    echo "OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2"
    if grep -qw avx512bw /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo &&
        grep -qw avx512vl /proc/cpuinfo; then
        echo "OPENBLAS_CORETYPE=SkylakeX ONEDNN_MAX_CPU_ISA=AVX512_CORE $gemm16"
    else
        echo "$gemm16"
    fi
}

# Every test that compares numbers (ctest label `numerics`) again under each profile but the
# first: a tolerance that holds only for this CPU's kernels fails here, not on a user's machine.
# The first profile (AVX2) is the one the sanitizer suite runs under (run_tests), which saves a
# pass of ~1.6 min. Its arithmetic is the Release build's (no fast-math, no FP contraction) but
# for the order of the `omp simd` reductions -O1 may leave unvectorized, an order every bound
# already allows for (docs/numerics.md), so its numeric tests check the same bounds.
# Of those, only the tests that reached a GEMM whose kernels a profile changes (OpenBLAS's core,
# oneDNN's ISA, ETE_GEMM16; src/ete/backend/cpu/kernel_use.h), as the first pass listed them in
# DIR/kernel_users/ (one empty file per test): every other kernel computes the same under any
# profile, so the rest would repeat the first pass's arithmetic (the attention, norm and loss
# kernels' tests, the model tests on the reference backend, 8-bit AdamW's quantization map: 343 of
# 1,159 tests remain, and the pass took 88 instead of 116 s on 2-core Zen 5). Without the list,
# every numerics test.
kernel_matrix() {
    local dir=$1 profile profiles select=(-L numerics) what="every numerics test"
    local abs users chosen listing nums all
    abs=$(cd "$dir" && pwd)
    users="$abs/kernel_users" chosen="$abs/numerics_selection.txt"
    if [ -d "$users" ] && [ -n "$(ls -A "$users")" ]; then
        # `ctest -N` lines "  Test #12: Suite.Name/param  # GetParam() = ..." -> ",12" for each
        # test named in the list; ctest -I takes "0,0,0,12,15,..." from a file.
        listing=$(cd "$dir" && ctest -N -L numerics)
        nums=$(sed -nE 's/^ *Test +#([0-9]+): ([^ ]+).*$/\1 \2/p' <<< "$listing" |
            awk 'NR == FNR { used[$1] = 1; next } ($2 in used) { printf ",%s", $1 }' \
                <(ls "$users" | sed 's|%2F|/|g; s|%25|%|g') -)
        all=$(sed -nE 's/^Total Tests: ([0-9]+)$/\1/p' <<< "$listing")
        if [ -z "$nums" ]; then
            log "no numerics test reached a GEMM whose kernels a profile changes: no profile pass"
            return 0
        fi
        echo "0,0,0$nums" > "$chosen"
        select=(-I "$chosen")
        what="$(($(tr -cd , <<< "$nums" | wc -c))) of $all numerics tests (those that reached such a GEMM)"
    fi
    mapfile -t profiles < <(kernel_profiles "$dir/ete" | tail -n +2)
    for profile in "${profiles[@]}"; do
        log "ctest under $profile: $what ($dir)"
        # shellcheck disable=SC2086  # the profile is words
        (cd "$dir" && env -u ETE_OPENBLAS_FIXED $profile ctest --output-on-failure \
            -j "$CTEST_JOBS" "${select[@]}")
    done
}

# The sanitizer pass runs each gtest binary whole, in two gtest shards, $JOBS shards at a time,
# not one process per test as ctest does: an instrumented process costs ~0.1-0.2 CPU-s to start
# and to leak-check at its exit, and 1,370 of them made the pass 496 s instead of 324 (2-core Zen
# 5, same tests). The tests of a binary share a process as they do when a developer runs it. The
# MPI job tests (mpirun of ete_test_parallel_mpi) stay with ctest. Each shard's output goes to
# DIR/sanitizer_logs/ and is shown when the shard fails; a shard has 25 minutes.
sanitizer_tests() {  # sanitizer_tests DIR GTEST_NEGATIVE_FILTER
    local dir=$1 skip=$2 bin shard rc=0
    local logs="$dir/sanitizer_logs" jobs=()
    rm -rf "$logs"
    mkdir -p "$logs"
    # The binaries with the longest runs first, so that the last shards to start are short;
    # then every other test binary there is.
    local order=(runs backend cli data train model) bins=()
    for bin in "${order[@]}"; do bins+=("$dir/tests/ete_test_$bin"); done
    for bin in "$dir"/tests/ete_test_*; do
        [[ " ${bins[*]} " == *" $bin "* || $bin == *_mpi ]] || bins+=("$bin")
    done
    for bin in "${bins[@]}"; do
        if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then continue; fi
        for shard in 0 1; do jobs+=("$(basename "$bin") $shard"); done
    done
    (cd "$dir" && ctest --output-on-failure -j "$JOBS" -R '^parallel_mpi_') || rc=1
    # shellcheck disable=SC2016  # expanded by the inner shell
    printf '%s\n' "${jobs[@]}" | SKIP="$skip" LOGS="$logs" OMP_NUM_THREADS=2 \
        xargs -P "$JOBS" -L 1 bash -c '
            log="$LOGS/$0.$1.log"
            start=$SECONDS
            if (cd "$(dirname "$LOGS")/tests" && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$1 \
                timeout 1500 "./$0" --gtest_also_run_disabled_tests --gtest_filter="-$SKIP") \
                > "$log" 2>&1; then
                echo "$0 shard $(($1 + 1))/2: $(grep -m1 "^\[  PASSED  \]" "$log") ($((SECONDS - start)) s)"
            else
                cat "$log"
                echo "$0 shard $(($1 + 1))/2 FAILED (its output above, $log)" >&2
                exit 1
            fi' || rc=1
    return "$rc"
}

run_tests() {
    install_missing "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}"
    # ctest runs two tests at a time, each with 2 OpenMP threads (and multi-rank jobs more): with
    # libgomp's default spinning, a waiting thread burns the core another test needs. Sleeping
    # waits cut the kernel tests' wall time by ~27% at -j2 (measured on 2-core Zen 5: 190 backend
    # tests 22.6 -> 17.0 s, CPU 44 -> 33 s). Users' runs keep the default (one job per machine).
    export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
    # The benchmarks are not tests: no test runs them, and building them took ~1.5 min of CI's
    # 25 (bench/run_bench.sh configures its own build-bench with them; a default cmake build of a
    # checkout has them too).
    # shellcheck disable=SC2046  # the flags are words
    build "$BUILD_DIR" -DETE_WERROR=ON -DETE_BUILD_BENCH=OFF $(cuda_flags)
    # The fuzz targets (clang, ~115 CPU-s) build beside the Release tests, under SCHED_IDLE, which
    # runs them only on a core no test wants: at nice 19 the build (then 294 CPU-s) made the two
    # Release passes ~85 s slower on 2-core Zen 5 (a waking test waited out the compiler's slice).
    local idle=(nice -n 19)
    chrt --idle 0 true 2>/dev/null && idle=(chrt --idle 0)
    FUZZ_BUILD_DIR="$BUILD_DIR-fuzz" "${idle[@]}" fuzz/run_fuzz.sh build \
        > "$BUILD_DIR/fuzz_build.log" 2>&1 &
    local fuzz_build=$!
    # The first pass runs the kernels ete picks itself: an OPENBLAS_CORETYPE that a machine image
    # sets for every process (seen: Haswell on an AVX-512 Zen 5) would otherwise make it a second
    # run of the AVX2 profile, which the sanitizer pass runs below.
    # It also lists the tests that reach a GEMM whose kernels a profile changes (kernel_matrix).
    log "ctest ($BUILD_DIR), kernels as ete picks them"
    local users
    users="$(cd "$BUILD_DIR" && pwd)/kernel_users"
    rm -rf "$users"
    mkdir -p "$users"
    (cd "$BUILD_DIR" && env -u OPENBLAS_CORETYPE -u ETE_OPENBLAS_FIXED ETE_KERNEL_USE_LOG="$users" \
        ctest --output-on-failure -j "$CTEST_JOBS")
    kernel_matrix "$BUILD_DIR"
    # A real single-node Slurm (tests/slurm/): scancel, time limit, requeue, SIGUSR1 under srun,
    # mpirun and `ete launch`. Its jobs mostly wait on Slurm's timers, so it runs beside the
    # sanitizer build; exit 77 = this machine cannot run slurmd (it says why).
    log "Slurm end-to-end test (tests/slurm/slurm_test.sh), beside the sanitizer build"
    ETE="$BUILD_DIR/ete" tests/slurm/slurm_test.sh > "$BUILD_DIR/slurm_test.log" 2>&1 &
    local slurm_pid=$!
    # The sanitizer build compiles the engine (the code under test) with ASan and UBSan and links
    # its test binaries from the test objects the Release build just compiled (-O1, unsanitized:
    # ETE_TEST_OBJECTS_FROM, tests/CMakeLists.txt) instead of compiling them again: the build
    # took ~780 CPU-s, ~345 of them the test files, and with the test files at -O1 instead of -O0
    # the sanitizer pass took 236 instead of 297 s (2-core Zen 5). ASan still checks every access
    # the engine makes, to memory the tests allocate too (its allocator serves the whole process).
    build "$BUILD_DIR-asan" -DETE_WERROR=ON -DETE_SANITIZE=ON -DETE_BUILD_BENCH=OFF \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DETE_TEST_OBJECTS_FROM="$(cd "$BUILD_DIR" && pwd)"
    local slurm_rc=0
    wait "$slurm_pid" || slurm_rc=$?
    cat "$BUILD_DIR/slurm_test.log"
    if [ "$slurm_rc" -ne 0 ] && [ "$slurm_rc" -ne 77 ]; then
        echo "Slurm end-to-end test failed (exit $slurm_rc)" >&2
        return 1
    fi
    local profiles profile
    # Not `| head -n 1`: under pipefail, kernel_profiles killed by SIGPIPE would fail run.sh.
    mapfile -t profiles < <(kernel_profiles "$BUILD_DIR/ete")
    profile=${profiles[0]}
    log "unit tests under address/undefined sanitizers, kernels as $profile ($BUILD_DIR-asan)"
    # Four long runs are left to the Release pass: the relaunch and hang tests exercise the
    # supervisor's timers (the same trainer code runs under ASan in the other multi-rank tests),
    # the LoRA layout sweep repeats the layouts the plain and QAT-over-LoRA sweeps run, and the
    # 300-step 8-bit AdamW comparison is a numerics check (8-bit AdamW's code runs under ASan in
    # its resume and unit tests). Under ASan the first three took 22, 18 and 15 s (~30 s of the
    # pass's wall time at -j2).
    local asan_skip='*LoraEveryLayoutMatchesOneProcess*:*KilledAndHungRanksAreRelaunched*'
    asan_skip+=':*AHangNamesTheStuckRankBeforeTheTimeout*:*Adamw8bitTrainsLikeAdamW*'
    (
        unset ETE_OPENBLAS_FIXED
        # shellcheck disable=SC2086,SC2163  # the profile is words: VAR=value assignments
        export $profile ASAN_OPTIONS=detect_leaks=1
        sanitizer_tests "$BUILD_DIR-asan" "$asan_skip"
    )
    if ! wait "$fuzz_build"; then
        cat "$BUILD_DIR/fuzz_build.log"
        return 1
    fi
    log "fuzzing the safetensors, tokenizer.json and model dir readers, ${FUZZ_SECONDS:-60} core-seconds side by side ($BUILD_DIR-fuzz)"
    JOBS="$JOBS" FUZZ_BUILD_DIR="$BUILD_DIR-fuzz" fuzz/run_fuzz.sh
}

case "${1:-}" in
    demo) demo ;;
    test) run_tests ;;
    *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
