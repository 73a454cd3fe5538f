#!/usr/bin/env bash
# fuzz/run_fuzz.sh — builds the safetensors libFuzzer target in build-fuzz/ (clang, separate from
# the GCC build) and fuzzes it for a bounded time on a copy of fuzz/seeds/ (the committed corpus
# is never modified). Prints one summary line; exits non-zero on any crash, leak, timeout, OOM or
# sanitizer report, leaving the reproducer in build-fuzz/artifacts/.
# Env: FUZZ_SECONDS (default 60), FUZZ_BUILD_DIR (default <repo>/build-fuzz), CXX (default
# clang++-14, else clang++). Needs Debian packages clang and libclang-rt-14-dev.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
cxx="${CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
[[ -n "$cxx" ]] || { echo "run_fuzz: clang++ not found (apt-get install clang)" >&2; exit 2; }

cmake -S "$root/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
# A failed build says why (its output was discarded before, so CI failed without a word).
ninja -C "$build" safetensors_fuzz >"$build/build.log" 2>&1 ||
    { tail -n 30 "$build/build.log" >&2; echo "run_fuzz: the fuzz build failed" >&2; exit 1; }

# Fresh corpus copy per run (the fuzzer adds to it; fuzz/seeds/ stays as committed).
corpus="$build/corpus"
artifacts="$build/artifacts"
rm -rf "$corpus" "$artifacts"
mkdir -p "$corpus" "$artifacts"
cp "$root"/fuzz/seeds/* "$corpus"/
log="$build/fuzz.log"

start=$(date +%s)
set +e
ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$build/safetensors_fuzz" "$corpus" -max_total_time="$seconds" -max_len=4096 \
    -timeout=10 -rss_limit_mb=2048 -dict="$root/fuzz/safetensors.dict" -print_final_stats=1 \
    -artifact_prefix="$artifacts/" >"$log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - start))

# libFuzzer's last status line, e.g. "#123 DONE cov: 812 ft: 2400 corp: 310/40Kb ... exec/s: 9000".
last="$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)"
cov="$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")"
ft="$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")"
corp="$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")"
runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log")"
eps="$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log")"
seeds="$(find "$root/fuzz/seeds" -type f | wc -l)"

# A clean run exits 0 and leaves no artifact; anything else (crash, leak, timeout, OOM,
# sanitizer report, uncaught non-ete::Error exception) fails the step.
if [[ $rc -eq 0 ]] && [[ -z "$(ls -A "$artifacts")" ]] &&
    ! grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    result=PASS
else
    result=FAIL
fi
echo "safetensors_fuzz: $result in ${elapsed}s: ${runs:-?} runs (${eps:-?} exec/s)," \
    "cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?} (from $seeds seeds), rc $rc"
if [[ $result == FAIL ]]; then
    grep -E -A 30 'safetensors_fuzz: |ERROR: |runtime error:' "$log" | head -n 60 >&2 || true
    echo "run_fuzz: full log $log; reproducers: $(find "$artifacts" -type f -printf '%f ')" >&2
    exit 1
fi
