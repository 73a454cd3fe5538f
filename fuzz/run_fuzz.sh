#!/usr/bin/env bash
# fuzz/run_fuzz.sh — builds the libFuzzer targets in build-fuzz/ (clang, separate from the GCC
# build) — the safetensors reader, the tokenizer.json reader and the adapter / NF4 / integer
# model dir readers — and fuzzes each on a copy of its seeds (fuzz/seeds/; the tokenizer goldens
# and fuzz/tokenizer_seeds/; fuzz/model_dir_seeds/; the committed files are never modified) for a
# third of FUZZ_SECONDS of one core. The three run side by side on the machine's cores (JOBS), so
# the whole takes FUZZ_SECONDS / min(JOBS, 3): 30 s on 2 cores. Prints one summary line per
# target; exits non-zero on any crash, leak, timeout, OOM or sanitizer report, leaving the
# reproducer in build-fuzz/artifacts_<target>/.
# Env: FUZZ_SECONDS (default 60), JOBS (default nproc), FUZZ_BUILD_DIR (default
# <repo>/build-fuzz), CXX (default clang++-14, else clang++). Needs Debian packages clang and
# libclang-rt-14-dev.
# `run_fuzz.sh build` builds the targets and stops (run.sh builds them early, in the background).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
cxx="${CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
[[ -n "$cxx" ]] || { echo "run_fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }

cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
# A failed build says why (its output was discarded before, so CI failed without a word).
ninja -C "$build" safetensors_fuzz tokenizer_fuzz model_dirs_fuzz >"$build/build.log" 2>&1 ||
    { tail -n 30 "$build/build.log" >&2; echo "run_fuzz: the fuzz build failed" >&2; exit 1; }
[[ "${1:-}" == build ]] && exit 0

# fuzz NAME SECONDS MAX_LEN DICT SEED...: fuzzes build/NAME on a fresh copy of the seeds (the
# committed files are never modified); prints one summary line; returns 1 on any finding.
fuzz() {
    local name=$1 secs=$2 max_len=$3 dict=$4
    shift 4
    local corpus="$build/corpus_$name" artifacts="$build/artifacts_$name" log="$build/$name.log"
    rm -rf "$corpus" "$artifacts"
    mkdir -p "$corpus" "$artifacts"
    cp "$@" "$corpus"/
    local start rc elapsed last cov ft corp runs eps result
    start=$(date +%s)
    set +e
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
        UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
        "$build/$name" "$corpus" -max_total_time="$secs" -max_len="$max_len" \
        -timeout=10 -rss_limit_mb=2048 ${dict:+-dict="$dict"} -print_final_stats=1 \
        -artifact_prefix="$artifacts/" >"$log" 2>&1
    rc=$?
    set -e
    elapsed=$(($(date +%s) - start))
    # libFuzzer's last status line, e.g. "#123 DONE cov: 812 ft: 2400 corp: 310/40Kb ...".
    last="$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)"
    cov="$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")"
    ft="$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")"
    corp="$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")"
    runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log")"
    eps="$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log")"
    # A clean run exits 0 and leaves no artifact; anything else (crash, leak, timeout, OOM,
    # sanitizer report, uncaught non-ete::Error exception) fails the step.
    if [[ $rc -eq 0 ]] && [[ -z "$(ls -A "$artifacts")" ]] &&
        ! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
        result=PASS
    else
        result=FAIL
    fi
    echo "$name: $result in ${elapsed}s: ${runs:-?} runs (${eps:-?} exec/s)," \
        "cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?} (from $# seeds), rc $rc"
    if [[ $result == FAIL ]]; then
        grep -E -A 30 "$name: |ERROR: |runtime error:" "$log" | head -n 60 >&2 || true
        echo "run_fuzz: full log $log; reproducers: $(find "$artifacts" -type f -printf '%f ')" >&2
        return 1
    fi
}

# The targets run side by side, each for a third of the CPU time: on J cores (J <= 3) three
# processes for FUZZ_SECONDS / J of wall time get FUZZ_SECONDS / 3 of a core each, as one after
# the other would, in a Jth of the time. Each replays its seeds (crash_* reproducers) first; the
# summary lines come in the targets' order once all have ended.
jobs="${JOBS:-$(nproc)}"
((jobs >= 1 && jobs <= 3)) || jobs=$((jobs < 1 ? 1 : 3))
secs=$(((seconds + jobs - 1) / jobs))
out="$build/summaries"
rm -rf "$out"
mkdir -p "$out"
fuzz safetensors_fuzz "$secs" 4096 "$root/fuzz/safetensors.dict" "$root"/fuzz/seeds/* \
    >"$out/1" 2>&1 &
p1=$!
# tokenizer.json: the test goldens of four families and small files of every component.
fuzz tokenizer_fuzz "$secs" 65536 "" "$root"/tests/golden/tokenizers/{gpt2,llama2_legacy,llama2_metaspace,llama3}.json \
    "$root"/fuzz/tokenizer_seeds/* >"$out/2" 2>&1 &
p2=$!
# Adapter dirs, NF4 weights and quantization_config (fuzz/make_model_dir_seeds.sh).
fuzz model_dirs_fuzz "$secs" 16384 "" "$root"/fuzz/model_dir_seeds/* >"$out/3" 2>&1 &
p3=$!
status=0
for p in $p1 $p2 $p3; do wait "$p" || status=1; done
cat "$out"/1 "$out"/2 "$out"/3
exit $status
